"""Run a list of lab scenarios one after another into one lab folder and collect their results."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from loadlab.lab.engines import Engine, reference_engine
from loadlab.lab.processes import NotReady
from loadlab.lab.runner import FAILED, Result, run_scenario, serving, skipped
from loadlab.lab.scenarios import Scenario
from loadlab.numbers import format_value

PROBE_TIMEOUT = 120.0


def run_lab(
    scenarios: list[Scenario],
    out: Path,
    seconds: float,
    device: str,
    say: Callable[[str], None] = lambda line: None,
    engine: Engine | None = None,
) -> Iterator[Result]:
    """Each scenario's result as it finishes (so an interrupted lab keeps the ones done), each
    run in its own sub-folder of `out` on a server of `engine` (the reference server by default);
    consecutive scenarios whose servers start alike share one, started for the first of them.
    A twin scenario is skipped (with the reason) when the reference server has no --twin.
    `seconds`: each load step's length."""
    engine = engine or reference_engine()
    twin = server_has_twin() if any(s.twin for s in scenarios) else True
    for _, grouped in itertools.groupby(scenarios, key=lambda s: s.server_key):
        group = list(grouped)
        if group[0].twin and not twin:
            for scenario in group:
                say(f"{scenario.name}: skipped (no --twin)")
                yield skipped(scenario, "the reference server has no --twin (the GPU twin is not built in)")
        elif len(group) == 1:
            yield _said(run_scenario(group[0], out / group[0].name, seconds, device, say, engine), say)
        else:
            yield from _shared(group, out, seconds, device, say, engine)


def _shared(
    group: list[Scenario], out: Path, seconds: float, device: str, say: Callable[[str], None], engine: Engine
) -> Iterator[Result]:
    """Scenarios run one after another on one server, started for the first of them."""
    first = group[0]
    started = time.monotonic()
    try:
        with serving(first, engine, out / first.name, device, say) as served:
            for scenario in group:
                result = run_scenario(scenario, out / scenario.name, seconds, device, say, server=served)
                if scenario is first:  # its time includes the server's start, as an unshared one's does
                    result.seconds = time.monotonic() - started
                yield _said(result, say)
    except NotReady as e:
        for scenario in group:
            result = Result(scenario.name, scenario.expect or "", list(scenario.expect_saturation), FAILED)
            result.folder, result.reason = str(out / scenario.name), f"{e} (see {first.name}/server.log)"
            yield _said(result, say)


def _said(result: Result, say: Callable[[str], None]) -> Result:
    say(f"{result.name}: {result.status} ({result.constraint or result.reason}, {format_value(result.seconds, 's')})")
    return result


def resolve_device(device: str) -> str:
    """`auto` -> cuda when torch sees a GPU, else cpu (asked of a child: loadlab never imports torch)."""
    if device != "auto":
        return device
    probe = [sys.executable, "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"]
    try:
        found = subprocess.run(probe, capture_output=True, timeout=PROBE_TIMEOUT, check=False)
        return "cuda" if found.returncode == 0 else "cpu"
    except subprocess.TimeoutExpired:
        return "cpu"


def server_has_twin() -> bool:
    """Whether `python -m reference_server` takes --twin."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "reference_server", "--help"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return "--twin" in done.stdout
