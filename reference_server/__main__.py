"""`python -m reference_server`: serve the engine over the OpenAI-compatible HTTP API.

Every EngineConfig field is a flag (`max_num_seqs` -> `--max-num-seqs`). Ready when GET /health
answers 200; SIGINT/SIGTERM stop the HTTP server, then the engine (and its tensor-parallel ranks).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import signal
import socket
import sys
from dataclasses import MISSING, fields

from reference_server.api.connections import DEFAULT_IDLE_TIMEOUT, HEADER_TIMEOUT
from reference_server.config import CHOICES, EngineConfig

# The key clients must send, when --api-key is not given: an environment variable keeps it out of `ps`.
API_KEY_ENV = "LOADLAB_SERVER_API_KEY"

FLAG_HELP = {
    "preset": "model shape: tiny, small, or a real model's (see PRESETS in reference_server/shapes.py)",
    "weights": "local safetensors file with Hugging Face tensor names (empty: seeded random weights)",
    "device": "where the model runs",
    "dtype": "weights and activations type",
    "seed": "seed of the random weights",
    "batching": "continuous batching, or static batches (the A/B baseline)",
    "kv": "paged KV cache, or one contiguous slab per sequence (the A/B baseline)",
    "max_model_len": "context window in tokens (0 = the preset's max position)",
    "max_num_seqs": "most sequences running at once",
    "max_num_batched_tokens": "token budget of one engine step",
    "long_prefill_token_threshold": "cap on one prompt's share of a step (0 = no cap)",
    "block_size": "tokens per KV-cache block",
    "num_kv_blocks": "KV-cache blocks (0 = derive from --kv-memory-gb)",
    "kv_memory_gb": "memory for the KV cache when --num-kv-blocks is 0",
    "static_batch_timeout": "static batching: seconds to wait for a batch to fill",
    "tensor_parallel": "ranks to shard the model over (torch.distributed)",
    "cpu_threads": "torch threads per rank on CPU (0 = all cores but one, split over the ranks)",
    "max_waiting": "waiting-queue limit; beyond it requests get 429",
    "prefix_caching": "reuse the KV blocks of prompt prefixes seen before (paged KV only)",
    "model_name": "the model id clients see in /v1/models",
    "twin": "GPU:MODEL[:tpN] (e.g. h100:llama-3-8b): keep time like that GPU serving that model instead of "
    "running it (docs/twin.md); sets the model and the KV pool, ignores --preset and --device",
    "output_text": "what the model writes: printable ASCII, or utf8 with CJK characters and emoji too (one "
    "byte a token, as byte-fallback tokenizers stream them; the twin writes ASCII)",
    "gpu_memory_utilization": "with --twin: share of each simulated GPU's memory the engine takes (weights, "
    "activations, then KV)",
}


def build_parser() -> argparse.ArgumentParser:
    """The command line: server flags, then one flag per EngineConfig field (no torch import: --help is fast)."""
    parser = argparse.ArgumentParser(
        prog="python -m reference_server",
        description="Serve the loadlab reference engine over an OpenAI-compatible API.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=8000, help="port to bind")
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"require `Authorization: Bearer KEY` (not on /health, /metrics); else ${API_KEY_ENV}",
    )
    parser.add_argument(
        "--idle-timeout",
        type=_seconds,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help="close a connection idle this long, or this slow to send a body; a new one must send "
        f"its headers within min(this, {HEADER_TIMEOUT:g}) s",
    )
    parser.add_argument(
        "--export-tokenizer",
        metavar="DIR",
        default=None,
        help="write the tokenizer as a Hugging Face folder to DIR and exit",
    )
    engine = parser.add_argument_group("engine")
    for f in fields(EngineConfig):
        default = f.default if f.default is not MISSING else None
        flag, text = "--" + f.name.replace("_", "-"), FLAG_HELP.get(f.name, f.name.replace("_", " "))
        if isinstance(default, bool):  # --x / --no-x
            engine.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=text)
        else:
            engine.add_argument(flag, type=type(default), default=default, choices=CHOICES.get(f.name), help=text)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse flags, then export the tokenizer or serve until a signal; bad input is one line, exit 2."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = EngineConfig(**{f.name: getattr(args, f.name) for f in fields(EngineConfig)})
    if args.export_tokenizer:
        from reference_server.tokenizer import ByteTokenizer

        print(ByteTokenizer().save_pretrained(args.export_tokenizer))
        return 0
    try:
        listener = _listen(args.host, args.port)  # before loading the model: a taken port fails at once
        asyncio.run(_serve(config, listener, args.api_key or os.environ.get(API_KEY_ENV) or None, args.idle_timeout))
    except (ValueError, OSError) as e:  # a bad engine setting, a port already in use
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a signal before the handlers were installed
        return 130
    return 0


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except (OSError, OverflowError) as e:  # taken port, no such address, port out of range
        raise OSError(f"cannot listen on {host}:{port}: {getattr(e, 'strerror', None) or e}") from None


async def _serve(config: EngineConfig, listener: socket.socket, api_key: str | None, idle_timeout: float) -> None:
    from aiohttp import web

    from reference_server.api import build_app
    from reference_server.api.connections import ConnectionGuard, LoopErrors
    from reference_server.engine import AsyncEngine

    # Handlers first: a signal while the model loads still shuts down the engine and its ranks.
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.set_exception_handler(LoopErrors())
    engine = AsyncEngine(config)
    await engine.start()
    connections = ConnectionGuard(idle_timeout)
    # handler_cancellation: a client that disconnects cancels its handler at once, which aborts
    # its sequences (instead of noticing only at the next write). keepalive_timeout: aiohttp closes
    # a connection left without a request in progress this long. lingering_time: how long aiohttp
    # reads the rest of a body it answered early (a 408, a 413) before closing (its default is 10 s).
    runner = web.AppRunner(
        build_app(engine, api_key, connections),
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=2.0,
        keepalive_timeout=idle_timeout,
        lingering_time=connections.header_timeout,
    )
    server: asyncio.Server | None = None
    try:
        await runner.setup()
        assert runner.server is not None
        server = await loop.create_server(connections.protocol_factory(runner.server), sock=listener, backlog=128)
        host, port = listener.getsockname()[:2]
        print(f"reference_server: serving {engine.model_name} on http://{host}:{port}", file=sys.stderr, flush=True)
        await stop.wait()
        print("reference_server: shutting down", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.close()  # no new connections
        await engine.shutdown()  # ends open streams first, so the HTTP shutdown does not wait on them
        await runner.cleanup()


if __name__ == "__main__":
    sys.exit(main())
