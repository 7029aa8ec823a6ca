"""The reference server's CPU matmul: a decode step of the `wide` preset (0.5 GB of float32 weights)
with torch's plain weights and with oneDNN's packed ones (reference_server/model.py,
`pack_for_cpu`), at 1 to 8 sequences. A step whose time is its weight reads stays flat as the
batch grows; the plain matmul of 2-8 rows does not on this project's hosts.

    .venv/bin/python bench/packed_weights.py [--threads 1] [--steps 20] [--repeat 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_server.attention import AttentionMetadata, KVCache
from reference_server.model import CausalLM, load_model, pack_for_cpu
from reference_server.parallel import TensorParallel
from reference_server.shapes import PRESETS

WIDE = PRESETS["wide"]
CONTEXT = 32  # tokens each sequence has cached (two blocks of 16)
BLOCK = 16


def decode_step_ms(model: CausalLM, batch: int, steps: int) -> float:
    """The mean time of `steps` decode steps of `batch` sequences (after two unmeasured ones)."""
    cache = KVCache(
        WIDE.num_layers, 2 * batch, BLOCK, WIDE.num_kv_heads, WIDE.head_dim, torch.float32, torch.device("cpu")
    )
    tables = torch.arange(2 * batch).view(batch, 2)
    meta = AttentionMetadata(
        tables[:, 1] * BLOCK + CONTEXT % BLOCK,
        num_decodes=batch,
        decode_tables=tables,
        decode_len=CONTEXT,
        decode_mask=torch.ones(batch, 1, 1, CONTEXT, dtype=torch.bool),
    )
    ids, positions = torch.randint(0, WIDE.vocab_size, (batch,)), torch.full((batch,), CONTEXT - 1)
    with torch.inference_mode():
        for _ in range(2):
            model.logits(model(ids, positions, meta, cache))
        started = time.perf_counter()
        for _ in range(steps):
            model.logits(model(ids, positions, meta, cache))
    return (time.perf_counter() - started) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the server's on a 2-core host: 1)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--batches", default="1,2,4,8")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    print(f"wide preset, float32, {args.threads} thread(s): decode step in ms at batch {', '.join(map(str, batches))}")
    for weights in ("plain", "packed"):
        model = load_model(WIDE, TensorParallel(), torch.float32, torch.device("cpu"))
        if weights == "packed":
            pack_for_cpu(model)
        for _ in range(args.repeat):
            times = [decode_step_ms(model, b, args.steps) for b in batches]
            print(f"{weights:>6}: " + "  ".join(f"{t:.1f}" for t in times))


if __name__ == "__main__":
    main()
