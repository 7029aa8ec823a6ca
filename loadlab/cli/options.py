"""The flags several commands share, each declared once.

A group of flags is a frozen dataclass: each field is one flag, declared as
`Annotated[type, typer.Option("--flag", help=...)] = default` and named after the RunConfig or
WorkloadConfig setting it sets. A command takes a whole group as one parameter annotated with the
group's class, and `@takes_flags` shows typer the group's flags in its place and hands the command
the group, filled in. `configure` turns the groups into a RunConfig. So a new shared flag is one
field here, plus its use; every command that takes the group takes the flag.

    @takes_flags
    def run(url: str | None = typer.Option(None, "--url"), *, workload: WorkloadFlags) -> None:
        cfg = configure(RunConfig(), workload, url=url)

The groups come after `*` (keyword-only, no default: typer never sees the parameter itself).
Any other command that sends or plans requests takes the same groups.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from copy import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar

import typer
from typer.models import OptionInfo

from loadlab.client.discovery import API_KEY_ENV
from loadlab.errors import UserError

if TYPE_CHECKING:
    from loadlab.conductor.simulate import EngineSettings
    from loadlab.config import RunConfig

F = TypeVar("F", bound=Callable[..., Any])

# --step-duration, for every command that runs steps (LoadFlags, SweepFlags, `plan --what-if`'s
# WhatIfFlags): `Annotated[float | None, STEP_DURATION]`, each with its own default.
STEP_DURATION = typer.Option("--step-duration", help="Seconds per step (simulated seconds in a simulation).")
DEFAULT_STEP_SECONDS = 20.0  # a sweep's steps, real or simulated
DEFAULT_MAX = 512  # a sweep's highest load: users, or requests/s with --rate auto


@dataclass(frozen=True)
class FlagGroup:
    """Flags that travel together (the fields of a subclass)."""

    panel: ClassVar[str] = ""  # the heading of the group's flags in --help

    def given(self) -> list[str]:
        """The flags set to other than their default, as typed (`--max-num-seqs`, `--no-gpu`)."""
        flags = []
        for field, _, info in _options(type(self)):
            value = getattr(self, field.name)
            if value != field.default:
                on, _, off = str(info.default).partition("/")  # a switch: --flag/--no-flag
                flags.append(off if off and value is False else on)
        return flags


@dataclass(frozen=True)
class ConfigFlags(FlagGroup):
    """Flags that set RunConfig/WorkloadConfig settings: `settings()` are those they give."""

    def settings(self) -> dict[str, Any]:
        """Setting name -> value for each flag (None: not given, the config's own value stays)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class LoadFlags(ConfigFlags):
    """How much load and for how long: `run` and `simulate` (a sweep chooses its own load)."""

    panel: ClassVar[str] = "Load"
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="Closed loop: users, or steps such as 1,8,32.")
    ] = None
    rate: Annotated[str | None, typer.Option("--rate", help="Open loop: requests/s, or steps such as 1,5,10.")] = None
    arrival: Annotated[
        str | None, typer.Option("--arrival", help="Open-loop arrivals: poisson | constant | gamma.")
    ] = None
    burstiness: Annotated[
        float | None, typer.Option("--burstiness", help="Gamma shape: 1 = Poisson, < 1 burstier.")
    ] = None
    think_time: Annotated[
        str | None,
        typer.Option(
            "--think-time",
            help="Closed-loop pause between a user's requests, seconds (a distribution, e.g. uniform:0:2).",
        ),
    ] = None
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration",
            help="Seconds to run (per step when there are several and no --step-duration). Without it or "
            "--requests a step lasts 60 s.",
        ),
    ] = None
    requests: Annotated[
        int | None, typer.Option("--requests", help="Stop after this many measured requests (per step).")
    ] = None
    step_duration: Annotated[float | None, STEP_DURATION] = None
    warmup_requests: Annotated[
        int | None, typer.Option("--warmup-requests", help="First N requests of each step, excluded from results.")
    ] = None
    ramp_up: Annotated[
        float | None,
        typer.Option(
            "--ramp-up",
            help="Closed loop: a step's new users start their first requests spread over this many seconds "
            "(default 1; 0: all at once). Their connections open before the step begins.",
        ),
    ] = None

    def settings(self) -> dict[str, Any]:
        """As the base, and a load model given by a flag replaces a scenario file's other one."""
        settings = super().settings()
        if self.concurrency is not None and self.rate is None:
            settings["rate"] = []
        if self.rate is not None and self.concurrency is None:
            settings["concurrency"] = []
        return settings


