"""`loadlab tune --verify` on a real vLLM (the CPU build), started by tune itself as users start
it (not pinned, beside the load generator): the verdict's knob turned one step moves where the
throughput saturates, and its peak, the way its class predicts; a rival claim is refuted when its
knob buys no throughput."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from loadlab.lab.engines import default_model_folder, make_tiny_llama, vllm_engine
from tests.support.procs import loadlab
from tests.support.vllm import needs_vllm, vllm_python

# vLLM takes the host's cores while it runs; its start alone takes one to three minutes here.
pytestmark = [pytest.mark.serial, needs_vllm]

# 8 s steps to 8 users: the knee of a cap or a pool of 2 requests shows by 4 users.
STEPS = ("--max", "8", "--max-steps", "5", "--step-duration", "8", "--no-gpu", "--start-timeout", "900")
STEPS += ("--slo", "client_limited=any")  # a busy host may strain the client: this is about the server


def serve(*flags: str) -> tuple[str, dict[str, str]]:
    """The serve command of the tiny Llama with `flags` (its port left to tune), and its environment."""
    python = vllm_python()
    engine = vllm_engine(python, make_tiny_llama(python, default_model_folder()))
    # The command's own port is overridden by the last --port, tune's (vLLM's parser takes the last).
    return shlex.join([*engine.command(flags, 0, "cpu"), "--port", "{port}"]), engine.env


def base_run(tmp_path: Path, command: str, env: dict[str, str], workload: tuple[str, ...]) -> dict:
    """tune's one configuration of `command`: its figures (the verdict among them)."""
    out = tmp_path / "base"
    result = loadlab("tune", "--serve", command, *STEPS, *workload, "--out", str(out), timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "tune.json").read_text())["configurations"][0]["figures"]


def verify(
    tmp_path: Path, command: str, env: dict[str, str], workload: tuple[str, ...], *claim: str
) -> tuple[str, dict]:
    """`tune --verify` of the base run (its console, flattened; its one verification)."""
    run = tmp_path / "base" / "default" / "run"
    out = tmp_path / "verify"
    args = ("tune", "--verify", str(run), *claim, "--serve", command, *STEPS, *workload, "--out", str(out))
    result = loadlab(*args, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    (verification,) = json.loads((out / "tune.json").read_text())["verifications"]
    return " ".join(result.stdout.split()), verification


DECODE = ("--input-len", "32", "--output-len", "64")


def test_a_cap_of_two_is_verified_by_a_cap_of_eight(tmp_path: Path) -> None:
    command, env = serve("--max-model-len", "2048", "--max-num-seqs", "2")
    figures = base_run(tmp_path, command, env, DECODE)
    # Past the knee the queue shows the cap (scheduling); where the knee falls at 2 users, nothing
    # waits yet and that step may read memory bandwidth, whose knob on vLLM is the same cap (bigger
    # batches, knobs.py; seen in 1 of 3 runs): the verification then tests that reading.
    verdict = figures["constraint"]
    assert verdict in ("scheduling", "memory_bandwidth"), figures
    said, verification = verify(tmp_path, command, env, DECODE)
    assert f"verified: {verdict} (--max-num-seqs 2 -> 8): throughput saturates at" in said, said
    assert verification["outcome"] == "verified"
    assert verification["throughput"]["low"] > verification["throughput"]["noise"]  # beyond the noise


# 5 blocks of 128 tokens (the CPU build's block size; one is vLLM's own) hold two requests whose
# 140-token prompts take 2 blocks each from their admission, filling the pool; 10 hold four. The
# answers are long enough that decode, which more sequences at once speed up, is most of the work.
KV_LOAD = ("--api", "completions", "--input-len", "140", "--output-len", "64")


def test_a_small_kv_pool_is_verified_by_a_pool_twice_as_large(tmp_path: Path) -> None:
    command, env = serve("--max-model-len", "512", "--num-gpu-blocks-override", "5")
    figures = base_run(tmp_path, command, env, KV_LOAD)
    assert figures["constraint"] == "kv_capacity", figures
    said, verification = verify(tmp_path, command, env, KV_LOAD)
    assert "verified: kv_capacity (--num-gpu-blocks-override 5 -> 10): throughput saturates at" in said, said
    assert verification["outcome"] == "verified"


# 900-token prompts, 2-token answers: each prompt's prefill sets the pace, not the cap of 4.
PREFILL_LOAD = ("--api", "completions", "--input-len", "900", "--output-len", "2")


def test_on_a_prefill_bound_run_raising_the_cap_is_refuted(tmp_path: Path) -> None:
    command, env = serve("--max-model-len", "2048", "--max-num-seqs", "4")
    figures = base_run(tmp_path, command, env, PREFILL_LOAD)
    assert figures["constraint"] == "compute", figures
    said, verification = verify(tmp_path, command, env, PREFILL_LOAD, "--claim", "scheduling")
    assert "refuted: scheduling (--max-num-seqs 4 -> 16): throughput saturates at" in said, said
    assert verification["outcome"] == "refuted"
