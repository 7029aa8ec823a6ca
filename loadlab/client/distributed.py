"""Scale the load generator out: a Locust master in this process and N local worker processes.

Used by `loadlab run --processes N`. Workers on other hosts join a plain-Locust master the same
way (see locustfiles/openai_stream.py); records and context travel through loadlab.client.shipping.
A worker process that dies mid-run (kill -9, OOM) is noticed at once by its PID: its requests in
flight are recorded as aborted and the run goes on with the others, without restarting it (see
MasterShipper.worker_lost).
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import MasterRunner

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import time

import gevent

from loadlab.client.shipping import MasterShipper, worker_id
from loadlab.clock import now
from loadlab.errors import UserError
from loadlab.numbers import format_value

CONNECT_TIMEOUT_S = 60.0  # all workers must have joined within this time
EXIT_GRACE_S = 10.0  # after quit, workers get this long to exit before they are killed
WATCH_S = 0.1  # how often the master checks that its worker processes are alive
LATE_MESSAGES_S = 0.25  # what a dead worker sent just before it died is received within this


def start_master_with_workers(environment: Environment, n: int, timeout: float = CONNECT_TIMEOUT_S) -> MasterRunner:
    """Make `environment`'s runner a master on 127.0.0.1 and start `n` local worker processes.

    Returns once all `n` workers have joined (UserError if they do not within `timeout`). The
    caller drives it like a local runner (`runner.start(users, rate)`, `runner.quit()`); quitting
    collects every worker's last records, then the worker processes are ended by their PIDs.
    `environment.loadlab` (the ClientContext) must be set before steps start.
    """
    if n < 1:
        raise UserError(f"processes must be >= 1, got {n}")
    # Port 0: ZeroMQ picks a free port itself (no race with other programs for it).
    runner = environment.create_master_runner(master_bind_host="127.0.0.1", master_bind_port=0)
    port = runner.server.port
    shipper = MasterShipper(environment)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "loadlab.client.worker", "--master-port", str(port)], preexec_fn=_prepare_worker
        )
        for _ in range(n)
    ]
    atexit.register(_kill, procs)  # a crash of this process must not leave workers behind
    runner.greenlet.spawn(_end_with_runner, procs)
    runner.greenlet.spawn(_watch_workers, procs, shipper)

    deadline = time.monotonic() + timeout
    while len(shipper.ready_workers()) < n:
        exited = [p for p in procs if p.poll() is not None]
        if exited or time.monotonic() > deadline:
            runner.quit()
            why = (
                f"worker process exited with code {exited[0].returncode}"
                if exited
                else f"only {len(shipper.ready_workers())} of {n} joined after {format_value(timeout, 's')}"
            )
            raise UserError(f"could not start {n} load-generator processes: {why}")
        gevent.sleep(0.05)
    return runner


def _prepare_worker() -> None:
    """In the worker, before exec. Ctrl-C in a terminal, and a SIGTERM to the process group (a
    CI job's time limit), reach the workers too: they ignore both (Python keeps an inherited
    SIG_IGN), so that this process stops the run and still collects their last records. The
    worker is killed when this process dies, even by kill -9 (Linux), and by _kill."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: Locust's heartbeat ends orphans after 60 s
        pass


def _end_with_runner(procs: list[subprocess.Popen]) -> None:
    """Lives in the runner's greenlet group: when the runner quits (and kills the group), end the workers."""
    try:
        while True:
            gevent.sleep(3600)
    finally:
        deadline = time.monotonic() + EXIT_GRACE_S
        for p in procs:  # they got Locust's quit message: most exit on their own
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        _kill(procs)


def _watch_workers(procs: list[subprocess.Popen], shipper: MasterShipper) -> None:
    """Lives in the runner's greenlet group: a worker that exits before the run's final collection
    (or with an error code during it) died; tell the shipper at once. Locust's own heartbeat would
    notice only seconds later, and cannot tell a dead worker from a slow one."""
    alive = list(procs)
    while alive:
        gevent.sleep(WATCH_S)
        dead = [p for p in alive if p.poll() is not None]
        if not dead:
            continue
        at = now()
        # Its last messages (a request announced just before the kill) may still be queued here:
        # let them arrive, or that request would be neither recorded nor counted as aborted.
        gevent.sleep(LATE_MESSAGES_S)
        for p in dead:
            alive.remove(p)
            if not (shipper.closing and p.returncode == 0):
                shipper.worker_lost(worker_id(p.pid), _exit_reason(p.returncode), at)


def _exit_reason(code: int) -> str:
    """How a process ended, from its Popen return code (negative: the signal that killed it)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _kill(procs: list[subprocess.Popen]) -> None:
    """End the workers still there (they ignore SIGTERM, see _prepare_worker)."""
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
