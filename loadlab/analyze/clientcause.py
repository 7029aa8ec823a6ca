"""Why the load generator fell short: its own work, or a host that starved it.

Both look the same from the load alone (users not kept in flight, requests sent late). They
differ in the client's own CPU: a client doing too much work runs near a core per process, and
more processes help; a starved client uses little CPU while its event loop wakes up late, because
other work (often the server, on the same host) holds the cores, and more processes only add
more starved ones. What each load-generator process samples of itself and its host tells the
second from an unexplained lag: how long its loop's thread was runnable but kept off a CPU, and
the host's busy cores. The advice follows the cause (docs/diagnosis.md, section 3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from loadlab.metrics.limits import CLIENT_CPU_P90_MAX, HOST_BUSY_MIN, LOOP_LAG_P99_MAX, RUN_WAIT_MIN
from loadlab.metrics.verdicts import OWN_WORK, STARVED, UNEXPLAINED, ClientCause
from loadlab.numbers import format_number, format_value
from loadlab.store.reader import labels_of
from loadlab.urls import is_loopback

# Samples of the host's busy cores: each load-generator process's (label `cores`), and the host
# collector's (loadlab.collect.host, label `cores` since it carries one).
HOST_SIGNALS = ("client_host_cpu", "host_cpu")
SERVER_ROLE = "server"


@dataclass
class HostLoad:
    """The load generator's host over a step: cores busy (mean), cores it has, and whether the
    server ran on it (None: not known)."""

    busy_cores: float
    cores: int
    server_local: bool | None

    @property
    def busy_ratio(self) -> float:
        return self.busy_cores / self.cores if self.cores > 0 else math.nan

    @property
    def saturated(self) -> bool:
        return self.busy_ratio >= HOST_BUSY_MIN


def server_is_local(url: str, samples: pd.DataFrame) -> bool | None:
    """True when the server's process was sampled on this host (--server-pid) or its URL is a
    loopback address; None when neither says."""
    host = samples[(samples["source"] == "host") & (samples["signal"] == "process_cpu")]
    if len(host) and any(labels_of(t).get("role") == SERVER_ROLE for t in host["labels"].unique()):
        return True
    return True if is_loopback(url) else None


def host_load(samples: pd.DataFrame, server_local: bool | None, cores_known: int = 0) -> HostLoad | None:
    """Mean busy cores of the load generator's host over the samples given (a step's: the
    largest of the processes' readings where several sampled it); a sample without a `cores`
    label (runs from before it) counts `cores_known` (run.json's host), None without either."""
    for signal in HOST_SIGNALS:
        df = samples[samples["signal"] == signal]
        if not len(df):
            continue
        cores = {t: int(labels_of(t).get("cores", cores_known)) for t in df["labels"].unique()}
        df = df.assign(cores=df["labels"].map(cores))
        df = df[df["cores"] > 0]
        if len(df):
            per_series = df.groupby("labels").agg(busy=("value", "mean"), cores=("cores", "max"))
            worst = int((per_series["busy"] / per_series["cores"]).to_numpy().argmax())
            busy, cores = per_series.iloc[worst]
            return HostLoad(float(busy), int(cores), server_local)
    return None


def cause(values: dict[str, float], host: HostLoad | None) -> ClientCause:
    """OWN_WORK when a process ran near a core; STARVED when it did not while its loop lagged and
    either it waited for a CPU (RUN_WAIT_MIN: its own core held by other work, as when pinned
    beside the server) or its host's cores were all busy; UNEXPLAINED otherwise."""
    cpu = values.get("client_cpu_p90", math.nan)
    if cpu >= CLIENT_CPU_P90_MAX:
        return OWN_WORK
    lag = values.get("client_loop_lag_p99", math.nan)
    waited = values.get("client_run_wait_ratio", math.nan) >= RUN_WAIT_MIN
    if lag > LOOP_LAG_P99_MAX and (waited or (host is not None and host.saturated)):
        return STARVED
    return UNEXPLAINED


def advice(found: ClientCause, values: dict[str, float], host: HostLoad | None, processes: int) -> list[str]:
    """What to change for the cause found, naming the flags and, for a starved client, the cores."""
    cpu = values.get("client_cpu_p90", math.nan)
    lag = values.get("client_loop_lag_p99", math.nan)
    busy = f"{format_number(host.busy_cores)} of its {host.cores} cores busy" if host else "its CPU not sampled"
    where = {True: ", the server on the same host", False: "", None: ""}[host.server_local if host else None]
    if found == OWN_WORK:
        lines = [
            f"the load generator's own work limited it (CPU p90 {format_number(cpu)} cores per process, near a core): "
            f"add processes (--processes {max(2, 2 * processes)}) or hosts (distributed mode), then rerun"
        ]
        if host is not None and host.saturated:
            lines.append(f"this host had {busy}{where}: put the extra processes on another host")
        return lines
    if found == STARVED:
        waited = values.get("client_run_wait_ratio", math.nan)
        kept = ""
        if math.isfinite(waited):
            kept = f", kept waiting for a CPU {format_value(waited, 'fraction')} of the time"
        return [
            f"the load generator was starved, not overloaded: its CPU p90 {format_number(cpu)} cores{kept}, "
            f"event-loop lag p99 {format_value(lag, 's')}, the host {busy}{where}; more processes will not help",
            _pinning(host, processes),
        ]
    return [
        "the load generator fell short without running near a core"
        + (f" (event-loop lag p99 {format_value(lag, 's')}, the host {busy})" if math.isfinite(lag) else "")
        + ": add processes (--processes N) if its CPU was the limit; if other work on its host held the "
        "cores, run it on another host or on cores of its own"
    ]


def _pinning(host: HostLoad | None, processes: int = 1) -> str:
    """Which cores to give the load generator (one per process, at most half the host's) and
    which to leave the server."""
    if host is None:
        return "run the load generator on another host, or pin it and the server to separate cores (taskset -c)"
    if host.cores < 2:
        return "this host has one core: run the load generator on another host"
    own = min(max(processes, 1), host.cores // 2)
    client = f"{host.cores - own}-{host.cores - 1}" if own > 1 else str(host.cores - 1)
    server = f"0-{host.cores - own - 1}" if host.cores - own > 1 else "0"
    return (
        f"run the load generator on another host, or pin it to cores the server does not use: "
        f"`taskset -c {client} loadlab run ...` and the server under `taskset -c {server}` "
        f"(vLLM on CPU: VLLM_CPU_OMP_THREADS_BIND={server})"
    )
