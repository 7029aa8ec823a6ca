"""`loadlab lab --engine vllm --short`, for real: a real vLLM (the CPU build) provoked with its own
flags, one server per set of flags (the default-flag scenarios share one), the analyzer's verdict
on each scenario's last step. It takes minutes (vLLM starts in one to two).

Every scenario must come out as its class; the lab prints the same table and confusion matrix
as on the reference server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadlab.lab.runner import MATCH
from loadlab.lab.scenarios import VLLM_SCENARIOS
from tests.support.procs import loadlab
from tests.support.vllm import needs_vllm, vllm_python

pytestmark = [needs_vllm, pytest.mark.serial]  # vLLM on one core, the load generator on the other

# Server starts (three) and the scenarios' steps: about 8-12 minutes on a busy 2-core host.
LAB_TIMEOUT = 1800


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One lab over every vLLM scenario: its folder and what it printed."""
    folder = tmp_path_factory.mktemp("lab") / "vllm"
    done = loadlab(
        "lab",
        "--engine",
        "vllm",
        "--vllm-python",
        str(vllm_python()),
        "--short",
        "--out",
        str(folder),
        timeout=LAB_TIMEOUT,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a verdict differed, judged below
    return folder, done.stdout


@pytest.mark.parametrize("scenario", VLLM_SCENARIOS, ids=lambda s: s.name)
def test_each_vllm_scenario_provokes_its_class(lab, scenario):
    folder, _ = lab
    name = scenario.name
    result = next(r for r in json.loads((folder / "lab.json").read_text())["results"] if r["name"] == name)
    summary = (
        f"{result['status']}: {result['constraint']} (server side {result['server_side'] or '-'}), "
        f"{result['saturation']}; {result['reason'] or result['headline']}; evidence {result['evidence']}"
    )
    assert result["status"] == MATCH, summary
    assert (folder / name / "run" / "analysis.json").exists()


def test_vllm_and_the_load_generator_ran_on_cores_of_their_own(lab):
    folder, _ = lab
    results = {r["name"]: r for r in json.loads((folder / "lab.json").read_text())["results"]}
    for name, r in results.items():
        # One core each, read back from the processes (vLLM on the freest, docs/lab.md).
        assert r["server_cores"] != r["client_cores"] and {r["server_cores"], r["client_cores"]} <= {"0", "1"}, name
        assert bool(r["client_rival"]) == (name == "client"), name  # only the client scenario starves it
    # vLLM's compute peak is its one core's, calibrated where the run sampled vLLM's process.
    step = json.loads((folder / "compute" / "run" / "analysis.json").read_text())["steps"][-1]
    assert "on the server's 1 core," in step["derived"]["intensity_over_ridge"]["note"]
    log = (folder / "kv_capacity" / "server.log").read_text(errors="replace")
    core = results["kv_capacity"]["server_cores"]
    assert f"VLLM_CPU_OMP_THREADS_BIND='{core}'" in log and f"core ids=[{core}]" in log  # vLLM's own binding info
    assert f"| {core} / {results['kv_capacity']['client_cores']} |" in (folder / "lab.md").read_text()


def test_scenarios_whose_servers_start_alike_share_one(lab):
    folder, _ = lab
    first: dict[tuple, str] = {}
    for s in VLLM_SCENARIOS:
        log = folder / s.name / "server.log"
        assert "vllm" in log.read_text(errors="replace").lower()  # vLLM's own log
        holder = first.setdefault(s.server_key, s.name)
        assert log.resolve() == (folder / holder / "server.log").resolve()
    assert len(first) < len(VLLM_SCENARIOS)  # at least one server was shared


def test_the_vllm_lab_prints_the_table_and_the_confusion_matrix(lab):
    folder, printed = lab
    data = json.loads((folder / "lab.json").read_text())
    assert data["engine"] == "vllm" and data["device"] == "cpu"
    assert [r["name"] for r in data["results"]] == [s.name for s in VLLM_SCENARIOS]
    assert "loadlab lab:" in printed and "vllm on cpu" in printed
    assert "confusion: expected (rows) x verdict (columns)" in printed
    assert (folder / "lab.md").read_text().startswith("`loadlab lab --engine vllm")


def test_the_starved_client_is_told_from_a_busy_one_and_told_where_to_run(lab):
    folder, _ = lab
    result = next(r for r in json.loads((folder / "lab.json").read_text())["results"] if r["name"] == "client")
    assert f"a CPU-bound process at nice 0 on core {result['client_cores']}" in result["client_rival"]  # how
    assert "client: the load generator starved by a CPU-bound process" in (folder / "lab.md").read_text()
    check = json.loads((folder / "client" / "run" / "summary.json").read_text())["steps"][-1]["client"]
    assert check["limited"] and check["cause"] == "starved", check  # the host's doing, not its own work
    advice = " ".join(check["advice"])
    assert "more processes will not help" in advice and "another host" in advice and "taskset -c" in advice
