"""`python -m reference_server.simulate --out FILE`: the twin's engine on a virtual clock, driven by
a planned workload, with no HTTP and no sleeping.

The engine is the one `serve --twin` runs (EngineCore: scheduler, KV blocks, prefix cache, the
twin's executor and its timing model, the metrics registry), on a `VirtualClock`: a step moves the
clock by its modelled time, and with nothing to run the clock jumps to the next event. Requests
are parsed by the HTTP API's own parsers from the bodies a client would send.

stdin, JSON lines: a header, then the requests in the order the users take them, each
`{"body": OpenAI request body, "think": seconds after it (closed loop), "gap": arrival gap at rate 1
(open loop), "meta": anything, echoed back}`. The reader stops reading when it has enough.
Header: `{"engine": EngineConfig fields, "api": "chat" | "completions", "steps": [{"mode",
"target", "seconds", "requests", "warmup"}], "ramp_up": s, "timeout": s, "metrics_interval": s,
"grace": s, "cut_off": detail}`: the requests still in flight `grace` seconds after the last step
ended are cut off (recorded as aborted, with that detail), as the load generator does.

--out, JSON lines, times in virtual seconds from 0: `{"kind": "request", ...}` per request (its
`tokens`: the token times as float64 in this machine's byte order, base64: written and read as JSON
numbers, millions of them cost more than the run folder's other work),
`{"kind": "metrics", "time", "text"}` (the /metrics exposition every metrics_interval),
`{"kind": "step", "index", "start", "end"}` and a last `{"kind": "end", "time", "reason", "cut_off"}`
(cut_off: how many requests the grace cut off).
"""

from __future__ import annotations

import argparse
import base64
import gc
import heapq
import itertools
import json
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import IO, Any

from prometheus_client import generate_latest

from reference_server.api.errors import APIError
from reference_server.api.requests import GenerationRequest, ServedModel, parse_chat, parse_completion
from reference_server.config import EngineConfig
from reference_server.engine.clock import VirtualClock
from reference_server.engine.core import EngineCore, RequestOutput
from reference_server.interface import StepFailed

# Event kinds, in the order they fire at the same instant: a step's end before the sends it stops.
STEP_END, SAMPLE, CUT_OFF, TIMEOUT, SEND, ARRIVAL = range(6)


@dataclass
class Step:
    """One load step of the plan: closed loop (`target` users) or open loop (`target` requests/s)."""

    mode: str
    target: float
    seconds: float  # 0: no time limit
    requests: int  # finished requests that end it; 0: no limit
    warmup: int  # its first `warmup` requests are warm-up
    start: float = 0.0
    sent: int = 0
    finished: int = 0


@dataclass
class Flight:
    """A request sent and not yet finished."""

    meta: Any
    step: int
    warmup: bool
    user: int  # closed-loop user, -1 in open loop
    think: float
    scheduled: float
    send: float
    tokens: array = field(default_factory=lambda: array("d"))  # each token's time
    prompt_tokens: int = -1
    completion_tokens: int = -1