@dataclass(frozen=True)
class WorkloadFlags(ConfigFlags):
    """What to send (docs/workloads.md): `run`, `sweep`, `diagnose`, `simulate` and `plan --what-if`."""

    panel: ClassVar[str] = "Workload"
    api: Annotated[
        str | None,
        typer.Option("--api", help="chat | completions | embeddings | rerank (default chat; docs/workloads.md)."),
    ] = None
    kind: Annotated[
        str | None,
        typer.Option(
            "--workload", help="synthetic | sharegpt | shared_prefix | multiturn | tools | trace (or --trace FILE)."
        ),
    ] = None
    input_len: Annotated[
        str | None,
        typer.Option("--input-len", help="Prompt tokens: 128, uniform:64:256, normal:128:32, lognormal:128:64."),
    ] = None
    output_len: Annotated[str | None, typer.Option("--output-len", help="Output tokens (same forms).")] = None
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset", help="ShareGPT-format JSON file (--workload sharegpt), or a trace (--workload trace)."
        ),
    ] = None
    turns: Annotated[
        int | None,
        typer.Option("--turns", help="Turns per conversation (multiturn), model calls per session (tools)."),
    ] = None
    tool_time: Annotated[
        str | None,
        typer.Option(
            "--tool-time", help="Tool sessions: seconds each tool call takes (a distribution, e.g. lognormal:1:0.5)."
        ),
    ] = None
    tool_output_len: Annotated[
        str | None,
        typer.Option("--tool-output-len", help="Tool sessions: tokens of each tool result (a distribution)."),
    ] = None
    images: Annotated[
        str | None,
        typer.Option(
            "--images", help="Chat: images per request, one count drawn per request from the list (e.g. 0,1,2,4)."
        ),
    ] = None
    image_sizes: Annotated[
        str | None,
        typer.Option(
            "--image-size",
            help="Synthetic images' sizes WxH, one drawn per image (default 512x512; e.g. 256x256,1024x1024).",
        ),
    ] = None
    image_dir: Annotated[
        str | None, typer.Option("--image-dir", help="Send the PNG/JPEG files of this folder as the images.")
    ] = None
    audio_seconds: Annotated[
        str | None,
        typer.Option(
            "--audio-seconds",
            help="Chat: a synthetic WAV clip per request, its length drawn from the list (e.g. 5,30).",
        ),
    ] = None
    items: Annotated[
        int | None,
        typer.Option("--items", help="Per request: inputs (--api embeddings) or documents (--api rerank); default 1."),
    ] = None
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace",
            help="Replay a trace (Azure, BurstGPT, Mooncake, or any CSV/JSONL with --trace-columns): each request at "
            "its recorded time with its recorded lengths. With a load that is set (--concurrency, --rate, a sweep), "
            "its lengths only.",
        ),
    ] = None
    trace_speed: Annotated[
        float | None, typer.Option("--trace-speed", help="Replay the trace this many times faster (0.5: half as fast).")
    ] = None
    trace_window: Annotated[
        str | None,
        typer.Option(
            "--trace-window", help="Take the slice A:B of the trace, in seconds of trace time (e.g. 600:1200)."
        ),
    ] = None
    trace_columns: Annotated[
        str | None,
        typer.Option(
            "--trace-columns",
            help="The trace's columns, when not detected: time=COL,input=COL,output=COL[,hash_ids=COL][,unit=s|ms|us].",
        ),
    ] = None
    seed: Annotated[int | None, typer.Option("--seed", help="Workload seed.")] = None

    def settings(self) -> dict[str, Any]:
        """As the base, with --trace FILE as the trace workload of that data set."""
        settings = super().settings()
        trace = settings.pop("trace")
        if trace is not None:
            if self.kind not in (None, "trace"):
                raise UserError(f"--trace replays a trace: it does not go with --workload {self.kind}")
            if self.dataset not in (None, trace):
                raise UserError("--trace names the trace file: leave out --dataset")
            settings.update(kind="trace", dataset=trace)
        return settings


