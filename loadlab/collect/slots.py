"""llama.cpp's server beside its /metrics: the slot cap from GET /props, the slots' state from GET /slots.

`llama-server --parallel N` runs at most N requests at once, one per slot, and defers the rest;
its Prometheus page (`--metrics`) says how many are processing and deferred, but not N. /props
says N (`total_slots`) on every llama-server, with or without --metrics; /slots (on unless
`--no-slots`) says which slots are busy and how much of its context each holds. The cap lands on
the canonical `running_cap`, so the scheduling rule sets the running count against the configured
cap rather than the most seen; the slots' state keeps raw `llamacpp:` names (not a server gauge
the analyzer judges on: the busy count duplicates `llamacpp:requests_processing` where /metrics
is on, and a run without it keeps its black-box verdict).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from loadlab.clock import now
from loadlab.collect.poller import PollingCollector
from loadlab.collect.signals import RUNNING_CAP
from loadlab.store.schema import Sample
from loadlab.urls import HttpUrl

SLOTS_BUSY = "llamacpp:slots_processing"  # slots processing a request (/slots `is_processing`)
SLOT_TOKENS = "llamacpp:slot_tokens"  # label `slot`: tokens its context holds (its request's or last request's)
SLOT_CONTEXT = "llamacpp:slot_context"  # label `slot`: the slot's context size (-c / --parallel)
PROBE_TIMEOUT = 2.0


def _get_json(url: HttpUrl, path: str, timeout: float) -> Any:
    request = urllib.request.Request(url.origin + path)
    authorization = url.authorization()
    if authorization:
        request.add_header("Authorization", authorization)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def slot_cap(url: HttpUrl, timeout: float = PROBE_TIMEOUT) -> int | None:
    """The server's slot count when it is llama.cpp's (GET /props on the server behind the API
    URL `url` answers `total_slots`); None when it is not, or does not answer."""
    try:
        props = _get_json(url, "/props", timeout)
    except (OSError, ValueError):  # (urllib's errors are OSErrors)
        return None
    slots = props.get("total_slots") if isinstance(props, dict) else None
    return slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None


class SlotsCollector(PollingCollector):
    """Every `interval` seconds: the slot cap, and where /slots answers, each slot's state."""

    source = "slots"

    def __init__(self, url: HttpUrl, cap: int, interval: float = 1.0) -> None:
        super().__init__(interval)
        self.url = url
        self.cap = cap
        self.timeout = max(1.0, interval)
        self.slots_on = True  # False once /slots answered with an error status (`--no-slots`)

    def poll(self) -> list[Sample]:
        """The cap, and the slots' state while /slots answers."""
        t = now()
        samples = [Sample(t, self.source, RUNNING_CAP, float(self.cap))]
        if self.slots_on:
            try:
                slots = _get_json(self.url, "/slots", self.timeout)
            except urllib.error.HTTPError as e:  # 501 with --no-slots: the cap alone from now on
                self.slots_on = False
                self.note_error(f"{self.url.origin}/slots answered HTTP {e.code}: the slot cap only")
                return samples
            samples += _slot_samples(slots, t, self.source)
        return samples


def _slot_samples(slots: object, t: float, source: str) -> list[Sample]:
    """The state of each slot in /slots' answer (a list of slot objects)."""
    if not isinstance(slots, list):
        raise ValueError(f"/slots answered a {type(slots).__name__}, not a list of slots")
    samples: list[Sample] = []
    busy = 0
    for slot in slots:
        if not isinstance(slot, dict):
            continue
        busy += bool(slot.get("is_processing"))
        label = {"slot": str(slot.get("id", ""))}
        for name, key in ((SLOT_CONTEXT, "n_ctx"), (SLOT_TOKENS, "n_prompt_tokens")):
            value = slot.get(key)
            if isinstance(value, int):
                samples.append(Sample(t, source, name, float(value), label))
    samples.append(Sample(t, source, SLOTS_BUSY, float(busy)))
    return samples
