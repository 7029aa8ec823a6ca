"""Why the load generator fell short: its own work or a starving host, and the advice for each.

The figures are those recorded on the runs that showed the difference: a real vLLM (CPU build)
starving the client on a 2-core host (client 0.07 cores, event-loop lag p99 0.5-3 s) and 1500
users from one process against `loadlab mock` (lag p99 182 ms, the process near a core).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from loadlab.analyze.clientcause import HostLoad, advice, cause, host_load, server_is_local
from loadlab.lab.processes import freest_cores
from loadlab.metrics.verdicts import OWN_WORK, STARVED, UNEXPLAINED
from loadlab.store.reader import SUMMARY_JSON
from tests.support.procs import BIN, CpuHogs, Proc, free_port, pinned_to

VLLM_STARVED = {"client_cpu_p90": 0.07, "client_loop_lag_p99": 1.2, "achieved_concurrency_ratio": 0.79}
MANY_USERS = {"client_cpu_p90": 0.97, "client_loop_lag_p99": 0.182, "achieved_concurrency_ratio": 0.89}
BUSY_HOST = HostLoad(busy_cores=1.95, cores=2, server_local=True)
IDLE_HOST = HostLoad(busy_cores=0.6, cores=2, server_local=True)


def test_a_client_near_a_core_is_its_own_work_and_more_processes_help():
    assert cause(MANY_USERS, IDLE_HOST) == OWN_WORK
    [line] = advice(OWN_WORK, MANY_USERS, IDLE_HOST, processes=1)
    assert "own work" in line and "--processes 2" in line


def test_own_work_on_a_saturated_host_sends_the_extra_processes_elsewhere():
    lines = advice(OWN_WORK, MANY_USERS, BUSY_HOST, processes=2)
    assert "--processes 4" in lines[0] and "another host" in lines[1] and "the server on the same host" in lines[1]


def test_low_own_cpu_long_lag_and_a_saturated_host_is_starved_and_names_the_cores():
    assert cause(VLLM_STARVED, BUSY_HOST) == STARVED
    first, pinning = advice(STARVED, VLLM_STARVED, BUSY_HOST, processes=1)
    assert "starved, not overloaded" in first and "more processes will not help" in first
    assert "1.95 of its 2 cores busy, the server on the same host" in first
    assert "`taskset -c 1 loadlab run ...`" in pinning and "`taskset -c 0`" in pinning
    assert "VLLM_CPU_OMP_THREADS_BIND=0" in pinning


def test_a_client_kept_off_its_cpu_is_starved_though_the_host_has_an_idle_core():
    # Pinned to the server's core (the lab's client scenario): the other core may idle.
    waited = {**VLLM_STARVED, "client_run_wait_ratio": 0.8}
    assert cause(waited, IDLE_HOST) == STARVED
    assert "kept waiting for a CPU 80 % of the time" in advice(STARVED, waited, IDLE_HOST, 1)[0]


def test_low_own_cpu_and_long_lag_without_a_busy_host_or_a_wait_is_unexplained():
    assert cause(VLLM_STARVED, IDLE_HOST) == UNEXPLAINED
    assert cause(VLLM_STARVED, None) == UNEXPLAINED
    [line] = advice(UNEXPLAINED, VLLM_STARVED, None, 1)
    assert "its CPU not sampled" in line and "another host" in line


@pytest.mark.parametrize(
    ("cores", "processes", "client", "server"),
    [(2, 1, "1", "0"), (2, 4, "1", "0"), (16, 1, "15", "0-14"), (16, 4, "12-15", "0-11"), (8, 8, "4-7", "0-3")],
)
def test_the_pinning_advice_gives_the_client_one_core_per_process_and_the_server_the_rest(
    cores, processes, client, server
):
    host = HostLoad(busy_cores=cores, cores=cores, server_local=True)
    pinning = advice(STARVED, VLLM_STARVED, host, processes)[1]
    assert f"`taskset -c {client} loadlab run ...`" in pinning and f"`taskset -c {server}`" in pinning


def test_a_one_core_host_can_only_send_the_client_elsewhere():
    host = HostLoad(busy_cores=1.0, cores=1, server_local=True)
    assert advice(STARVED, VLLM_STARVED, host, 1)[1] == "this host has one core: run the load generator on another host"


def _samples(rows: list[tuple[float, str, str, float, dict]]) -> pd.DataFrame:
    columns = ["time", "source", "signal", "value", "labels"]
    return pd.DataFrame([(t, src, name, v, json.dumps(lab)) for t, src, name, v, lab in rows], columns=columns)


def test_host_load_takes_the_busiest_reading_and_needs_the_core_count():
    samples = _samples(
        [(t, "client", "client_host_cpu", 1.9, {"worker": "a", "cores": "2"}) for t in range(5)]
        + [(t, "client", "client_host_cpu", 1.0, {"worker": "b", "cores": "2"}) for t in range(5)]
        + [(t, "host", "host_cpu", 1.9, {}) for t in range(5)]  # an older run's: no core count
    )
    load = host_load(samples, server_local=None)
    assert load is not None and load.busy_cores == pytest.approx(1.9) and load.cores == 2 and load.saturated
    assert host_load(samples[samples["source"] == "host"], None) is None
    assert host_load(samples[samples["source"] == "host"], None, cores_known=2).saturated  # run.json's host
    assert host_load(samples.iloc[:0], None) is None


def test_the_server_is_local_when_its_process_was_sampled_or_its_url_is_loopback():
    empty = _samples([])
    sampled = _samples([(0, "host", "process_cpu", 0.5, {"role": "server", "pid": "1"})])
    assert server_is_local("http://10.0.0.5:8000", sampled) is True
    assert server_is_local("http://127.0.0.1:8000", empty) is True
    assert server_is_local("http://localhost:8000/v1", empty) is True
    assert server_is_local("https://api.example.com", empty) is None
    assert math.isnan(HostLoad(1.0, 0, None).busy_ratio)


@pytest.mark.serial  # it starves one core on purpose: not beside other tests
def test_a_load_generator_starved_of_its_core_is_told_from_one_doing_too_much(tmp_path):
    """For real: `loadlab run` pinned to the core other work leaves freest against `loadlab mock`; once
    its step has begun, it is reniced to 19 and two spinning processes take that core for the
    step's length (its start-up and its end, which need CPU too, run free at the default priority:
    the test stays bounded on a busy host, and other work that keeps another core busy is not in
    its way). Its users are not kept in flight, yet it barely runs: starved, told so, and given
    the cores to pin."""
    core = freest_cores()[0]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = tmp_path / "run"
    args = ["run", "--url", url, "--concurrency", "64", "--step-duration", str(STEP_S), "--output-len", "16"]
    with Proc([str(BIN / "loadlab"), "mock", "--port", str(port), "--itl", "0.001"], ready_url=f"{url}/health"):
        with subprocess.Popen(
            [str(BIN / "loadlab"), *args, "--no-gpu", "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=pinned_to((core,)),
        ) as run:
            try:
                _wait_for_step(out / "run.json", run, timeout=120)
                os.setpriority(os.PRIO_PROCESS, run.pid, 19)
                with CpuHogs(2, cpus=(core,)):
                    time.sleep(STEP_S)
                _, stderr = run.communicate(timeout=180)
            finally:
                if run.poll() is None:
                    run.kill()
    assert run.returncode == 0, stderr[-2000:]
    client = json.loads((out / SUMMARY_JSON).read_text())["steps"][0]["client"]
    figures = client["values"]
    assert client["limited"], figures
    assert figures["client_cpu_p90"] < 0.6 and figures["client_loop_lag_p99"] > 0.1, figures
    assert client["cause"] == "starved", figures
    assert "more processes will not help" in client["advice"][0] and "taskset -c" in client["advice"][1]
    step = json.loads((out / "analysis.json").read_text())["steps"][0]
    assert step["constraint"] == "client" and step["advice"] == client["advice"]


STEP_S = 8


def _wait_for_step(run_json: Path, run: subprocess.Popen, timeout: float) -> None:
    """Until run.json lists the first step (the users are starting)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert run.poll() is None, "loadlab run ended before its step began"
        try:
            if json.loads(run_json.read_text()).get("steps"):
                return
        except (OSError, ValueError):  # not written yet
            pass
        time.sleep(0.05)
    raise TimeoutError("no step began")
