"""The gate's result as JUnit XML (one test case per check, parsed back) and as Markdown."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from loadlab.gate.checks import BASELINE, ERROR, FAIL, INVALID, PASS, SKIPPED, SLO, VALIDITY, Check, GateResult
from loadlab.gate.junit import junit_xml
from loadlab.gate.markdown import gate_markdown
from loadlab.terminal import inert

RESULT = GateResult(
    "runs/<script>alert(1)</script>",
    [
        Check(VALIDITY, "run finished", PASS, "finished"),
        Check(VALIDITY, "not client-limited [concurrency=8]", INVALID, "client-limited", "CPU p90 0.9 cores"),
        Check(SLO, "ttft_p99=2s [concurrency=8]", PASS, "812 ms", "limit <= 2000 ms"),
        Check(SLO, 'itl_p99=5ms [a "quoted" | piped & <odd> label]', FAIL, "31 ms", "limit <= 5 ms"),
        Check(SLO, "verdict_not=client [concurrency=8]", ERROR, "", "not checkable: no analysis.json"),
        Check(BASELINE, "baseline tpot_p50 [concurrency=8]", SKIPPED, "not comparable"),
        Check(SLO, "e2e_p99=9s [m\x1b]0;pwned\x07\u202eevil]", PASS, "1 s", "limit <= 9000 ms"),
    ],
    notes=["workload: 'a' in A, 'b' in B"],
)


def test_junit_has_one_testcase_per_check_and_counts_that_add_up() -> None:
    root = ET.fromstring(junit_xml(RESULT))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [inert(c.name) for c in RESULT.checks]
    counts = (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped"))
    assert counts == ("7", "1", "2", "1")
    failure = cases[3].find("failure")
    assert failure is not None and "measured 31 ms; limit <= 5 ms" == failure.get("message")
    assert cases[1].find("error") is not None and cases[4].find("error") is not None
    assert cases[5].find("skipped") is not None
    assert cases[0].find("failure") is None and cases[0].get("classname") == "loadlab.gate.validity"
    assert "workload" in suite.find("system-out").text
    # XML 1.0 cannot hold ESC or BEL: control characters are written out, as in the terminal.
    assert cases[6].get("name") == "e2e_p99=9s [m\\x1b]0;pwned\\x07\\u202eevil]"


def test_markdown_shows_the_verdict_a_row_per_check_and_escapes_cells() -> None:
    text = gate_markdown(RESULT)
    assert text.startswith("## loadlab gate: INVALID (exit 2)")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(RESULT.checks)
    assert all(row.count(" | ") == 3 for row in rows[1:])  # a pipe in a name does not add a column
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "m\\x1b]0;pwned\\x07\\u202eevil" in text and not any(c in text for c in "\x1b\x07\u202e")
    assert "❌ fail" in text and "- workload: 'a' in A, 'b' in B" in text
