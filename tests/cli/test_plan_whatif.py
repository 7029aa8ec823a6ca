"""`loadlab plan --what-if SPEC,SPEC --users N`: a simulated sweep per GPU twin, each planned for N
users, answered in one table and one page; a bad spec is one line and exit 2, before any sweep.

At small scale: 8B on an H100 and on an A100, 1,024-token prompts so that prefill and batching
show, 3 simulated seconds per step, up to 8 users. The workload flags are `loadlab run`'s
(WorkloadFlags): what the simulation can send, the sweeps send; what it cannot is one line.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from loadlab.analyze.whatif import TOP_STEP
from loadlab.numbers import DASH
from loadlab.store.reader import load_run
from tests.support.browser import load_page
from tests.support.procs import loadlab
from tests.support.traces import write_burstgpt

SPECS = ("h100:llama-3-8b", "a100:llama-3-8b")
USERS = 30
SLO = "tps_user_p50=40,ttft_p99=150ms"
SMALL = ("--step-duration", "3", "--max", "8", "--input-len", "1024", "--output-len", "16", "--seed", "7")
COLUMNS = ("spec", "knee", "users/replica", "replicas", "GPUs", "user tok/s", "capacity set by", "at the knee")


def table_rows(stdout: str) -> dict[str, dict[str, str]]:
    """The what-if table's rows by spec, each cell by its column."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) == len(COLUMNS) and cells[0] in SPECS:
            rows[cells[0]] = dict(zip(COLUMNS, cells, strict=True))
    return rows


def number(cell: str) -> float:
    return float(cell.replace(",", "")) if cell not in (DASH, "none") else math.nan


