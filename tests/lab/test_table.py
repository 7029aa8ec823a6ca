"""The confusion table: per-scenario rows, the expected x verdict matrix, lab.json and lab.md."""

from __future__ import annotations

from rich.console import Console

from loadlab.lab.runner import CLIENT_LIMITED, MATCH, MISMATCH, SKIPPED, Result
from loadlab.lab.table import LabRun, print_lab, to_markdown


def lab() -> LabRun:
    return LabRun(
        "loadlab lab --short",
        "cpu",
        12.0,
        "runs/lab",
        [
            Result(
                "kv",
                "kv_capacity",
                ["past_knee"],
                MATCH,
                "kv_capacity",
                "past_knee",
                0.91,
                evidence=["kv usage p90 100 % >= 90 %"],
                server_cores="0",
                client_cores="1",
            ),
            Result("sched", "scheduling", [], CLIENT_LIMITED, "client", "past_knee", 1.0, server_side="scheduling"),
            Result("mb", "memory_bandwidth", [], MISMATCH, "compute", "at_knee", 0.4, runner_up="memory_bandwidth"),
            Result("light", "", ["under_loaded"], MATCH, "compute", "under_loaded", 0.3),
            Result("twin", "compute", [], SKIPPED, reason="the reference server has no --twin"),
            Result("starved", "client", [], MATCH, "client", "overloaded", 1.0, client_rival="a CPU-bound process"),
        ],
    )


def test_confusion_counts_judged_scenarios_in_the_terms_each_expects():
    assert lab().confusion() == {
        "kv_capacity": {"kv_capacity": 1},
        "client": {"client": 1},
        "memory_bandwidth": {"compute": 1},
        "scheduling": {"client": 1},
        "under_loaded": {"under_loaded": 1},
    }
    data = lab().to_dict()
    assert (data["matched"], data["client_limited"], data["judged"]) == (3, 1, 5)
    assert [r["status"] for r in data["results"]] == [
        "match",
        "client_limited",
        "mismatch",
        "match",
        "skipped",
        "match",
    ]
    assert data["results"][-1]["client_rival"] == "a CPU-bound process"  # how the client was starved


def test_markdown_and_terminal_show_every_scenario_and_why():
    md = to_markdown(lab())
    assert md.startswith(
        "`loadlab lab --short` (reference on cpu, 12 s per step): 3 of 5 judged scenarios as expected, "
        "1 client-limited (server side as expected)."
    )
    assert "| mb | memory_bandwidth | compute | at_knee | 0.4 | memory_bandwidth | NO |" in md
    assert "| twin | compute |  |  |  |  | skipped | the reference server has no --twin |" in md
    assert "| light | any constraint (under_loaded) | compute | under_loaded |" in md
    assert "| expected \\ verdict | client | compute | kv_capacity | under_loaded |" in md
    assert "\nstarved: the load generator starved by a CPU-bound process\n" in md
    assert "| memory_bandwidth |  | 1 |  |  |" in md
    assert md.splitlines()[2].endswith("| evidence | cores |")
    assert "| kv usage p90 100 % >= 90 % | 0 / 1 |" in md  # where each ran, read back from the processes
    assert "| the reference server has no --twin |  |" in md  # not started: no cores
    console = Console(record=True, width=200)
    print_lab(lab(), console)
    text = console.export_text()
    assert "client (server side: scheduling)" in text and "kv usage p90 100 % >= 90 %" in text
    assert "starved: the load generator starved by a CPU-bound process" in text
