"""The bounds on every size a user can ask for, in one place (docs/workloads.md, "Bounds").

Each bound is checked before anything is built or sent (`check_bounds`, from the config checks
of every command), so no flag, scenario key or trace line can make loadlab build a request, or a
run, that takes the machine. Together they give the memory budget of one load-generator process:
PROCESS_BASE_BYTES of its own, plus, for each request in flight, BODY_COPIES copies of its body
(at most MAX_REQUEST_BYTES), all of which stay within IN_FLIGHT_BYTES.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from loadlab.config import LengthDist, RunConfig, WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.distributions import draw_range

DOCS = "docs/workloads.md, Bounds"

# One request. Beyond any context window served today (the longest are ~1M tokens).
MAX_TOKENS = 1 << 20  # prompt or output tokens of one request (also a trace's lengths)
MAX_ITEMS = 2048  # inputs (embeddings) or documents (rerank) per request: OpenAI's limit for inputs
MAX_IMAGES = 256  # images per request
MAX_IMAGE_SIDE = 8192  # pixels, width or height of a synthetic image
MAX_IMAGE_FILE_BYTES = 32 << 20  # one file of --image-dir
MAX_IMAGE_DIR_BYTES = 128 << 20  # all of --image-dir's files (each process holds them all, as base64)
MAX_AUDIO_SECONDS = 600.0  # one clip: 19.2 MB of 16 kHz 16-bit WAV, 25.6 MB as base64
MAX_TURNS = 1000  # turns of a conversation, model calls of a tool session
MAX_PROMPT_POOL_BYTES = 256 << 20  # shared_prefix: its N prefixes and N x M suffixes are built up front
MAX_REQUEST_BYTES = 64 << 20  # the estimated body of one request, all its text and media
# A request in flight holds its body ~4 times (the spec's text, the JSON text, the bytes sent, the
# HTTP client's buffer): measured, 8 users sending 600 s audio clips (24 MiB) held 800 MB more than one.
BODY_COPIES = 4
IN_FLIGHT_BYTES = 2 << 30  # in-flight requests x BODY_COPIES x the largest body, per process
PROCESS_BASE_BYTES = 256 << 20  # a load-generator process's own memory, measured ~190 MB (`run`, 1 user)

# One run. A week is longer than any load test; the count bounds what a step may ask for.
MAX_SECONDS = 7 * 24 * 3600.0  # --duration, --step-duration, --timeout, --ramp-up, think and tool times
MAX_REQUESTS = 100_000_000  # --requests, --warmup-requests
MAX_STEPS = 1000  # steps of a run (--concurrency 1,2,4,... or --rate) or of a sweep (--max-steps)
# Beyond these one process cannot keep its promise (judgement, from bench/results/client.md: ~20 µs
# of CPU per token, one socket per user): refuse rather than start a run that can never keep up.
MAX_USERS_PER_PROCESS = 20_000
MAX_RATE_PER_PROCESS = 5_000
MAX_PROCESSES = 256
# The open-loop client's cap on requests in flight per process (loadlab/client/users.py): arrivals
# beyond it wait for a slot.
OPEN_LOOP_MAX_IN_FLIGHT = 1024

# A ShareGPT file is parsed whole (~4x its size in memory): ShareGPT_V3's 642 MB fits.
MAX_DATASET_BYTES = 1 << 30
# Traces: read a line at a time; a line (one request) is short; held, ~28 bytes a request.
MAX_TRACE_LINE_BYTES = 1 << 20
MAX_TRACE_REQUESTS = 20_000_000

# `simulate`: beyond these a simulation takes more than ~10 minutes on one core (docs/simulate.md:
# 1,000 users for 600 simulated seconds, 24k requests, took ~66 s).
SIMULATION_MINUTES = 10
MAX_SIMULATED_SECONDS = 3600.0  # all the steps' simulated seconds
MAX_SIMULATED_USER_SECONDS = 6_000_000.0  # closed loop: users x simulated seconds, summed over steps
MAX_SIMULATED_REQUESTS = 250_000  # open loop: rate x seconds; a step that ends on its request count
# `plan --users`: absurd figures get a note (what they rest on); beyond this one the arithmetic
# (floats, exact to 2**53) no longer counts users and replicas exactly.
MAX_PLAN_USERS = 10**15

_FLAGS = {  # a setting's flag, for the error line (else its scenario key)
    "input_len": "--input-len",
    "output_len": "--output-len",
    "tool_output_len": "--tool-output-len",
    "items": "--items",
    "images": "--images",
    "audio_seconds": "--audio-seconds",
    "turns": "--turns",
    "duration": "--duration",
    "step_duration": "--step-duration",
    "timeout": "--timeout",
    "ramp_up": "--ramp-up",
    "think_time": "--think-time",
    "tool_time": "--tool-time",
    "requests": "--requests",
    "warmup_requests": "--warmup-requests",
    "processes": "--processes",
}


def too_big(flag: str, value: float, bound: float, unit: str) -> UserError:
    """The one-line error for `flag`'s `value` above its `bound` (in `unit`)."""
    return UserError(f"{flag} {_number(value)} is more than the bound of {_number(bound)} {unit} ({DOCS})")


