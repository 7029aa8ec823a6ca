"""`loadlab timeline DIR`: the table on stdout, one-line errors on bad input."""

from __future__ import annotations

from tests.support.procs import loadlab
from tests.support.runs import fill_run


def test_prints_one_row_per_second_with_the_columns_that_have_data(tmp_path):
    fill_run(tmp_path / "run", with_server=False)
    result = loadlab("timeline", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "sent" in line)
    for heading in ("t (s)", "sent", "done", "failed", "tok/s", "TTFT ms", "ITL ms", "in flight"):
        assert heading in header
    assert "KV" not in header and "GPU" not in header  # no server data, no column
    first = next(line for line in lines if line.strip("│ ").startswith("0 "))
    # t=0: 2 started, 0 done, 0 failed, 9 tok/s, TTFT p50 300 ms, ITL p50 200 ms, 1.7 in flight.
    assert first.replace("│", " ").split() == ["0", "2", "0", "0", "9", "300", "200", "1.7"]


def test_server_and_gpu_columns_appear_when_recorded(tmp_path):
    fill_run(tmp_path / "run")
    result = loadlab("timeline", str(tmp_path / "run"), "--interval", "0.5")
    assert result.returncode == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if "sent" in line)
    for heading in ("running", "waiting", "KV", "preempt", "GPU", "SM", "coll."):
        assert heading in header
    assert "DRAM" not in header
    assert "every 0.5 s" in result.stdout
    assert "0.50" in result.stdout  # fractional intervals show fractional times


def test_a_folder_that_is_not_a_run_is_a_one_line_error(tmp_path):
    result = loadlab("timeline", str(tmp_path / "nothing-here"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: not a run folder")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_bad_interval_is_a_one_line_error(tmp_path):
    fill_run(tmp_path / "run")
    result = loadlab("timeline", str(tmp_path / "run"), "--interval", "0")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --interval must be a finite number > 0, got 0.0"
    for interval, message in (("inf", "finite"), ("1e-9", "rows")):  # 1e-9: billions of rows, minutes
        result = loadlab("timeline", str(tmp_path / "run"), "--interval", interval, timeout=60)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
