"""`loadlab tune` end to end: bad input refused in one line before any server starts, the knob
table, and (serial) the verdict of an admission-capped reference server put to the test."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.procs import BIN, loadlab, sigint_default


def marking_server(marker: Path) -> str:
    """A serve command that leaves `marker` behind if it is ever started."""
    code = f"open({str(marker)!r}, 'w')"
    return f"{sys.executable} -c {shlex.quote(code)} {{port}}"


def test_the_knob_table_is_printed() -> None:
    result = loadlab("tune", "--knobs", timeout=60)
    assert result.returncode == 0, result.stderr
    table = " ".join(result.stdout.split())
    for words in ("scheduling │ vLLM │ --max-num-seqs │ x4", "kv_capacity │ vLLM │ --num-gpu-blocks-override │ x2"):
        assert words in table, result.stdout
    assert "--parallel" in table and "--max-num-batched-tokens │ /2" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--grid", "max-num-seqs=1,2,4", "--grid", "max-num-batched-tokens=1,2,4", "--max-configs", "8"],
            "the grid has 9 configurations, more than --max-configs 8",
        ),
        (["--grid", "max-num-seqs"], "bad --grid"),
        (["--step-duration", "0"], "--step-duration must be"),
        (["--verify", "runs/x", "--grid", "a=1"], "--verify turns the verdict's knob itself"),
        (["--claim", "scheduling"], "--claim names the class --verify RUN puts to the test"),
        (["--verify", "runs/x", "--claim", "slow"], "--claim 'slow' is not a class: one of client, "),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    marker = tmp_path / "started"
    result = loadlab("tune", "--serve", marking_server(marker), *args, "--out", str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_tune_needs_a_serve_command(tmp_path: Path) -> None:
    result = loadlab("tune", "--grid", "a=1", timeout=60)
    assert result.returncode == 2 and "tune needs --serve CMD" in result.stderr


def test_a_server_that_does_not_start_is_one_line_and_exit_1(tmp_path: Path) -> None:
    out = tmp_path / "out"
    serve = f"{sys.executable} -c {shlex.quote('import sys; sys.exit(3)')} {{port}}"
    result = loadlab("tune", "--serve", serve, "--grid", "a=1", "--out", str(out), "--no-gpu", timeout=120)
    assert result.returncode == 1, result.stderr
    assert "a=1: the server did not start (the server exited with code 3" in " ".join(result.stderr.split())
    summary = json.loads((out / "tune.json").read_text())
    assert summary["configurations"][0]["status"] == "failed"
    assert (out / "a=1" / "server.log").is_file() and (out / "tune.html").is_file()


def test_ctrl_c_while_a_server_starts_ends_it_by_its_pid(tmp_path: Path) -> None:
    pid_file, out = tmp_path / "server.pid", tmp_path / "out"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    serve = f"{sys.executable} -c {shlex.quote(code)} {{port}}"  # starts, never answers /health
    args = [str(BIN / "loadlab"), "tune", "--serve", serve, "--grid", "a=1,2", "--out", str(out), "--no-gpu"]
    with subprocess.Popen(args, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default) as tune:
        deadline = time.monotonic() + 60
        while not pid_file.is_file() or not pid_file.read_text():
            assert time.monotonic() < deadline and tune.poll() is None
            time.sleep(0.1)
        tune.send_signal(signal.SIGINT)
        _, err = tune.communicate(timeout=60)
    assert tune.returncode == 130, err
    server = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(server, 0)
    summary = json.loads((out / "tune.json").read_text())
    assert summary["interrupted"] and [c["status"] for c in summary["configurations"]] == ["interrupted"]


# The GPU twin (H100 timing of Llama-3-8B): its decode step barely grows with the batch, so
# throughput grows with the users up to what the server admits (a cap, or what its KV pool holds)
# and not beyond.
TWIN = f"{sys.executable} -m reference_server --preset tiny --device cpu --max-model-len 256 --twin h100:llama-3-8b"
STEPS = ("--max", "8", "--max-steps", "6", "--step-duration", "8", "--no-gpu")
STEPS += ("--slo", "client_limited=any")  # the busy test host may strain the client: this is about the server
CASES = {
    # --max-num-seqs 2: two sequences at once, the rest queue
    "scheduling": ("--max-num-seqs 2", ("--input-len", "32", "--output-len", "64"), "--max-num-seqs 2 -> 8"),
    # 16 blocks of 16 tokens hold two 120-token requests at once (8 blocks each)
    "kv_capacity": (
        "--num-kv-blocks 16",
        ("--api", "completions", "--input-len", "100", "--output-len", "20"),
        "--num-kv-blocks 16 -> 32",
    ),
}


@pytest.mark.serial  # the twin keeps its modelled pace only with the host's cores to spare
@pytest.mark.parametrize("constraint", list(CASES))
def test_verify_confirms_the_class_when_its_knob_is_turned(tmp_path: Path, constraint: str) -> None:
    flags, workload, turned = CASES[constraint]
    serve = f"{TWIN} {flags} --port {{port}}"
    base = loadlab("tune", "--serve", serve, *STEPS, *workload, "--out", str(tmp_path / "base"), timeout=600)
    assert base.returncode == 0, base.stderr[-3000:]
    measured = json.loads((tmp_path / "base" / "tune.json").read_text())["configurations"][0]
    # On a busy host the twin lags its modelled pace and a capped run may read as memory bandwidth,
    # whose knob on the reference server is the same cap (knobs.py): the verification then tests that.
    expected = constraint if constraint != "scheduling" else measured["figures"]["constraint"]
    assert expected in (constraint, "memory_bandwidth"), base.stdout[-3000:]

    out = tmp_path / "verify"
    run = tmp_path / "base" / "default" / "run"
    result = loadlab("tune", "--verify", str(run), "--serve", serve, *STEPS, *workload, "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    said = " ".join(result.stdout.split())  # (the console wraps long lines)
    assert f"verified: {expected} ({turned}): throughput saturates at" in said, result.stdout[-3000:]
    summary = json.loads((out / "tune.json").read_text())
    (verification,) = summary["verifications"]
    assert verification["outcome"] == "verified"
    assert verification["throughput"]["low"] > verification["throughput"]["noise"]  # beyond the noise
    folder = summary["configurations"][1]["folder"]  # after the run under test
    flag, after = turned.split()[0], turned.split()[-1]  # appended after the command's own: the last wins
    assert (Path(folder).parent / "server.log").read_text().splitlines()[0].endswith(f"{flag} {after}")
    # The run under test and the turned configuration compare step by step, by their folders.
    compared = loadlab("compare", str(tmp_path / "base" / "default"), str(Path(folder).parent), timeout=300)
    assert compared.returncode == 0, compared.stderr
    assert "concurrency=2" in compared.stdout


# A prefill-bound twin (1500-token prompts, 2-token answers: prefill far above the ridge, as the lab's
# compute-twin): each prompt's compute sets the pace, not how many sequences may run at once.
PREFILL_BOUND = (
    f"{sys.executable} -m reference_server --preset tiny --device cpu --twin h100:llama-3-8b --max-model-len 2048 "
    "--max-num-batched-tokens 8192 --max-num-seqs 4 --port {port}"
)
PREFILL_LOAD = ("--api", "completions", "--input-len", "1500", "--output-len", "2")


@pytest.mark.serial  # the twin keeps its modelled pace only with the host's cores to spare
def test_on_a_prefill_bound_run_raising_the_admission_cap_is_refuted(tmp_path: Path) -> None:
    base = loadlab(
        "tune", "--serve", PREFILL_BOUND, *STEPS, *PREFILL_LOAD, "--out", str(tmp_path / "base"), timeout=600
    )
    assert base.returncode == 0, base.stderr[-3000:]
    measured = json.loads((tmp_path / "base" / "tune.json").read_text())["configurations"][0]
    assert measured["figures"]["constraint"] == "compute", base.stdout[-3000:]

    out, run = tmp_path / "claim", tmp_path / "base" / "default" / "run"
    claimed = ("--verify", str(run), "--claim", "scheduling")
    result = loadlab("tune", *claimed, "--serve", PREFILL_BOUND, *STEPS, *PREFILL_LOAD, "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    said = " ".join(result.stdout.split())  # (the console wraps long lines)
    assert "refuted: scheduling (--max-num-seqs 4 -> 16): throughput saturates at" in said, result.stdout[-3000:]
    (verification,) = json.loads((out / "tune.json").read_text())["verifications"]  # the claim alone is tested
    assert verification["outcome"] == "refuted"