def check_bounds(cfg: RunConfig) -> None:
    """UserError (one line naming the flag, the value and the bound) for any size above its bound."""
    w = cfg.workload
    for name in ("input_len", "output_len", "tool_output_len"):
        _at_most(name, _most(getattr(w, name)), MAX_TOKENS, "tokens")
    _at_most("prefix_len", w.prefix_len, MAX_TOKENS, "tokens")
    if w.kind == "shared_prefix":
        pool = w.num_prefixes * (w.prefix_len + w.suffixes_per_prefix * _most(w.input_len))
        if pool > MAX_PROMPT_POOL_BYTES:
            raise UserError(
                f"shared_prefix's {w.num_prefixes:,} prefixes of {w.prefix_len:,} tokens and "
                f"{w.num_prefixes * w.suffixes_per_prefix:,} suffixes of up to {_number(_most(w.input_len))} tokens "
                f"are more than the bound of {_megabytes(MAX_PROMPT_POOL_BYTES)} of prompts built up front ({DOCS})"
            )
    _at_most("items", w.items, MAX_ITEMS, "inputs per request")
    _at_most("images", max(w.images, default=0), MAX_IMAGES, "images per request")
    _at_most("audio_seconds", max(w.audio_seconds, default=0.0), MAX_AUDIO_SECONDS, "seconds per clip")
    _at_most("turns", w.turns, MAX_TURNS, "turns")
    for name in ("duration", "step_duration", "timeout", "ramp_up"):
        _at_most(name, getattr(cfg, name), MAX_SECONDS, "seconds")
    _at_most("think_time", _most(cfg.think_time) if cfg.think_time else 0.0, MAX_SECONDS, "seconds")
    _at_most("tool_time", _most(w.tool_time), MAX_SECONDS, "seconds")
    for name in ("requests", "warmup_requests"):
        _at_most(name, getattr(cfg, name), MAX_REQUESTS, "requests")
    _at_most("processes", cfg.processes, MAX_PROCESSES, "processes")
    steps = len(cfg.concurrency or cfg.rate)
    if steps > MAX_STEPS:
        flag = "--rate" if cfg.rate else "--concurrency"
        raise UserError(f"{flag}: {steps:,} steps is more than the bound of {MAX_STEPS:,} steps ({DOCS})")
    body = request_bytes(cfg)
    if body > MAX_REQUEST_BYTES:
        raise UserError(
            f"one request would carry ~{_megabytes(body)} ({_sizes(cfg)}): more than the bound of "
            f"{_megabytes(MAX_REQUEST_BYTES)} per request ({DOCS})"
        )
    check_in_flight(cfg, body)


def check_in_flight(cfg: RunConfig, body: int) -> None:
    """UserError when the requests one process may have in flight, each of up to `body` bytes,
    would hold more than IN_FLIGHT_BYTES."""
    in_flight = in_flight_per_process(cfg)
    if in_flight * BODY_COPIES * body > IN_FLIGHT_BYTES:
        raise UserError(
            f"{_number(in_flight)} requests in flight per process, each holding ~{_megabytes(BODY_COPIES * body)}, "
            f"is more than the {_megabytes(IN_FLIGHT_BYTES)} one load-generator process may hold ({DOCS}): "
            "add --processes, send smaller requests (or, open loop, lower --timeout)"
        )


