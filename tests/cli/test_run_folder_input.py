"""Every command that reads a run folder reads it through the one reader, as a process: a run.json
whose numbers would mean nothing is one `error:` line and exit 2 (the gate's 2 means "not gated",
with its JUnit file saying why, never 1, "an SLO failed"); a flaw that spoils only itself is one
warning line, printed once, and the rest is read. Never a traceback."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.procs import loadlab
from tests.support.runs import as_killed, edit_run_json, write_drawn_run

COMMANDS = {
    "analyze": ["analyze"],
    "summary": ["summary"],
    "plan": ["plan", "--users", "10"],
    "gate": ["gate", "--slo", "ttft_p99=2s"],
    "report": ["report", "-o", "{tmp}/r.html"],
    "timeline": ["timeline"],
}


def command(name: str, folder: Path, tmp: Path) -> list[str]:
    first, *rest = COMMANDS[name]
    return [first, str(folder), *(a.format(tmp=tmp) for a in rest)]


def drawn(folder: Path) -> Path:
    write_drawn_run(folder, seed=1, targets=(1, 2), n=30)
    return folder


def one_error_line(stderr: str, says: str) -> None:
    assert "Traceback" not in stderr, stderr[-2000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], stderr


@pytest.mark.parametrize("name", [*COMMANDS, "compare"])
def test_a_target_beyond_a_float_is_one_line_and_exit_2_from_every_command(tmp_path: Path, name: str) -> None:
    run = edit_run_json(drawn(tmp_path / "run"), lambda m: m["steps"][0].update(target=10**400))
    args = ["compare", str(drawn(tmp_path / "base")), str(run)] if name == "compare" else command(name, run, tmp_path)
    result = loadlab(*args, timeout=120)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    one_error_line(result.stderr, "steps[0].target is out of range")


@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda m: m["steps"][0].update(target=10**400), "steps[0].target is out of range"),
        (lambda m: m["steps"][1].update(target=float("nan")), "steps[1].target is NaN"),
        (lambda m: m["steps"][0].update(start_time=float("inf")), "steps[0].start_time is infinite"),
        (lambda m: m.update(format="loadlab-run/99"), "newer loadlab"),
        (lambda m: m.pop("format"), "has no format"),
    ],
)
def test_the_gate_says_not_gated_in_its_junit_file_when_the_run_cannot_be_trusted(
    tmp_path: Path, edit, says: str
) -> None:
    run = edit_run_json(drawn(tmp_path / "run"), edit)
    junit = tmp_path / "gate.xml"
    result = loadlab("gate", str(run), "--slo", "ttft_p99=2s", "--junit", str(junit), timeout=120)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr[-2000:])
    one_error_line(result.stderr, says)
    assert "gate: INVALID (exit 2)" in result.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("errors") == "1" and suite.get("failures") == "0"
    assert says in (suite.find("testcase/error").get("message") or "")


def test_a_step_that_ends_before_it_starts_is_one_warning_and_the_rest_is_read(tmp_path: Path) -> None:
    run = drawn(tmp_path / "run")
    start = json.loads((run / "run.json").read_text())["steps"][1]["start_time"]
    edit_run_json(run, lambda m: m["steps"][1].update(end_time=start - 1))
    result = loadlab("summary", str(run), "--json", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.count("warning: step concurrency=2 ends before it starts") == 1, result.stderr
    assert json.loads(result.stdout)["steps"][1]["sent"] == 30


@pytest.mark.parametrize("name", [*COMMANDS, "compare", "gate-baseline"])
def test_every_command_that_reads_the_folder_prints_its_warnings(tmp_path: Path, name: str) -> None:
    run = drawn(tmp_path / "run")
    start = json.loads((run / "run.json").read_text())["steps"][1]["start_time"]
    edit_run_json(run, lambda m: m["steps"][1].update(end_time=start - 1))
    base = drawn(tmp_path / "base")
    args = {
        "compare": ["compare", str(base), str(run)],
        "gate-baseline": ["gate", str(base), "--baseline", str(run), "--junit", str(tmp_path / "gate.xml")],
    }.get(name) or command(name, run, tmp_path)
    result = loadlab(*args, timeout=120)
    assert "Traceback" not in result.stderr and result.returncode in (0, 1), result.stderr[-2000:]
    said = [line for line in result.stderr.splitlines() if "ends before it starts" in line]
    assert len(said) == 1 and said[0].startswith("warning: "), result.stderr
    if name == "compare":  # of two folders: which one
        assert said[0].startswith(f"warning: {run}: step concurrency=2 ends before it starts")
    if name == "gate-baseline":  # the JUnit file says it too
        out = ET.parse(tmp_path / "gate.xml").getroot().find("testsuite/system-out")
        assert out is not None and f"warning: baseline {run}: step concurrency=2 ends before" in out.text


@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda m: m["steps"][0].update(target=-2.0), "steps[0].target is -2, not a load"),
        (lambda m: m.update(steps=None), "steps is null, not an array"),
    ],
)
@pytest.mark.parametrize("name", ["summary", "gate", "compare", "plan"])
def test_a_run_json_field_out_of_range_or_null_is_refused_by_every_command(
    tmp_path: Path, edit, says: str, name: str
) -> None:
    run = edit_run_json(drawn(tmp_path / "run"), edit)
    args = ["compare", str(drawn(tmp_path / "base")), str(run)] if name == "compare" else command(name, run, tmp_path)
    result = loadlab(*args, timeout=120)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    one_error_line(result.stderr, says)


def test_a_cut_off_runs_warning_is_printed_once(tmp_path: Path) -> None:
    run = as_killed(edit_run_json(drawn(tmp_path / "run"), lambda m: m.update(status="running")))
    result = loadlab("summary", str(run), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.count("the run was cut off") == 1, result.stderr
