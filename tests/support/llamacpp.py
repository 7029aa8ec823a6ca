"""llama.cpp's `llama-server` for the tests about llama.cpp.

The program is $LOADLAB_LLAMACPP_SERVER, else the repository's .llamacpp/bin/llama-server (`make
llamacpp`, which `make test` runs first); without one the tests about llama.cpp skip and say so.
The tiny random-weight Llama it serves is a GGUF file written once into the user's cache folder
(loadlab/lab/gguf_model.py). It starts in a second or two.
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
    DEFAULT_LLAMACPP_SERVER,
    LLAMACPP_SERVER_ENV,
    llamacpp_engine,
    llamacpp_missing,
    tiny_gguf,
)
from loadlab.lab.processes import NotReady, end_child, start_child, wait_healthy
from tests.support.procs import REPO, free_port


def server_program() -> Path:
    """$LOADLAB_LLAMACPP_SERVER, else this repository's .llamacpp/bin/llama-server."""
    return Path(os.environ.get(LLAMACPP_SERVER_ENV) or REPO / DEFAULT_LLAMACPP_SERVER)


def missing() -> str:
    """Why the tests about llama.cpp cannot run here ("" when they can)."""
    return llamacpp_missing(server_program())


needs_llamacpp = pytest.mark.skipif(bool(missing()), reason=missing() or "llama-server is here")


@dataclass
class LlamaServer:
    """A running llama-server: its URL, PID and log."""

    url: str
    pid: int
    log: Path

    def get(self, path: str) -> requests.Response:
        """GET `path` on it."""
        return requests.get(self.url + path, timeout=30)


@contextmanager
def llama_server(log: Path, *flags: str, niceness: int = 10) -> Iterator[LlamaServer]:
    """llama-server serving the tiny Llama on a free loopback port with `flags`, until the block
    ends, then ended by its PID. Niced, so that on a busy 2-core host the load generator under
    test is not the process starved. NotReady (with its log's end) if it never answers."""
    engine = llamacpp_engine(server_program(), tiny_gguf())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        child = start_child(engine.command(flags, port, "cpu"), out, nice=niceness)
    try:
        started = time.monotonic()
        try:
            wait_healthy(url + "/health", child, engine.ready_timeout)
        except NotReady as e:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise NotReady(f"{e} after {time.monotonic() - started:.0f} s; server.log ends:\n{tail}") from None
        yield LlamaServer(url, child.pid, log)
    finally:
        end_child(child)
