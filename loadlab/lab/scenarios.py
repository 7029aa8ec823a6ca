"""The lab's scenarios: server settings and a load, each built to make one constraint bind.

One row per scenario, one table per engine (`SCENARIOS` for the reference server, `VLLM_SCENARIOS`
for a real vLLM, `LLAMACPP_SCENARIOS` for llama.cpp's server); `loadlab lab` runs them and sets
the analyzer's verdict against `expect`.
A scenario's `server` flags go to the engine's server (`python -m reference_server`, or vLLM's
OpenAI API server) and its `load` flags to `loadlab run` (the lab adds the URL, the step
duration and the run folder). Consecutive scenarios whose servers start alike share one server
(vLLM takes a minute or two to start). The verdict read is
the last step's: earlier steps only give the analyzer lower loads to compare with (saturation)
and a spread of batch sizes for its step-time fit (compute vs memory bandwidth).

On a machine shared with other work, the server runs niced (`server_nice`) and the load generator
at a raised priority where the lab may set one (`client_nice` below 0 needs root; without it the
client runs at the default priority), so that the load generator is not the process starved;
the client scenario turns this round on purpose.
Why each scenario binds where it does: docs/lab.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadlab.lab.engines import LLAMACPP, REFERENCE, VLLM
from loadlab.metrics.verdicts import (
    AT_KNEE,
    BATCH_CONTENTION,
    CLIENT,
    COMPUTE,
    ENGINE_OVERHEAD,
    KV_CAPACITY,
    MEMORY_BANDWIDTH,
    NETWORK,
    OVERLOADED,
    PAST_KNEE,
    QUEUEING,
    SCHEDULING,
    UNDER_LOADED,
    Constraint,
    SaturationState,
)

SATURATED: tuple[SaturationState, ...] = (AT_KNEE, PAST_KNEE, OVERLOADED)


@dataclass(frozen=True)
class Scenario:
    """One provoked bottleneck: how to start the server, what load to send, what should bind."""

    name: str
    expect: Constraint | None  # the constraint the analyzer should name; None: any (judged on saturation)
    why: str  # one line: what makes `expect` bind
    server: tuple[str, ...]  # flags of the engine's server
    load: tuple[str, ...]  # flags of `loadlab run` (load shape and workload)
    expect_saturation: tuple[SaturationState, ...] = ()  # accepted saturation states; () = any
    server_nice: int = 10  # nice the server: the client keeps its CPU on a busy host
    client_nice: int = -5  # ignored without the privilege to raise a priority
    server_cpus: tuple[int, ...] = ()  # pin the server to these cores, places freest first (() = anywhere)
    client_cpus: tuple[int, ...] = ()  # pin the load generator to these cores
    twin: str = ""  # a GPU twin (`--twin SPEC`): GPU timing on a CPU host
    # A CPU-bound process on each of `client_cpus` in the load generator's session while the load's
    # steps run (lab/rival.py): with `client_nice` 19 the client runs only in the rival's pauses.
    client_rival: bool = False
    # The load generator placed as `loadlab diagnose` places itself beside a local server
    # (conductor/placement.py): on the cores the server's threads used least; the server unpinned.
    client_beside: bool = False

    @property
    def steps(self) -> int:
        """How many load steps `load` asks for (values of --concurrency or --rate)."""
        flag = next((i for i, f in enumerate(self.load) if f in ("--concurrency", "--rate")), None)
        return len(self.load[flag + 1].split(",")) if flag is not None and flag + 1 < len(self.load) else 1

    @property
    def server_key(self) -> tuple:
        """What starting its server depends on: scenarios with equal keys can share one server."""
        return (self.server, self.twin, self.server_nice, self.server_cpus)


TINY = ("--preset", "tiny", "--max-model-len", "256")

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "kv_capacity",
        KV_CAPACITY,
        "64 KV blocks of 16 tokens hold eight 120-token requests: 24 of 32 users wait for blocks",
        server=(*TINY, "--num-kv-blocks", "64"),
        load=("--concurrency", "32", "--api", "completions", "--input-len", "100", "--output-len", "20"),
        expect_saturation=SATURATED,
    ),
    Scenario(
        "scheduling",
        SCHEDULING,
        "--max-num-seqs 2 under 16 users: the queue is long while the KV pool is nearly empty",
        server=(*TINY, "--max-num-seqs", "2"),
        load=("--concurrency", "16", "--input-len", "32", "--output-len", "32"),
        expect_saturation=SATURATED,
    ),
    Scenario(
        "network",
        NETWORK,
        "--tensor-parallel 2 on the tiny preset: two all-reduces per layer over gloo outweigh its small matmuls",
        server=(*TINY, "--tensor-parallel", "2"),
        load=("--concurrency", "4", "--input-len", "32", "--output-len", "32"),
    ),
    Scenario(
        "compute",
        COMPUTE,
        "900-token prompts, 2-token answers: step time grows with the prompt tokens in the step",
        server=("--preset", "tiny", "--max-num-batched-tokens", "4096"),
        load=("--concurrency", "1,2", "--api", "completions", "--input-len", "900", "--output-len", "2"),
    ),
    Scenario(
        "memory_bandwidth",
        MEMORY_BANDWIDTH,
        "batches of 1-2 sequences of the wide preset: each decode step reads its 0.5 GB of weights for 1-2 tokens",
        server=("--preset", "wide", "--max-model-len", "256"),
        load=("--concurrency", "1,2", "--api", "completions", "--input-len", "8", "--output-len", "16"),
        # Not niced: a server starved of its cores stretches its steps with waiting, which reads as
        # a low MBU; 1-2 users leave the load generator little to do.
        server_nice=0,
    ),
    Scenario(
        "engine_overhead",
        ENGINE_OVERHEAD,
        "batches of 1-2 sequences of the tiny preset: 13 MB of weights read in a fraction of a step that the "
        "engine's own work per step (scheduling, sampling, streaming) fills",
        server=TINY,
        load=("--concurrency", "1,2", "--api", "completions", "--input-len", "8", "--output-len", "64"),
    ),
    Scenario(
        "client",
        CLIENT,
        "the load generator, niced, shares one core with the busy server: 64 users' streams wait for CPU",
        server=TINY,
        # 64, not 32: at 32 users the starved client still kept 63-78 % of them in flight, at 80 %
        # once on a CI host (no effect on the load: not client-limited); at 64, 37-42 %.
        load=("--concurrency", "64", "--input-len", "16", "--output-len", "16"),
        server_nice=0,
        client_nice=19,
        server_cpus=(0,),
        client_cpus=(0,),
    ),
    Scenario(
        "under_loaded",
        None,
        "1 then 2 users who think 1 s between requests: the server idles, throughput doubles",
        server=TINY,
        load=("--concurrency", "1,2", "--think-time", "1", "--input-len", "32", "--output-len", "32"),
        expect_saturation=(UNDER_LOADED,),
    ),
    # GPU timing without a GPU (the twin keeps time like an H100 running Llama-3-8B): where CPU
    # physics differ from a GPU's, these show the GPU's answer. Skipped while the server has no --twin.
    Scenario(
        "memory_bandwidth-twin",
        MEMORY_BANDWIDTH,
        "H100 twin of Llama-3-8B, 1-4 users: decode reads 16 GB of weights per step, far below the ridge",
        server=("--max-model-len", "2048"),
        twin="h100:llama-3-8b",
        load=("--concurrency", "1,2,4", "--input-len", "64", "--output-len", "64"),
    ),
    Scenario(
        "engine_overhead-twin",
        ENGINE_OVERHEAD,
        "H100 twin of Qwen2.5-0.5B at batch 1: 1 GB of weights read in 0.4 ms, beside 0.5 ms of engine work per step",
        server=("--max-model-len", "2048"),
        twin="h100:qwen2.5-0.5b",
        load=("--concurrency", "1", "--input-len", "64", "--output-len", "64"),
    ),
    Scenario(
        "compute-twin",
        COMPUTE,
        "H100 twin of Llama-3-8B, 1500-token prompts and 2-token answers: prefill is far above the ridge",
        server=("--max-model-len", "2048", "--max-num-batched-tokens", "8192"),
        twin="h100:llama-3-8b",
        load=("--concurrency", "1,4", "--input-len", "1500", "--output-len", "2"),
    ),
)


# A real vLLM (the PyPI CPU build) serving a tiny random-weight Llama (loadlab/lab/engines.py),
# provoked with vLLM's own flags. `--enable-mfu-metrics` fills vLLM's FLOPs and bytes estimates,
# which stand in for the step time vLLM does not export (compute against memory bandwidth).
# The default-flag scenarios come last and share one server.
VLLM_DEFAULT = ("--max-model-len", "2048", "--enable-mfu-metrics")
# vLLM (its API server, engine core and worker, with its OpenMP threads bound there too) on one
# core, the load generator on another: on two shared cores, unpinned, vLLM's threads left the load
# generator 0.05 cores and event-loop lags of seconds, and half the scenarios read client-limited.
# Pinned apart, neither is niced: nicing served only to keep the client's share of shared cores.
VLLM_CORE, CLIENT_CORE = 0, 1  # places among the host's cores, freest first (lab/processes.freest_cores)


def _pinned(
    name: str,
    expect: Constraint | None,
    why: str,
    server: tuple[str, ...],
    load: tuple[str, ...],
    expect_saturation: tuple[SaturationState, ...] = (),
    client_nice: int = -5,
    client_rival: bool = False,
) -> Scenario:
    """A scenario of a real engine: the server on VLLM_CORE at the default priority, the load
    generator on CLIENT_CORE (with a rival there where the scenario starves it on purpose)."""
    return Scenario(
        name,
        expect,
        why,
        server=server,
        load=load,
        expect_saturation=expect_saturation,
        server_nice=0,
        client_nice=client_nice,
        server_cpus=(VLLM_CORE,),
        client_cpus=(CLIENT_CORE,),
        client_rival=client_rival,
    )


VLLM_SCENARIOS: tuple[Scenario, ...] = (
    _pinned(
        "kv_capacity",
        KV_CAPACITY,
        "--num-gpu-blocks-override 8 (128-token blocks), 32 users of 140 tokens (2 blocks each): ~4 run, 28 wait",
        server=("--max-model-len", "512", "--num-gpu-blocks-override", "8", "--enable-mfu-metrics"),
        load=("--concurrency", "32", "--api", "completions", "--input-len", "100", "--output-len", "40"),
        expect_saturation=SATURATED,
    ),
    _pinned(
        "scheduling",
        SCHEDULING,
        "--max-num-seqs 2 under 16 users: running pinned at 2, 14 wait while the KV pool is nearly empty",
        server=(*VLLM_DEFAULT, "--max-num-seqs", "2"),
        load=("--concurrency", "16", "--input-len", "32", "--output-len", "32"),
        expect_saturation=SATURATED,
    ),
    _pinned(
        "compute",
        COMPUTE,
        "900-token prompts, 2-token answers: prefill-heavy steps whose time grows with their prompt tokens",
        server=VLLM_DEFAULT,
        load=("--concurrency", "1,2", "--api", "completions", "--input-len", "900", "--output-len", "2"),
    ),
    _pinned(
        "engine_overhead",
        ENGINE_OVERHEAD,
        "8-token prompts, 64-token answers at 1 then 2 users: decode steps of one or two sequences that read "
        "10 MB of weights in well under a millisecond, in steps of milliseconds",
        server=VLLM_DEFAULT,
        load=("--concurrency", "1,2", "--api", "completions", "--input-len", "8", "--output-len", "64"),
    ),
    _pinned(
        "under_loaded",
        None,
        "1 then 2 users who think 1 s between requests: the server idles, throughput doubles",
        server=VLLM_DEFAULT,
        load=("--concurrency", "1,2", "--think-time", "1", "--input-len", "32", "--output-len", "32"),
        expect_saturation=(UNDER_LOADED,),
    ),
    # The load generator on its own core beside a rival in its session (lab/rival.py) that holds the
    # core in 200 ms bursts, at nice 19: it runs in the pauses. Beside vLLM alone it was not surely
    # starved: vLLM idled whenever it kept up (autogroups: nice does not order the two), and on a
    # quiet host the client sent 40 requests/s on time. Open loop: what a starved client cannot do
    # is send on time. 20/s, well within what vLLM serves on its core (36/s), so that vLLM is not
    # past its knee: there the server's verdict would rightly stand beside the client's shortfall.
    _pinned(
        "client",
        CLIENT,
        "the load generator at nice 19 beside a process that holds its core in bursts: requests leave late",
        server=VLLM_DEFAULT,
        load=("--rate", "20", "--input-len", "16", "--output-len", "16"),
        client_nice=19,
        client_rival=True,
    ),
)

# llama.cpp's llama-server serving the tiny Llama as GGUF (loadlab/lab/gguf_model.py), on one core
# (one thread) as vLLM is, provoked with its own flags: slots (--parallel) sharing one context
# (--ctx-size). --metrics for the white-box scenarios; the black-box ones start it as most users
# do, without, and loadlab reads its per-request timings from the responses.
LLAMACPP_BASE = ("--threads", "1", "--threads-batch", "1", "--ctx-size", "8192")
LLAMACPP_DEFAULT = (*LLAMACPP_BASE, "--metrics", "--parallel", "4")
SLOT_CAP = (*LLAMACPP_BASE, "--parallel", "2")
DECODE_HEAVY = ("--api", "completions", "--input-len", "8", "--output-len", "64")

LLAMACPP_SCENARIOS: tuple[Scenario, ...] = (
    _pinned(
        "scheduling",
        SCHEDULING,
        "--parallel 2 under 16 users: both slots busy, 14 requests deferred (the cap from /props)",
        server=(*SLOT_CAP, "--metrics"),
        load=("--concurrency", "16", "--input-len", "32", "--output-len", "32"),
        expect_saturation=SATURATED,
    ),
    _pinned(
        "compute",
        COMPUTE,
        "900-token prompts, 2-token answers: the prompt's prefill is the request",
        server=LLAMACPP_DEFAULT,
        load=("--concurrency", "1,2", "--api", "completions", "--input-len", "900", "--output-len", "2"),
    ),
    _pinned(
        "memory_bandwidth",
        MEMORY_BANDWIDTH,
        "8-token prompts, 64-token answers at 1 then 2 users: decode steps of one or two sequences",
        server=LLAMACPP_DEFAULT,
        load=("--concurrency", "1,2", *DECODE_HEAVY),
    ),
    _pinned(
        "under_loaded",
        None,
        "1 then 2 users who think 1 s between requests: the server idles, throughput doubles",
        server=LLAMACPP_DEFAULT,
        # 64-token answers: with 32 a request's decode was 48-49 % of its time on a quiet host, on
        # the line between the per-token classes, and no class was named.
        load=("--concurrency", "1,2", "--think-time", "1", "--input-len", "32", "--output-len", "64"),
        expect_saturation=(UNDER_LOADED,),
    ),
    _pinned(
        "client",
        CLIENT,
        "the load generator at nice 19 beside a process that holds its core in bursts: requests leave late",
        server=LLAMACPP_DEFAULT,
        load=("--rate", "20", "--input-len", "16", "--output-len", "16"),
        client_nice=19,
        client_rival=True,
    ),
    # Without --metrics, as most users start it: the client's curves from one user up, and the
    # server's per-request timings in its responses (not server metrics; the verdict says so).
    _pinned(
        "scheduling-blackbox",
        QUEUEING,
        "no --metrics; --parallel 2 under 1 then 16 users: TTFT grows (the wait before the prefill), TPOT stays",
        server=SLOT_CAP,
        load=("--concurrency", "1,16", "--input-len", "32", "--output-len", "32"),
    ),
    _pinned(
        "memory_bandwidth-blackbox",
        BATCH_CONTENTION,
        "no --metrics; 1 then 4 users of 64-token answers on 4 slots: every decode step carries more sequences",
        server=(*LLAMACPP_BASE, "--parallel", "4"),
        load=("--concurrency", "1,4", *DECODE_HEAVY),
    ),
)


# vLLM as users start it: not pinned, at the default priority, beside the load generator on the
# same cores (vLLM binds its engine's threads by itself, `auto`), with settings the pinned lab
# never used. The load generator delivers less load here; each step is judged at what it
# delivered (docs/diagnosis.md, §3).
# A cap of 2 under 16 users: 32 users beside an unpinned vLLM on a quiet 2-core host left the load
# generator 39-45 % of its load, and vLLM's own API server reported nothing running (docs/lab.md),
# while its nice -5 weighed only within its own session (autogroups; loadlab/priority.py since).
VLLM_SHARED_CAP = ("--max-model-len", "2048", "--max-num-seqs", "2")


def _shared_vllm(
    name: str,
    expect: Constraint | None,
    why: str,
    server: tuple[str, ...],
    load: tuple[str, ...],
    expect_saturation: tuple[SaturationState, ...] = (),
) -> Scenario:
    """A vLLM scenario as users run it: vLLM neither pinned nor niced, the load generator beside it
    where diagnose would put itself (the cores vLLM's threads used least, a raised priority)."""
    return Scenario(
        name, expect, why, server, load, expect_saturation, server_nice=0, client_nice=-5, client_beside=True
    )


VLLM_SHARED_SCENARIOS: tuple[Scenario, ...] = (
    _shared_vllm(
        "scheduling",
        SCHEDULING,
        "--max-num-seqs 2 under 16 users: running pinned at 2 while the KV pool is nearly empty",
        server=VLLM_SHARED_CAP,
        load=("--concurrency", "16", "--input-len", "32", "--output-len", "32"),
        expect_saturation=SATURATED,
    ),
    _shared_vllm(
        "scheduling-blackbox",
        QUEUEING,
        "the same cap with --no-server-metrics, 1 then 16 users: TTFT grows while TPOT holds",
        server=VLLM_SHARED_CAP,
        load=("--concurrency", "1,16", "--input-len", "32", "--output-len", "32", "--no-server-metrics"),
    ),
    _shared_vllm(
        "kv_capacity",
        KV_CAPACITY,
        "--kv-cache-memory-bytes 8 MiB (~2,000 tokens) under 24 users of 216 tokens: the pool is full, requests wait",
        server=("--max-model-len", "512", "--kv-cache-memory-bytes", "8388608"),
        load=("--concurrency", "24", "--api", "completions", "--input-len", "16", "--output-len", "200"),
        expect_saturation=SATURATED,
    ),
    _shared_vllm(
        "engine_overhead",
        ENGINE_OVERHEAD,
        "16-token prompts, 128-token answers at 1 then 2 users: decode steps of one or two sequences that read "
        "10 MB of weights in steps of milliseconds",
        server=VLLM_DEFAULT,
        load=("--concurrency", "1,2", "--api", "completions", "--input-len", "16", "--output-len", "128"),
    ),
    _shared_vllm(
        "under_loaded",
        None,
        "1 user, 32-token prompts and 64-token answers: the server idles between its tokens",
        server=VLLM_DEFAULT,
        load=("--concurrency", "1", "--input-len", "32", "--output-len", "64"),
        expect_saturation=(UNDER_LOADED,),
    ),
)

TABLES = {REFERENCE: SCENARIOS, VLLM: VLLM_SCENARIOS, LLAMACPP: LLAMACPP_SCENARIOS}
SHARED_TABLES = {VLLM: VLLM_SHARED_SCENARIOS}


def select(names: str | None, engine: str = REFERENCE, shared_host: bool = False) -> list[Scenario]:
    """The scenarios of `engine` named in a comma-separated list (all of them for None), in table
    order (`shared_host`: its table run unpinned beside the load generator); ValueError naming an
    unknown one, or an engine without a shared-host table."""
    if shared_host and engine not in SHARED_TABLES:
        raise ValueError(f"--shared-host: only {', '.join(SHARED_TABLES)} has a shared-host table")
    table = SHARED_TABLES[engine] if shared_host else TABLES[engine]
    if names is None:
        return list(table)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {s.name for s in table}
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise ValueError(
            f"unknown scenario {', '.join(unknown) or repr(names)}; choose from {', '.join(s.name for s in table)}"
        )
    return [s for s in table if s.name in wanted]
