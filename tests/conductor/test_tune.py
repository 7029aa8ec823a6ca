"""`loadlab tune`'s loop without load: real server processes (a few lines of Python answering
/health), each ended by its PID whatever happens, and a sweep that writes a run folder by hand."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from loadlab.conductor.grid import Configuration
from loadlab.conductor.tune import TUNE_JSON, run_configuration, run_tune, verify_run
from loadlab.errors import UserError
from tests.support.analysis import write_analysis
from tests.support.runs import write_drawn_run

# A server that answers GET /health and ignores the flags appended to its command.
HEALTHY = (
    "import sys, http.server as h\n"
    "class H(h.BaseHTTPRequestHandler):\n"
    "    def do_GET(self): self.send_response(200); self.end_headers()\n"
    "h.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
)
SERVE = f"{sys.executable} -c {shlex.quote(HEALTHY)} {{port}}"
EXITS = "import sys; print('no GPU here'); sys.exit(3)"
FAILING = f"{sys.executable} -c {shlex.quote(EXITS)} {{port}}"
LABELS = ["concurrency=1", "concurrency=2"]


def gone(pid: int) -> bool:
    """Whether no process has this PID any more (ended and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class Sweeps:
    """The sweep the loop runs: writes a run folder (drawn requests, a KV-bound analysis) and
    records the server PIDs it was given."""

    def __init__(self, interrupt: bool = False) -> None:
        self.pids: list[int] = []
        self.interrupt = interrupt

    def __call__(self, url: str, run: Path, pid: int) -> Any:
        self.pids.append(pid)
        assert not gone(pid)  # the server runs while its sweep does
        if self.interrupt:
            raise KeyboardInterrupt
        write_run(run)
        return SimpleNamespace(run=SimpleNamespace(status="finished"))


def write_run(run: Path) -> None:
    write_drawn_run(run, seed=1, targets=(1, 2))
    write_analysis(run, LABELS)
    (run / "sweep.json").write_text(json.dumps({"stop": "knee"}))


def test_each_configuration_gets_its_server_and_its_folder(tmp_path: Path) -> None:
    sweeps = Sweeps()
    configs = [Configuration({"max-num-seqs": "2"}), Configuration({"max-num-seqs": "8"})]
    outcome = run_tune(SERVE, configs, tmp_path, sweeps)
    assert [r.status for r in outcome.results] == ["measured", "measured"]
    assert len(set(sweeps.pids)) == 2 and all(gone(pid) for pid in sweeps.pids)
    log = (tmp_path / "max-num-seqs=8" / "server.log").read_text()
    assert log.startswith("$ ") and "--max-num-seqs 8" in log  # appended: the command has no {max-num-seqs}
    figures = outcome.results[0].figures
    assert figures and figures.knee == "concurrency=2" and figures.constraint == "kv_capacity"
    assert [p.label for p in figures.points] == LABELS
    summary = json.loads((tmp_path / TUNE_JSON).read_text())
    assert [c["name"] for c in summary["configurations"]] == ["max-num-seqs=2", "max-num-seqs=8"]
    assert summary["configurations"][1]["figures"]["peak_tps"] > 0


def test_a_server_that_does_not_start_leaves_its_log_and_one_line(tmp_path: Path, capsys: Any) -> None:
    result = run_configuration(FAILING, Configuration({"max-num-seqs": "2"}), tmp_path, Sweeps())
    assert result.status == "failed" and "exited with code 3" in result.why
    assert "no GPU here" in (tmp_path / "max-num-seqs=2" / "server.log").read_text()
    assert "server.log" in capsys.readouterr().err


def test_ctrl_c_ends_the_server_and_the_tune(tmp_path: Path) -> None:
    sweeps = Sweeps(interrupt=True)
    configs = [Configuration({"a": "1"}), Configuration({"a": "2"})]
    outcome = run_tune(SERVE, configs, tmp_path, sweeps)
    assert outcome.interrupted and [r.status for r in outcome.results] == ["interrupted"]
    assert len(sweeps.pids) == 1 and gone(sweeps.pids[0])
    assert json.loads((tmp_path / TUNE_JSON).read_text())["interrupted"]


def test_resume_skips_what_was_measured_and_keeps_what_was_cut_off(tmp_path: Path) -> None:
    write_run(tmp_path / "a=1" / "run")  # measured before
    (tmp_path / "a=2" / "run").mkdir(parents=True)  # cut off before its sweep ended
    write_run(tmp_path / "a=3" / "run")
    (tmp_path / "a=3" / "run" / "sweep.json").write_text(json.dumps({"stop": "interrupted"}))
    sweeps = Sweeps()
    configs = [Configuration({"a": "1"}), Configuration({"a": "2"}), Configuration({"a": "3"})]
    outcome = run_tune(SERVE, configs, tmp_path, sweeps, resume=True)
    assert [r.status for r in outcome.results] == ["resumed", "measured", "measured"]
    assert len(sweeps.pids) == 2
    assert (tmp_path / "a=2.incomplete-1" / "run").is_dir()
    assert (tmp_path / "a=3.incomplete-1" / "run" / "sweep.json").is_file()  # what was measured stays


def test_verify_turns_the_verdicts_knob_then_the_runner_ups_when_refuted(tmp_path: Path) -> None:
    base = tmp_path / "base"
    write_run(base)  # kv_capacity at concurrency=2, runner-up compute
    sweeps = Sweeps()  # the same run again: nothing moved
    serve = SERVE + " loadlab serve --num-kv-blocks 64"  # words it ignores: the reference server's command
    outcome = verify_run(base, serve, tmp_path / "out", sweeps)
    tested = [(v.constraint, v.flag, v.before_value, v.after_value, v.outcome) for v in outcome.verifications]
    assert tested == [
        ("kv_capacity", "--num-kv-blocks", 64, 128, "refuted"),
        ("compute", "--max-num-batched-tokens", 2048, 1024, "refuted"),  # the reference server's default, halved
    ]
    assert len(sweeps.pids) == 2 and all(gone(pid) for pid in sweeps.pids)
    names = [(r.name, r.status) for r in outcome.results]
    assert names == [
        ("the verdict's run", "base"),
        ("num-kv-blocks=128", "measured"),
        ("max-num-batched-tokens=1024", "measured"),
    ]


def test_a_claim_is_put_to_the_test_alone_in_place_of_the_verdict(tmp_path: Path) -> None:
    base = tmp_path / "base"
    write_run(base)  # kv_capacity at concurrency=2: is it the admission cap instead?
    sweeps = Sweeps()  # nothing moved: the claim is refuted, and neither the verdict nor its runner-up is tried
    serve = SERVE + " loadlab serve --max-num-seqs 4"
    outcome = verify_run(base, serve, tmp_path / "out", sweeps, claim="scheduling")
    tested = [(v.constraint, v.flag, v.before_value, v.after_value, v.outcome) for v in outcome.verifications]
    assert tested == [("scheduling", "--max-num-seqs", 4, 16, "refuted")]
    assert len(sweeps.pids) == 1 and all(gone(pid) for pid in sweeps.pids)
    with pytest.raises(UserError, match="the claim is client: "):
        verify_run(base, serve, tmp_path / "out2", sweeps, claim="client")
    assert len(sweeps.pids) == 1  # refused before anything started


def test_verify_refuses_before_anything_starts_without_a_value_to_turn(tmp_path: Path) -> None:
    base = tmp_path / "base"
    write_run(base)
    sweeps = Sweeps()
    with pytest.raises(UserError, match="--num-kv-blocks has no default"):
        verify_run(base, "loadlab serve --preset tiny --port {port}", tmp_path / "out", sweeps)
    assert sweeps.pids == []
