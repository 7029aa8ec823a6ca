"""The load generator beside a local server: moved to the cores the server uses least."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from loadlab.priority import autogroup_nice
from loadlab.urls import is_loopback
from tests.support.procs import free_port, wait_http

# A stand-in server: an HTTP listener whose process, bound to one core, has spent CPU there.
SERVER = textwrap.dedent(
    """
    import http.server, os, sys, time
    os.sched_setaffinity(0, {int(sys.argv[2])})
    end = time.process_time() + 0.5
    while time.process_time() < end:
        pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
    """
)
# Placement changes the calling process: it runs in a child of its own (in_child).
PLACE = (
    "import json, sys; from dataclasses import asdict; from loadlab.conductor.placement import place_beside_server; "
)
PLACE += "print(json.dumps(asdict(place_beside_server(sys.argv[1], int(sys.argv[2])))))"


def in_child(code: str, *args: str) -> Any:
    """What `code`, run in a child of its own, prints as JSON."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def place(url: str, pid: int = 0) -> dict:
    return in_child(PLACE, url, str(pid))


@contextmanager
def stand_in_server(core: int) -> Iterator[tuple[str, subprocess.Popen]]:
    """The stand-in server on `core`, answering: its /v1 URL and its process; killed after."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(core)])
    try:
        wait_http(f"http://127.0.0.1:{port}/", proc=server)
        yield f"http://127.0.0.1:{port}/v1", server
    finally:
        server.kill()
        server.wait()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to move between")
def test_the_load_generator_takes_the_core_a_local_server_used_least():
    cores = sorted(os.sched_getaffinity(0))
    with stand_in_server(cores[0]) as (url, server):
        found = place(url)
        assert found["server_pids"][0] == server.pid
        assert cores[0] not in found["client_cores"] and len(found["client_cores"]) == max(1, len(cores) // 4)
        if os.geteuid() == 0:
            assert found["nice"] == -5
            # with autogroups, its session's too: a nice value alone weighs only within a session
            assert ("at nice -5 (its session too)" in found["lines"][0]) == (autogroup_nice() is not None)
        assert f"PID {server.pid}) is on this host: the load generator runs on core" in found["lines"][0]
        assert f"the server under `taskset -c {cores[0]}" in found["lines"][1]
        # --server-pid names it as well as the port does.
        assert place("http://127.0.0.1:1/", server.pid)["server_pids"][0] == server.pid


# Inside the block and after it: this process's cores and nice value.
BESIDE = "import json, os, sys; from loadlab.conductor.placement import beside_server\n"
BESIDE += "seen = lambda: [sorted(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0)]\n"
BESIDE += "with beside_server(sys.argv[1], int(sys.argv[2])):\n    inside = seen()\n"
BESIDE += "print(json.dumps([inside, seen()]))"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to move between")
def test_after_the_sweep_the_load_generator_is_back_where_it_was():
    # tune starts its next server from this process: not on the load generator's cores, at its priority.
    cores = sorted(os.sched_getaffinity(0))
    with stand_in_server(cores[0]) as (url, server):
        inside, after = in_child(BESIDE, url, str(server.pid))
    assert inside[0] != cores and after == [cores, os.getpriority(os.PRIO_PROCESS, 0)]
    if os.geteuid() == 0:
        assert inside[1] == -5


def test_a_server_on_another_host_is_left_alone_and_an_unfound_one_is_said():
    assert place("http://10.1.2.3:8000") == {"server_pids": [], "client_cores": [], "nice": None, "lines": []}
    unfound = place(f"http://127.0.0.1:{free_port()}")
    assert unfound["client_cores"] == [] and "its process was not found: pass --server-pid" in unfound["lines"][0]
    assert is_loopback("http://localhost:8000") and is_loopback("http://[::1]:8000")
    assert is_loopback("127.0.0.1:8000") and not is_loopback("http://10.0.0.1")
