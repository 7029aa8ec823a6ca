"""Every lab scenario, short, for real: the reference server on this machine's CPU, `loadlab run`,
the analyzer's verdict on the last step. They take minutes together (about 40 s each on a busy
2-core machine).

A scenario about the server may come out client-limited on a machine whose other work starves the
load generator's event loop: then the server-side verdict must still be the expected class (the
provocation worked; the host did not). The client scenario must be client-limited for a reason
beyond event-loop lag, which any busy host shows: users the client could not keep in flight.
"""

from __future__ import annotations

import importlib.util

import pytest

from loadlab.lab.runner import CLIENT_LIMITED, MATCH, SHORT_SECONDS, run_scenario
from loadlab.lab.scenarios import CLIENT, SCENARIOS
from loadlab.lab.suite import server_has_twin

pytestmark = pytest.mark.skipif(importlib.util.find_spec("loadlab.analyze.analysis") is None,
                                reason="no analyzer yet (loadlab.analyze.analysis, branch analyzer): "
                                       "nothing writes analysis.json to judge")

# Where this machine's physics differ from a GPU's (docs/lab.md): measured, reported, not bent.
CPU_PHYSICS = {
    "memory_bandwidth": "on a CPU the reference server's per-token work (sampling, streaming) weighs as much as "
                        "the small preset's weight reads: the step-time fit may find decode steps growing with tokens",
}
# Where the analyzer's rules miss a provoked class (reported to its author, with the evidence).
RULE_GAPS = {
    "compute-twin": "scheduling outscores compute: requests that arrive during 40 ms prefill steps wait "
                    "(2.4 waiting, running 0.9 of a 32-seat cap), and the scheduling rule does not ask "
                    "whether running is pinned at a cap",
}
NO_TWIN = "the reference server has no --twin (branch twin not merged)"


def params() -> list:
    """Every scenario; twin rows skipped without --twin; known misses marked, not hidden."""
    twin = server_has_twin()
    found = []
    for s in SCENARIOS:
        reason = CPU_PHYSICS.get(s.name) or RULE_GAPS.get(s.name)
        marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
        if s.twin and not twin:
            marks.append(pytest.mark.skip(reason=NO_TWIN))
        found.append(pytest.param(s, id=s.name, marks=marks))
    return found


@pytest.mark.parametrize("scenario", params())
def test_each_scenario_provokes_its_class(scenario, tmp_path):
    result = run_scenario(scenario, tmp_path / scenario.name, SHORT_SECONDS, "cpu")
    summary = f"{result.status}: {result.constraint} (server side {result.server_side or '-'}), " \
              f"{result.saturation}; {result.reason or result.headline}; evidence {result.evidence}"
    if scenario.expect == CLIENT:
        assert result.status == MATCH, summary
        assert any(text.startswith(("achieved concurrency", "client cpu", "start delay", "achieved rate"))
                   for text in result.evidence), summary
    else:
        assert result.status in (MATCH, CLIENT_LIMITED), summary
