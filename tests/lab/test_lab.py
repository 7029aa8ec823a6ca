"""Every lab scenario, short, for real: the reference server on this machine's CPU, `loadlab run`,
the analyzer's verdict on the last step. They take minutes together (about 40 s each on a busy
2-core machine).

Each must come out as its class: event-loop lag alone (which any busy host shows) does not
make a step client-limited, only an effect on the load does (docs/diagnosis.md). The client
scenario must be client-limited for such an effect: users the client could not keep in flight,
or requests leaving late.
"""

from __future__ import annotations

import pytest

from loadlab.lab.runner import MATCH, SHORT_SECONDS, run_scenario
from loadlab.lab.scenarios import SCENARIOS
from loadlab.metrics.verdicts import CLIENT

# Each scenario provokes its class with the host's cores: other tests beside it would change it.
pytestmark = pytest.mark.serial

# Where this machine's physics differ from a GPU's (docs/lab.md): measured, reported, not bent.
CPU_PHYSICS: dict[str, str] = {}
# Where the analyzer's rules miss a provoked class (reported to its author, with the evidence).
RULE_GAPS: dict[str, str] = {}
# The twin's step times are modelled, not this host's: 5 s steps judge it as surely as 12 (measured:
# both twin rows as built in 3 of 3 runs at 5 s on the busy machine), and save ~40 s.
TWIN_SECONDS = 5.0


def params() -> list:
    """Every scenario, the twin's rows too (the reference server here has --twin); known misses
    marked, not hidden."""
    found = []
    for s in SCENARIOS:
        reason = CPU_PHYSICS.get(s.name) or RULE_GAPS.get(s.name)
        marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
        found.append(pytest.param(s, id=s.name, marks=marks))
    return found


@pytest.mark.parametrize("scenario", params())
def test_each_scenario_provokes_its_class(scenario, tmp_path):
    seconds = TWIN_SECONDS if scenario.twin else SHORT_SECONDS
    result = run_scenario(scenario, tmp_path / scenario.name, seconds, "cpu")
    summary = (
        f"{result.status}: {result.constraint} (server side {result.server_side or '-'}), "
        f"{result.saturation}; {result.reason or result.headline}; evidence {result.evidence}"
    )
    assert result.status == MATCH, summary
    if scenario.expect == CLIENT:
        assert any(
            text.startswith(("achieved concurrency", "start delay", "achieved rate")) for text in result.evidence
        ), summary
