"""Ctrl-C and SIGTERM reach the run's main greenlet (loadlab/conductor/interrupts.py), also when
the signal finds another greenlet running, one that swallows KeyboardInterrupt as Locust's
master `client_listener` does; and the run loop can still tell that one came where code it
called swallowed it (Locust's `runner.start()`).

Each case runs in a process of its own, patched by Locust as `loadlab run` is. The signal is sent
by the greenlet that is running, to its own process: its handler runs in that greenlet's frame,
every time, not by the luck of scheduling.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.procs import REPO, sigint_default

SCRIPT = """
from locust import User  # patches the standard library with gevent, as the run does

import os, signal, sys
import gevent

{install}

def signal_here():
    os.kill(os.getpid(), signal.{signal})
    for _ in range(100_000):  # the handler runs in this frame, between two of these
        pass

def listener():
    # Locust's MasterRunner.client_listener: a KeyboardInterrupt raised in here is dropped.
    try:
        signal_here()
    except KeyboardInterrupt:
        print("swallowed", flush=True)
    gevent.sleep(60)

try:
    if "{where}" == "listener":
        gevent.spawn(listener)
    elif "{where}" == "main":
        signal_here()
    elif "{where}" == "main, swallowed":  # as Locust's runner.start() does
        try:
            signal_here()
        except KeyboardInterrupt:
            print("swallowed", flush=True)
        print("interrupted():", interrupted(), flush=True)
        sys.exit(0)
    elif "{where}" == "held":  # as a conductor is built and closed
        with held():
            signal_here()  # in the main greenlet
            gevent.spawn(signal_here).join()  # in another: its throw into this one is dropped
            gevent.sleep(0.1)
        print("held, interrupted():", interrupted(), flush=True)
        sys.exit(0)
    gevent.sleep(10)
except KeyboardInterrupt:
    print("main interrupted", flush=True)
    sys.exit(130)
print("the run went on", flush=True)
"""
DELIVER = (
    "from loadlab.conductor.interrupts import deliver_interrupts_to_main, held, interrupted\n"
    "deliver_interrupts_to_main()"
)
PYTHONS_OWN = "signal.signal(signal.SIGTERM, signal.default_int_handler)"


def run(install: str, sig: str, where: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(install=install, signal=sig, where=where)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=sigint_default,
    )


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_that_finds_a_swallowing_greenlet_running_still_interrupts_the_main_one(sig):
    result = run(DELIVER, sig, "listener")
    assert result.returncode == 130, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["main interrupted"]


def test_a_signal_that_finds_the_main_greenlet_running_interrupts_it_there():
    result = run(DELIVER, "SIGTERM", "main")
    assert result.returncode == 130 and result.stdout.splitlines() == ["main interrupted"], result.stderr


def test_a_signal_swallowed_by_code_the_main_greenlet_called_is_still_known():
    result = run(DELIVER, "SIGTERM", "main, swallowed")
    assert result.stdout.splitlines() == ["swallowed", "interrupted(): True"], result.stderr


def test_a_signal_while_held_raises_nothing_and_is_known():
    """While a conductor is built or closed: a signal there, from any greenlet, raises nothing (a
    half-built or half-closed run folder would stay `running`); the run loop asks after."""
    result = run(DELIVER, "SIGTERM", "held")
    assert result.returncode == 0 and result.stdout.splitlines() == ["held, interrupted(): True"], result.stderr


def test_pythons_own_handler_loses_the_signal_in_a_swallowing_greenlet():
    """Why the handler is needed: Python's raises KeyboardInterrupt where the signal finds the
    interpreter, here the listener, and the main greenlet never hears of it."""
    result = run(PYTHONS_OWN, "SIGTERM", "listener")
    assert result.returncode == 0 and result.stdout.splitlines() == ["swallowed", "the run went on"]
