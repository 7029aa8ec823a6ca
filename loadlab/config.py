"""The configuration of one run: built from a TOML scenario file, overridden by CLI flags.

It is written (minus secrets: the API key, credentials in URLs) into run.json, so a run folder
says how it was produced.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from loadlab.urls import HttpUrl, parse_http_url, without_credentials

# Where a RunConfig keeps its parsed url (with the text it was parsed from): not a field, so it is
# neither stored, compared nor sent; see RunConfig.parsed_url.
_PARSED_URL = "_parsed_url"


@dataclass
class LengthDist:
    """A token-length distribution: fixed | uniform | normal | lognormal (clipped to [min, max])."""

    kind: str = "fixed"
    mean: float = 128  # fixed value, or the mean (normal, lognormal)
    std: float = 0  # normal / lognormal spread (lognormal: std of the length, not of log)
    min: float = 1  # whole numbers for token lengths (think times are seconds)
    max: float = 4096  # uniform draws from [min, max]


@dataclass
class WorkloadConfig:
    """What to send. `kind`: synthetic | sharegpt | shared_prefix | multiturn | tools | trace."""

    kind: str = "synthetic"
    input_len: LengthDist = field(default_factory=lambda: LengthDist(mean=128))
    output_len: LengthDist = field(default_factory=lambda: LengthDist(mean=128))
    dataset: str = ""  # path of a ShareGPT-format JSON file (kind = sharegpt) or of a trace (kind = trace)
    num_prefixes: int = 4  # shared_prefix: N distinct prefixes ...
    prefix_len: int = 512  # ... of this many tokens ...
    suffixes_per_prefix: int = 8  # ... times M suffixes
    turns: int = 3  # multiturn: turns per conversation; tools: model calls per session
    # tools: seconds a tool takes (a distribution) and the tokens of its result
    tool_time: LengthDist = field(default_factory=lambda: LengthDist(mean=1.0, min=1.0, max=1.0))
    tool_output_len: LengthDist = field(default_factory=lambda: LengthDist(mean=256, min=256, max=256))
    # trace: sent this many times faster than recorded; the slice "A:B" of trace time (seconds);
    # a column mapping for a layout that is not detected (loadlab/workload/trace.py).
    trace_speed: float = 1.0
    trace_window: str = ""
    trace_columns: str = ""
    # chat media (loadlab/workload/media.py): images per request, one drawn from the list for each
    # request (empty: none); their sizes "WxH", one drawn per image; or images from a folder;
    # an audio clip of one of these lengths in seconds per request (empty: none).
    images: list[int] = field(default_factory=list)
    image_sizes: list[str] = field(default_factory=lambda: ["512x512"])
    image_dir: str = ""
    audio_seconds: list[float] = field(default_factory=list)
    # api embeddings: inputs per request; api rerank: documents per request (each drawn as a prompt)
    items: int = 1
    seed: int = 0
    # sharegpt, trace: max_tokens = the dataset answer's length; False draws it from output_len instead.
    # Setting output_len explicitly (scenario file or flag) turns this off unless it is also set.
    output_from_dataset: bool = True


@dataclass
class RunConfig:
    """Everything `loadlab run` needs. Exactly one of `concurrency` / `rate` is non-empty."""

    url: str = ""  # may hold user:password@ (sent as Basic auth)
    model: str = ""
    api: str = "chat"  # chat | completions | embeddings | rerank
    # How tokens are counted: "chunks" (the stream's token chunks, as they come), "logprobs" (ask
    # for each token's logprob and count those: exact where a server merges or skips chunks),
    # "timings" (ask llama.cpp for its timings in every chunk: its own count of the tokens
    # generated), or "auto": timings where the server is llama.cpp's, else chunks (decided before
    # the run, loadlab.collect.slots.slot_cap; run.json's config keeps what was decided).
    token_count: str = "auto"
    api_key: str = field(default="", repr=False)  # never written to disk
    concurrency: list[int] = field(default_factory=list)  # closed loop: one step per value
    rate: list[float] = field(default_factory=list)  # open loop (req/s): one step per value
    arrival: str = "poisson"  # poisson | constant | gamma
    burstiness: float = 1.0  # gamma shape; 1.0 = Poisson, < 1 burstier
    think_time: LengthDist | None = None  # closed loop think time, seconds (None = none)
    duration: float = 0.0  # stop after this many seconds (0 = no limit)
    requests: int = 0  # stop after this many requests (0 = no limit)
    step_duration: float = 0.0  # seconds per step when there are several steps
    warmup_requests: int = 0  # first N requests (per step) excluded from results
    ramp_up: float = 1.0  # closed loop: a step's new users start spread over this many seconds
    timeout: float = 300.0  # per-request timeout, seconds (covers stalls)
    # A step whose measured requests fail more often than this ends the run (None = off, for a
    # deliberate fault test); see loadlab/conductor/budget.py for why 0.5 and the minimum count.
    max_error_rate: float | None = 0.5
    processes: int = 1  # local load-generator processes
    out: str = ""  # run folder
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    server_metrics: str | None = ""  # "" = <url>/metrics, None = off
    metrics_interval: float = 1.0
    prometheus: str = ""  # Prometheus server URL ("" = off)
    prometheus_selector: str = ""
    gpu: bool = True  # sample NVML when available
    gpu_interval: float = 0.25
    nccl_inspector_dir: str = ""
    server_pid: int = 0  # sample this process's CPU when on the same host
    # The served model's parameters and the weight bytes each device reads per step (0: unknown):
    # MFU and MBU where the engine does not estimate its work (loadlab.analyze.roofline).
    model_params: float = 0.0
    model_bytes: float = 0.0
    reset_prefix_cache: bool = False  # empty the server's prefix cache before each step
    # SLOs in docs/slo.md's inline syntax ("" = none); a scenario's [slo] table is turned into it.
    # Per-request objectives define the summary's goodput; `loadlab run` gates the run on them all.
    slo: str = ""

    def parsed_url(self, what: str = "--url") -> HttpUrl:
        """`url` checked and taken apart, once per value: every stage from the CLI's checks to
        the requests' endpoint takes it from here. UserError naming `what` when it is bad."""
        memo: tuple[str, HttpUrl] | None = self.__dict__.get(_PARSED_URL)
        if memo is None or memo[0] != self.url:
            memo = (self.url, parse_http_url(self.url, what))
            self.__dict__[_PARSED_URL] = memo
        return memo[1]

    def to_dict(self) -> dict:
        """The config as stored in run.json: everything but secrets."""
        d = asdict(self)
        d.pop("api_key")
        for name in ("url", "server_metrics", "prometheus"):
            if d[name]:
                d[name] = without_credentials(d[name])
        return d