def in_flight_per_process(cfg: RunConfig) -> int:
    """The most requests one load-generator process can have in flight: its users (closed loop), or
    its arrivals within a request's timeout, at most the open-loop cap."""
    processes = max(cfg.processes, 1)
    if cfg.concurrency:
        return -(-max(cfg.concurrency) // processes)
    if cfg.rate:
        return min(OPEN_LOOP_MAX_IN_FLIGHT, math.ceil(max(cfg.rate) / processes * cfg.timeout))
    # A trace on its own clock is open loop; a config without its load yet (a sweep's, a scenario
    # file's) is checked again once the load is set.
    return OPEN_LOOP_MAX_IN_FLIGHT if cfg.workload.kind == "trace" else 1


def request_bytes(cfg: RunConfig) -> int:
    """An upper estimate of one request's body in bytes: its text (a token is a byte of synthetic
    text), its synthetic images and its audio, as base64 (an --image-dir's files: MediaSource)."""
    w = cfg.workload
    prompt = _most(w.input_len)
    if w.kind == "shared_prefix":
        prompt += w.prefix_len
    elif w.kind in ("multiturn", "tools"):  # each turn resends the history, answers included
        tool = _most(w.tool_output_len) if w.kind == "tools" else 0
        prompt = w.turns * (_most(w.input_len) + _most(w.output_len) + tool)
    text = prompt * (w.items if cfg.api in ("embeddings", "rerank") else 1)
    images = max(w.images, default=0) * _image_bytes(w.image_sizes)
    audio = max(w.audio_seconds, default=0.0) * 32_000 * 4 / 3
    return int(text + images + audio)


def _image_bytes(sizes: Iterable[str]) -> float:
    """A synthetic image's PNG as base64, at most (its grey rows deflate ~200:1; measured 190-226:1)."""
    largest = 0
    for size in sizes:
        width, _, height = size.partition("x")
        if width.isdigit() and height.isdigit():
            largest = max(largest, int(width) * int(height))
    return (3 * largest / 150 + 1024) * 4 / 3


def _least(dist: LengthDist) -> float:
    return draw_range(dist)[0]


def _most(dist: LengthDist) -> float:
    return draw_range(dist)[1]


def _at_most(name: str, value: float, bound: float, unit: str) -> None:
    if value > bound:
        raise too_big(_FLAGS.get(name, name), value, bound, unit)


def token_range(w: WorkloadConfig, api: str) -> tuple[int, int]:
    """The fewest and the most tokens, prompt and output, one request of the synthetic kinds can ask
    for (a pooling API's item: its prompt alone); the kinds that read a data set say their own."""
    if api in ("embeddings", "rerank"):
        return int(_least(w.input_len)), int(_most(w.input_len))
    shortest = _least(w.input_len) + _least(w.output_len)
    longest = _most(w.input_len) + _most(w.output_len)
    if w.kind == "shared_prefix":
        shortest, longest = shortest + w.prefix_len, longest + w.prefix_len
    elif w.kind in ("multiturn", "tools"):  # the last turn carries the whole history
        tool = _most(w.tool_output_len) if w.kind == "tools" else 0
        longest = w.turns * (longest + tool)
    return int(shortest), int(longest)


def context_warning(tokens: tuple[int, int], context: int) -> str:
    """ "" when every request fits the endpoint's context window (max_model_len, as /v1/models says);
    a warning when some may not; UserError when none can."""
    shortest, longest = tokens
    if shortest > context:
        raise UserError(
            f"every request asks for at least {shortest:,} tokens (prompt and output): more than the endpoint's "
            f"max_model_len {context:,}, so the server would refuse them all"
        )
    if longest > context:
        return (
            f"requests may ask for up to {longest:,} tokens (prompt and output), more than the endpoint's "
            f"max_model_len {context:,}: the server refuses those (counted as failures)"
        )
    return ""


def _sizes(cfg: RunConfig) -> str:
    w = cfg.workload
    parts = [f"prompts up to {_number(_most(w.input_len))} tokens"]
    if cfg.api in ("embeddings", "rerank"):
        parts.append(f"x {_number(w.items)} items")
    if w.kind in ("multiturn", "tools"):
        parts.append(f"x {_number(w.turns)} turns")
    if w.images:
        parts.append(f"{max(w.images)} images")
    if w.audio_seconds:
        parts.append(f"{_number(max(w.audio_seconds))} s of audio")
    return ", ".join(parts)


def _number(value: float) -> str:
    # a fraction, or a number of over 40 digits (1e300 would print 301), as `g` writes it
    if isinstance(value, float) and not value.is_integer() or not math.isfinite(value) or abs(value) >= 1e40:
        return f"{value:g}"
    return f"{int(value):,}"


def _megabytes(value: float) -> str:
    return f"{value / (1 << 20):,.0f} MiB"
