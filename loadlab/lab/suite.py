"""Run a list of lab scenarios one after another into one lab folder and collect their results."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from loadlab.lab.runner import Result, run_scenario, skipped
from loadlab.lab.scenarios import Scenario

PROBE_TIMEOUT = 120.0


def run_lab(
    scenarios: list[Scenario], out: Path, seconds: float, device: str, say: Callable[[str], None] = lambda line: None
) -> Iterator[Result]:
    """Each scenario's result as it finishes (so an interrupted lab keeps the ones done), each
    run in its own sub-folder of `out`; a twin scenario is skipped (with the reason) when the
    reference server has no --twin. `seconds`: each load step's length."""
    twin = server_has_twin() if any(s.twin for s in scenarios) else True
    for scenario in scenarios:
        if scenario.twin and not twin:
            say(f"{scenario.name}: skipped (no --twin)")
            yield skipped(scenario, "the reference server has no --twin (the GPU twin is not built in)")
            continue
        result = run_scenario(scenario, out / scenario.name, seconds, device, say)
        say(f"{scenario.name}: {result.status} ({result.constraint or result.reason}, {result.seconds:.0f} s)")
        yield result


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