class Simulation:
    """Users (or arrivals), the engine core and the metrics scrapes, on one virtual clock."""

    def __init__(self, header: dict[str, Any], requests: Iterator[dict[str, Any]], out: IO[str]) -> None:
        known = {f.name for f in fields(EngineConfig)}
        self.config = EngineConfig(**{k: v for k, v in header["engine"].items() if k in known})
        if not self.config.twin:
            raise ValueError("a simulation needs a twin (GPU:MODEL[:tpN]): a real model takes real time")
        self.clock = VirtualClock()
        self.core = EngineCore(self.config, self.clock)
        self.model = ServedModel(
            self.config.model_name, self.core.max_model_len, self.core.shape.vocab_size, self.core.tokenizer
        )
        self.parse = parse_chat if header.get("api", "chat") == "chat" else parse_completion
        self.steps = [Step(s["mode"], s["target"], s["seconds"], s["requests"], s["warmup"]) for s in header["steps"]]
        self.ramp_up = float(header.get("ramp_up", 0.0))
        self.timeout = float(header.get("timeout", 300.0))
        self.grace = float(header.get("grace", self.timeout))
        self.cut_off_detail = str(header.get("cut_off", f"cut off {self.grace:g} s after the last step's end"))
        self.cut_off = 0  # requests the grace cut off
        self.interval = float(header.get("metrics_interval", 1.0))
        self.requests = requests
        self.out = out
        self.events: list[tuple[float, int, int, int]] = []  # (time, kind, order, argument)
        self.order = itertools.count()
        self.flights: dict[str, Flight] = {}
        self.live_users: set[int] = set()  # closed-loop users with a send pending or a request in flight
        self.current = -1  # index of the running step; len(steps) once the load has ended
        self.ids = itertools.count()
        self.reason = ""

    # ---- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """Run every step, then finish the requests in flight (each within the timeout)."""
        # What exists now (the engine, every imported module: torch's are many) lives as long as the
        # run: the collector's full passes, which the steps' short-lived objects set off, skip it.
        gc.freeze()
        try:
            self._run()
        finally:
            gc.unfreeze()

    def _run(self) -> None:
        self._push(0.0, SAMPLE)
        self._begin_step(0, 0.0)
        core, clock = self.core, self.clock
        self._fire_due(clock.now())
        while self.current < len(self.steps) or self.flights:
            result = core.step()
            if result.num_scheduled:
                # What happened during the step (a timeout, a cut-off) came before its tokens; what
                # happens as it ends (a user sending on hearing its last token) comes after the
                # engine began its next step, at that very instant: it reaches the engine too late.
                self._fire_due(clock.now(), before=True)
                self._on_outputs(result.outputs, clock.now())
            else:
                if not self.events:  # nothing runs and nothing will happen: requests stuck waiting
                    self.reason = f"{core.num_waiting} requests could never be scheduled"
                    break
                clock.advance_to(self.events[0][0])
                self._fire_due(clock.now())  # an idle engine wakes for it
        for rid in list(self.flights):
            self._abort(rid, clock.now(), "aborted", "still waiting when the simulation ended")
        self._scrape()
        self._write({"kind": "end", "time": clock.now(), "reason": self.reason, "cut_off": self.cut_off})

    def _push(self, when: float, kind: int, argument: int = 0) -> None:
        heapq.heappush(self.events, (when, kind, next(self.order), argument))

    def _fire_due(self, now: float, before: bool = False) -> None:
        """Fire the events due by `now` (`before`: strictly before it)."""
        events = self.events
        while events and (events[0][0] < now or (not before and events[0][0] == now)):
            when, kind, _, argument = heapq.heappop(self.events)
            if kind == STEP_END:
                if argument == self.current:
                    self._end_step(when)
            elif kind == SAMPLE:
                self._scrape(when)
                if self.current < len(self.steps) or self.flights:
                    self._push(when + self.interval, SAMPLE)
            elif kind == CUT_OFF:
                self.cut_off += len(self.flights)
                for rid in list(self.flights):
                    self._abort(rid, when, "aborted", self.cut_off_detail)
            elif kind == TIMEOUT:
                rid = f"sim-{argument}"
                if rid in self.flights:
                    self._abort(rid, when, "timeout", f"no end after {self.timeout:g} s")
            elif kind == SEND:
                self._user_sends(argument, when)
            else:
                self._arrival(argument, when)

    # ---- steps and users ---------------------------------------------------------------------

    def _begin_step(self, index: int, now: float) -> None:
        self.current = index
        if index >= len(self.steps):  # the load has ended: what is in flight gets the grace to finish
            self._push(now + self.grace, CUT_OFF)
            return
        step = self.steps[index]
        step.start = now
        self._write({"kind": "step", "index": index, "start": now, "end": None})
        if step.seconds:
            self._push(now + step.seconds, STEP_END, index)
        if step.mode == "open":
            self._push(now, ARRIVAL, index)
            return
        new = [u for u in range(int(step.target)) if u not in self.live_users]
        for i, user in enumerate(new):
            self.live_users.add(user)
            self._push(now + self.ramp_up * i / len(new), SEND, user)

    def _end_step(self, when: float) -> None:
        self._write({"kind": "step", "index": self.current, "start": self.steps[self.current].start, "end": when})
        self._begin_step(self.current + 1, when)

    def _user_sends(self, user: int, when: float) -> None:
        step = self.steps[self.current] if self.current < len(self.steps) else None
        if step is None or step.mode != "closed" or user >= step.target:
            self.live_users.discard(user)  # the load went down or ended: this user stops
            return
        if not self._send(step, user, when):
            self.live_users.discard(user)

    def _arrival(self, index: int, when: float) -> None:
        if index != self.current:
            return
        step = self.steps[index]
        gap = self._send(step, -1, when)
        if gap is not None:
            self._push(when + gap / step.target, ARRIVAL, index)

    def _send(self, step: Step, user: int, when: float) -> float | None:
        """Send the next planned request; returns its gap (open loop), None when the plan has run out."""
        if step.requests and step.sent >= step.requests:
            return None
        line = next(self.requests, None)
        if line is None:
            self.reason = self.reason or "the workload ran out of requests"
            return None
        number = next(self.ids)
        rid = f"sim-{number}"
        flight = Flight(
            line.get("meta"), self.current, step.sent < step.warmup, user, float(line.get("think", 0.0)), when, when
        )
        step.sent += 1
        try:
            request: GenerationRequest = self.parse(line["body"], self.model)
        except APIError as e:
            self._record(rid, flight, when, error="http_4xx", status=e.status, detail=e.message)
            return float(line.get("gap", 0.0))
        if self.core.num_waiting >= self.config.max_waiting:
            self._record(rid, flight, when, error="http_429", status=429, detail="the waiting queue is full")
            return float(line.get("gap", 0.0))
        self.core.add(self.core.new_sequence(rid, request.prompts[0], request.params))
        self.flights[rid] = flight
        self._push(when + self.timeout, TIMEOUT, number)
        return float(line.get("gap", 0.0))

    # ---- outputs -----------------------------------------------------------------------------

    def _on_outputs(self, outputs: list[RequestOutput], now: float) -> None:
        """Record a step's outputs (a loop over its tokens: the simulator's hot path)."""
        flights = self.flights
        for out in outputs:
            flight = flights.get(out.request_id)
            if flight is None:
                continue
            o = out.output
            if isinstance(o, StepFailed):
                self._finish(out.request_id, now, error="stream_error", detail=str(o))
                continue
            if o.text:
                flight.tokens.append(now)
            flight.prompt_tokens, flight.completion_tokens = o.prompt_tokens, o.output_tokens
            if o.finish_reason is not None:
                self._finish(out.request_id, now, finish=o.finish_reason)

    def _abort(self, rid: str, when: float, error: str, detail: str) -> None:
        self.core.abort(rid)
        self._finish(rid, when, error=error, detail=detail)

    def _finish(self, rid: str, now: float, finish: str = "", error: str = "", detail: str = "") -> None:
        flight = self.flights.pop(rid)
        self._record(rid, flight, now, finish=finish, error=error, detail=detail, status=200)
        step = self.steps[flight.step]
        step.finished += 1
        if step.requests and step.finished >= step.requests and flight.step == self.current:
            self._end_step(now)
        if flight.user >= 0:
            self._push(now + flight.think, SEND, flight.user)

    def _record(
        self, rid: str, flight: Flight, end: float, finish: str = "", error: str = "", detail: str = "", status: int = 0
    ) -> None:
        self._write(
            {
                "kind": "request",
                "id": rid,
                "meta": flight.meta,
                "step": flight.step,
                "warmup": flight.warmup,
                "scheduled": flight.scheduled,
                "send": flight.send,
                "tokens": base64.b64encode(flight.tokens.tobytes()).decode("ascii"),
                "end": end,
                "prompt_tokens": flight.prompt_tokens,
                "completion_tokens": flight.completion_tokens,
                "finish": finish,
                "error": error,
                "detail": detail,
                "status": status,
            }
        )

    def _scrape(self, when: float | None = None) -> None:
        text = generate_latest(self.core.metrics.registry).decode()
        self._write({"kind": "metrics", "time": self.clock.now() if when is None else when, "text": text})

    def _write(self, item: dict[str, Any]) -> None:
        self.out.write(json.dumps(item, separators=(",", ":")) + "\n")


def read_lines(stream: IO[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a stream of JSON lines, read as they are needed."""
    for line in stream:
        if line.strip():
            yield json.loads(line)


def main(argv: list[str] | None = None) -> int:
    """Read the plan on stdin, simulate, write the results to --out; bad input is one line, exit 2."""
    parser = argparse.ArgumentParser(prog="python -m reference_server.simulate", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="file for the results (JSON lines)")
    args = parser.parse_args(argv)
    lines = read_lines(sys.stdin)
    try:
        header = next(lines)
        with open(args.out, "w") as out:
            Simulation(header, lines, out).run()
    except (ValueError, KeyError, TypeError, StopIteration, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