@dataclass(frozen=True)
class ClientFlags(ConfigFlags):
    """How the load generator talks to the endpoint: `run`, `sweep` and `diagnose`."""

    panel: ClassVar[str] = "Client"
    model: Annotated[
        str | None, typer.Option("--model", help="Model name; default: the first id from GET /v1/models.")
    ] = None
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key", help=f"API key (else ${API_KEY_ENV[0]} or ${API_KEY_ENV[1]}); never written to disk."
        ),
    ] = None
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="Per-request timeout in seconds (covers stalled streams; default 300)."),
    ] = None
    token_count: Annotated[
        str | None,
        typer.Option(
            "--token-count",
            help="auto (default: timings on a llama.cpp server, else chunks) | chunks (the stream's token chunks) | "
            "logprobs (ask for each token's logprob and count those: exact where a server merges or skips chunks, "
            "at a little cost to the server) | timings (ask llama.cpp for its count of the tokens in every chunk).",
        ),
    ] = None
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes", help="Load-generator processes on this host (more when a step comes out client-limited)."
        ),
    ] = None


@dataclass(frozen=True)
class CollectorFlags(ConfigFlags):
    """What is measured beside the requests: `run`, `sweep` and `diagnose`."""

    panel: ClassVar[str] = "Collectors"
    server_metrics: Annotated[
        str | None,
        typer.Option(
            "--server-metrics", help="Server /metrics URL or path (default <url>/metrics, then /prometheus/metrics)."
        ),
    ] = None
    no_server_metrics: Annotated[
        bool,
        typer.Option(
            "--no-server-metrics",
            help="Do not scrape the server's /metrics: the verdict then comes from the client's curves alone "
            "(docs/diagnosis.md).",
        ),
    ] = False
    reset_prefix_cache: Annotated[
        bool,
        typer.Option(
            "--reset-prefix-cache",
            help="Empty the server's prefix cache before each step (vLLM, SGLang, the reference server).",
        ),
    ] = False
    prometheus: Annotated[
        str | None, typer.Option("--prometheus", help="Prometheus server URL to query during the run.")
    ] = None
    prometheus_selector: Annotated[
        str | None, typer.Option("--selector", help='Prometheus label selector, e.g. job="vllm".')
    ] = None
    no_gpu: Annotated[bool, typer.Option("--no-gpu", help="Do not sample GPUs with NVML.")] = False
    nccl_inspector_dir: Annotated[
        str | None, typer.Option("--nccl-inspector-dir", help="Folder the NCCL Inspector plugin writes to.")
    ] = None
    server_pid: Annotated[
        int | None, typer.Option("--server-pid", help="Sample this server process's CPU (same host).")
    ] = None
    model_params: Annotated[
        float | None,
        typer.Option(
            "--model-params",
            help="The served model's parameters (e.g. 8e9): MFU and MBU where the engine does not estimate its work.",
        ),
    ] = None
    model_bytes: Annotated[
        float | None,
        typer.Option(
            "--model-bytes",
            help="Weight bytes each device reads per step (the weights / tensor parallelism; default 2 per parameter).",
        ),
    ] = None

    def settings(self) -> dict[str, Any]:
        """As the base, with the switches as the settings they turn off or on; UserError when
        --no-server-metrics and --server-metrics are both given (which one was meant?)."""
        if self.no_server_metrics and self.server_metrics is not None:
            raise UserError(
                f"--no-server-metrics turns scraping off and --server-metrics {self.server_metrics} names a page "
                "to scrape: give one"
            )
        settings = super().settings()
        del settings["no_server_metrics"], settings["no_gpu"]
        if self.no_server_metrics:
            settings["server_metrics"] = "off"
        settings["reset_prefix_cache"] = True if self.reset_prefix_cache else None
        settings["gpu"] = False if self.no_gpu else None
        return settings


@dataclass(frozen=True)
class EngineFlags(FlagGroup):
    """The simulated engine's settings, `serve --twin`'s flags: `simulate` and `plan --what-if`.
    A flag not given keeps EngineSettings' default."""

    panel: ClassVar[str] = "Simulated engine"
    max_num_seqs: Annotated[
        int | None, typer.Option("--max-num-seqs", help="The engine's most sequences running at once (default 32).")
    ] = None
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option("--max-num-batched-tokens", help="The engine's token budget of one step (default 2048)."),
    ] = None
    gpu_memory_utilization: Annotated[
        float | None,
        typer.Option("--gpu-memory-utilization", help="Share of GPU memory the engine takes (default 0.9)."),
    ] = None
    prefix_caching: Annotated[
        bool | None,
        typer.Option("--prefix-caching/--no-prefix-caching", help="Reuse prompt prefixes (default on)."),
    ] = None

    def engine(self, twin: str) -> EngineSettings:
        """The engine of `twin` with these flags' settings."""
        from loadlab.conductor.simulate import EngineSettings

        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return EngineSettings(twin, **{name: value for name, value in given.items() if value is not None})


