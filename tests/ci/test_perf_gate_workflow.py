"""The CI example really runs: the `run:` steps of .github/workflows/perf-gate.yml, read from the
file and run here in order against the real reference server, as GitHub's runner would (bash -e,
the job's env; this checkout's venv stands in for the Install step). Its gate passes on
examples/slo-pass.toml (exit 0) and fails on examples/slo-fail.toml (exit 1)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.support.procs import BIN, REPO, free_port

WORKFLOW = REPO / ".github" / "workflows" / "perf-gate.yml"


def run_steps() -> tuple[dict[str, str], dict[str, str]]:
    """The job's env and its `run:` steps by name."""
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["perf-gate"]
    return job["env"], {s["name"]: s["run"] for s in job["steps"] if "run" in s}


def bash(script: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """A step's script as GitHub runs it: bash --noprofile --norc -eo pipefail."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.serial  # the workflow's short steps need enough requests: 5 s at 1 user on a crowded host gave 4
def test_the_workflow_starts_the_server_loads_it_and_its_gate_passes_and_fails(tmp_path: Path) -> None:
    job_env, steps = run_steps()
    assert list(steps) == [
        "Install",
        "Start the reference server",
        "Short load test",
        "Gate",
        "Report",
        "Stop the server",
    ]
    env = {
        **os.environ,
        **job_env,
        "PORT": str(free_port()),
        "OUT": str(tmp_path / "out"),
        "RUNNER_TEMP": str(tmp_path),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }
    try:
        started = bash(steps["Start the reference server"], env, 150)
        assert started.returncode == 0, started.stderr + (tmp_path / "server.log").read_text()[-2000:]
        loaded = bash(steps["Short load test"], env, 150)
        assert loaded.returncode == 0, loaded.stderr[-2000:]

        passed = bash(steps["Gate"], env, 90)
        assert passed.returncode == 0, passed.stdout[-3000:]
        assert "gate: PASS (exit 0)" in passed.stdout
        suite = ET.parse(tmp_path / "out" / "gate.xml").getroot().find("testsuite")
        assert suite.get("failures") == "0" and suite.get("errors") == "0"
        assert (tmp_path / "summary.md").read_text().startswith("## loadlab gate: PASS")

        failed = bash(steps["Gate"], {**env, "SLO": "examples/slo-fail.toml"}, 90)
        assert failed.returncode == 1, failed.stdout[-3000:]
        assert "gate: FAIL (exit 1)" in failed.stdout and "ttft_p50=1ms" in failed.stdout
        assert ET.parse(tmp_path / "out" / "gate.xml").getroot().find("testsuite").get("failures") != "0"

        reported = bash(steps["Report"], env, 120)
        assert reported.returncode == 0 and (tmp_path / "out" / "report.html").is_file(), reported.stderr
    finally:
        stopped = bash(steps["Stop the server"], env, 30)
        if (tmp_path / "server.pid").exists():
            ensure_ended(int((tmp_path / "server.pid").read_text()))
    assert stopped.returncode == 0


def ensure_ended(pid: int) -> None:
    """SIGKILL the server this test started if the Stop step's SIGTERM has not ended it in 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
