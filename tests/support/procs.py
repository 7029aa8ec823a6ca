"""Start real processes for tests and end them by PID."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def sigint_default() -> None:
    """`preexec_fn` for a child that a test stops with SIGINT (Ctrl-C): a shell that started the
    tests in the background hands them SIGINT ignored, children inherit that, and Python keeps it
    ignored, so the child would never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def python_json(*args: str, timeout: float = 60.0) -> dict:
    """Run `python *args` in a fresh process (for code that must import Locust, which patches the
    standard library, or gevent-patch it itself) and return the JSON object its last line prints."""
    out = subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until GET url answers 200; fail early if proc exits."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout}s: {last}")


class Proc:
    """A subprocess that is ended (by its PID) when the context exits."""

    def __init__(
        self,
        args: list[str],
        ready_url: str | None = None,
        timeout: float = 60.0,
        env: dict[str, str] | None = None,
        log: Path | None = None,
    ) -> None:
        self.args = args
        self.ready_url = ready_url
        self.timeout = timeout
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.log = log
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Proc:
        out = open(self.log, "wb") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self.args, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT if self.log else subprocess.DEVNULL
        )
        if self.ready_url:
            try:
                wait_http(self.ready_url, self.timeout, self.proc)
            except Exception:
                self.stop()
                raise
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Signal the process (by PID), wait, escalate to SIGKILL; return its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(5)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def loadlab(*args: str, timeout: float = 300.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the `loadlab` console script to completion and capture its output."""
    return subprocess.run(
        [str(BIN / "loadlab"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


class CpuHogs:
    """`count` processes that spin on `cpus` (all cores for ()) at the default priority until the
    context ends; ended by their PIDs. A niced process on those cores gets almost no CPU meanwhile."""

    def __init__(self, count: int, cpus: tuple[int, ...] = ()) -> None:
        self.count = count
        self.cpus = cpus
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> CpuHogs:
        pin = pinned_to(self.cpus) if self.cpus else None
        self.procs = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin) for _ in range(self.count)
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)


def pinned_to(cpus: tuple[int, ...]) -> Callable[[], None]:
    """`preexec_fn` for a child pinned to `cpus`."""
    return lambda: os.sched_setaffinity(0, cpus)


@contextmanager
def on_freest_core() -> Iterator[int]:
    """Pin this process, and so the children it starts in the block, to the core other work leaves
    freest (loadlab.lab.processes.freest_cores): a test that needs a quiet core takes one."""
    from loadlab.lab.processes import freest_cores

    allowed = os.sched_getaffinity(0)
    core = freest_cores()[0]
    os.sched_setaffinity(0, (core,))
    try:
        yield core
    finally:
        os.sched_setaffinity(0, allowed)