@dataclass(frozen=True)
class SweepFlags(FlagGroup):
    """How far and how long a sweep goes: `sweep` and `diagnose` (conductor/sweep.py checks them)."""

    panel: ClassVar[str] = "Sweep"
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo",
            help="Stop at the first step that breaches these SLOs (inline or a TOML file, docs/slo.md), e.g. "
            "ttft_p99=2s,itl_p99=100ms.",
        ),
    ] = None
    max_load: Annotated[
        float, typer.Option("--max", help="Highest load to try: users (requests/s with `sweep --rate auto`).")
    ] = DEFAULT_MAX
    step_duration: Annotated[float, STEP_DURATION] = DEFAULT_STEP_SECONDS
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Most steps to run (default 12).")] = None


@dataclass(frozen=True)
class WhatIfFlags(FlagGroup):
    """How far and how long each spec's simulated sweep goes, and where its results go (what it
    sends is WorkloadFlags, the engine EngineFlags): `plan --what-if`."""

    panel: ClassVar[str] = "What-if"
    step_duration: Annotated[float | None, STEP_DURATION] = None  # (None: DEFAULT_STEP_SECONDS)
    max_load: Annotated[int | None, typer.Option("--max", help="Highest concurrency (default --users).")] = None
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Folder for one run folder per spec (default runs/<timestamp>-whatif)."),
    ] = None
    report: Annotated[
        Path | None, typer.Option("--report", help="HTML page to write (default reports/<--out's name>.html).")
    ] = None


def configure(base: RunConfig, *groups: ConfigFlags, **settings: Any) -> RunConfig:
    """A copy of `base` with the flags of `groups` that were given, then `settings`, set and
    checked together (apply_overrides: one UserError line naming a bad value)."""
    from loadlab.workload.scenario import apply_overrides

    given: dict[str, Any] = {}
    for group in groups:
        given.update(group.settings())
    return apply_overrides(base, **(given | settings))


def takes_flags(command: F) -> F:
    """`command` for typer with each parameter annotated by a FlagGroup class replaced by the
    group's flags (in its place; shown under the group's heading in --help), and called with the
    group built from them."""
    hints = typing.get_type_hints(command, include_extras=True)
    groups: dict[str, type[FlagGroup]] = {}
    parameters: list[inspect.Parameter] = []
    for p in inspect.signature(command).parameters.values():
        hint = hints[p.name]
        if not (isinstance(hint, type) and issubclass(hint, FlagGroup)):
            parameters.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hint))
            continue
        groups[p.name] = hint
        for field, kind, info in _options(hint):
            info = copy(info)
            info.rich_help_panel = hint.panel
            annotation = Annotated[kind, info]  # type: ignore[valid-type]
            parameters.append(
                inspect.Parameter(
                    field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default, annotation=annotation
                )
            )
    names = [p.name for p in parameters]
    if len(set(names)) < len(names):  # a programming error: two groups (or the command) share a name
        raise TypeError(f"{command.__name__}: a flag declared twice among {names}")

    def with_groups(**values: Any) -> Any:
        for name, group in groups.items():
            values[name] = group(**{f.name: values.pop(f.name) for f in dataclasses.fields(group)})
        return command(**values)

    # typer reads the name, the help and the parameters from these.
    with_groups.__name__, with_groups.__qualname__ = command.__name__, command.__qualname__
    with_groups.__doc__, with_groups.__module__ = command.__doc__, command.__module__
    with_groups.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=hints.get("return", inspect.Signature.empty)
    )
    with_groups.__annotations__ = {p.name: p.annotation for p in parameters}
    return typing.cast(F, with_groups)


def _options(group: type[FlagGroup]) -> list[tuple[dataclasses.Field[Any], Any, Any]]:
    """Each field of `group`, its type and its typer.Option declaration."""
    plain, declared = typing.get_type_hints(group), typing.get_type_hints(group, include_extras=True)
    return [
        (f, plain[f.name], next(a for a in typing.get_args(declared[f.name])[1:] if isinstance(a, OptionInfo)))
        for f in dataclasses.fields(group)
    ]