@pytest.fixture(scope="module")
def whatif(tmp_path_factory) -> tuple[Path, str, Path]:
    base = tmp_path_factory.mktemp("whatif")
    out, page = base / "runs", base / "whatif.html"
    args = ("--what-if", ",".join(SPECS), "--users", str(USERS), "--slo", SLO, *SMALL)
    result = loadlab("plan", *args, "--out", str(out), "--report", str(page), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return out, result.stdout, page


def test_the_table_answers_every_spec_with_consistent_numbers(whatif) -> None:
    _, stdout, _ = whatif
    rows = table_rows(stdout)
    assert set(rows) == set(SPECS), stdout
    for row in rows.values():
        replicas, per_replica = number(row["replicas"]), number(row["users/replica"])
        assert replicas >= 1 and per_replica > 0
        assert replicas * per_replica >= USERS  # the replicas hold every user within the SLO
        assert (replicas - 1) * per_replica < USERS  # ... and one fewer would not
        assert number(row["GPUs"]) == replicas  # tp1: one GPU per replica
        assert number(row["user tok/s"]) >= 40  # the SLO's per-user speed, met where planned
        assert row["capacity set by"] in (*SLO.split(","), TOP_STEP)
    h100, a100 = rows["h100:llama-3-8b"], rows["a100:llama-3-8b"]
    # The faster GPU serves at least as many users per replica, so it needs no more replicas.
    assert number(h100["users/replica"]) >= number(a100["users/replica"])
    assert number(h100["replicas"]) <= number(a100["replicas"])
    assert number(h100["user tok/s"]) > number(a100["user tok/s"])


def test_each_spec_leaves_a_simulated_sweep_run_folder_that_the_table_reads(whatif) -> None:
    out, stdout, _ = whatif
    rows = table_rows(stdout)
    for spec in SPECS:
        folder = out / spec.replace(":", "_")
        run = load_run(folder)
        assert run.meta.simulated["twin"] == spec
        sweep = json.loads((folder / "sweep.json").read_text())
        assert [s["label"] for s in sweep["steps"]] == [s.label for s in run.meta.steps]
        assert sweep["stop"] in ("knee", "slo", "max")
        analysis = json.loads((folder / "analysis.json").read_text())
        knee = analysis["overall"]["knee_step"]
        at_knee = next((s for s in analysis["steps"] if s["index"] == knee), None)
        if at_knee is None:
            assert rows[spec]["knee"] == "none seen"
            assert rows[spec]["at the knee"] == analysis["overall"]["constraint"]
        else:
            assert number(rows[spec]["knee"]) == at_knee["target"]
            assert rows[spec]["at the knee"] == at_knee["constraint"]


def test_each_sweep_sends_the_workload_flags_lengths_and_seed(whatif) -> None:
    out, _, _ = whatif
    for spec in SPECS:
        run = load_run(out / spec.replace(":", "_"))
        req = run.requests
        assert len(req) > 0 and set(req["input_tokens"]) == {1024} and set(req["max_tokens"]) == {16}
        assert run.meta.config.workload.seed == 7 and run.meta.config.step_duration == 3.0


def test_plan_on_a_spec_run_folder_sizes_it_as_the_table_does(whatif) -> None:
    out, stdout, _ = whatif
    rows = table_rows(stdout)
    spec = "a100:llama-3-8b"
    result = loadlab("plan", str(out / spec.replace(":", "_")), "--users", str(USERS), "--slo", SLO, timeout=300)
    assert result.returncode == 0, result.stderr
    replicas = re.search(r"So ([\d,]+) replica", result.stdout)
    assert replicas is not None, result.stdout
    assert number(replicas.group(1)) == number(rows[spec]["replicas"])


CURVES_JS = """(() => { const d = document.getElementById('fig-whatif');
  return {charts: document.querySelectorAll('.js-plotly-plot').length,
    names: d.data.map(t => t.name), axes: d.data.map(t => t.yaxis),
    drawn: Array.from(d.querySelectorAll('g.trace')).filter(g => Array.from(g.querySelectorAll('path'))
           .some(p => (p.getAttribute('d') || '').length > 5)).length,
    text: document.body.innerText}; })()"""


def test_the_page_draws_the_specs_curves_side_by_side_in_chromium(whatif) -> None:
    _, _, page = whatif
    loaded = load_page(page.as_uri(), CURVES_JS)
    assert loaded.errors == [] and loaded.requests == []  # offline: everything is in the file
    value = loaded.value
    assert value["charts"] == 1
    lines = [(n, a) for n, a in zip(value["names"], value["axes"], strict=True) if not n.startswith("knee of")]
    # Each spec on each panel: output tok/s, per-user tok/s and the two SLO statistics.
    for spec in SPECS:
        assert sorted(a for n, a in lines if n == spec) == ["y", "y2", "y3", "y4"]
    assert value["drawn"] >= len(lines)
    for spec in SPECS:
        assert spec in value["text"]
    assert "Not in the numbers: the client's network and HTTP time" in value["text"]


@pytest.mark.parametrize(
    ("specs", "says"),
    [
        ("b200:llama-3-8b", "unknown GPU 'b200'"),
        ("h100:llama-9b", "unknown model 'llama-9b'"),
        ("h100", "not GPU:MODEL[:tpN]"),
        ("h100:llama-3-8b:tpx", "not GPU:MODEL[:tpN]"),
        ("h100:llama-3-8b:tp3", "cannot be split over 3 GPUs"),
        ("h100:llama-3-8b,,a100:llama-3-8b", "takes GPU:MODEL[:tpN],..."),
        ("h100:llama-3-8b,H100:llama-3-8b", "names h100:llama-3-8b twice"),
        ("h100:llama-3-8b,l40s:llama-3-70b", "do not fit"),
    ],
)
def test_a_bad_spec_is_one_line_and_exit_2_before_any_sweep(tmp_path: Path, specs: str, says: str) -> None:
    out = tmp_path / "runs"
    result = loadlab("plan", "--what-if", specs, "--users", "10", "--out", str(out), timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr
    assert not out.exists()


def test_a_what_if_sweep_takes_a_traces_lengths(tmp_path: Path) -> None:
    """Any workload flag the simulation can keep works with --what-if: here --trace, whose
    lengths a sweep takes (it sets the load itself)."""
    rows = [(i * 0.5, 200 + 10 * i, 4 + i % 3) for i in range(6)]
    trace = write_burstgpt(tmp_path / "BurstGPT_1.csv", rows)
    out = tmp_path / "runs"
    args = ("--what-if", "h100:llama-3-8b", "--users", "2", "--step-duration", "2", "--trace", str(trace))
    result = loadlab("plan", *args, "--out", str(out), "--report", str(tmp_path / "p.html"), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    req = load_run(out / "h100_llama-3-8b").requests
    assert len(req) > 0 and (req["error"] == "").all()
    assert set(zip(req["input_tokens"], req["max_tokens"], strict=True)) <= {(i, o) for _, i, o in rows}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--api", "embeddings"), "--api embeddings is not simulated"),
        (("--workload", "multiturn"), "--workload multiturn is not simulated"),
        (("--trace", "TRACE", "--trace-speed", "2"), "--trace-speed sets a trace's clock"),
        (("--workload", "sharegpt", "--dataset", "missing.json"), "dataset file not found"),
        (("--step-duration", "0"), "--step-duration must be a number of seconds > 0"),
        (("--max", "0"), "--max must be >= 1 user"),
    ],
)
def test_a_workload_the_simulation_cannot_send_is_one_line_before_any_sweep(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    trace = write_burstgpt(tmp_path / "BurstGPT_1.csv", [(0.0, 100, 10)])
    out = tmp_path / "runs"
    words = (str(trace) if a == "TRACE" else a for a in args)
    result = loadlab("plan", "--what-if", "h100:llama-3-8b", "--users", "4", *words, "--out", str(out), timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--users", "10"), "needs a run folder of a sweep, or --what-if"),
        (("RUN", "--what-if", "h100:llama-3-8b", "--users", "10"), "not both"),
        (("RUN", "--users", "10", "--max-num-seqs", "64"), "--max-num-seqs is for --what-if"),
        (("RUN", "--users", "10", "--output-len", "64", "--seed", "1"), "--output-len is for --what-if"),
        (("RUN", "--users", "10", "--step-duration", "5"), "--step-duration is for --what-if"),
        (("RUN", "--users", "10", "--step-duration", "20"), "--step-duration is for --what-if"),
        (("RUN", "--users", "10", "--out", "x"), "--out is for --what-if"),
    ],
)
def test_plan_takes_a_run_folder_or_what_if(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    result = loadlab("plan", *(str(tmp_path) if a == "RUN" else a for a in args), timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
