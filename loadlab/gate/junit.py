"""A gate's checks as JUnit XML: one test case per check, for CI systems that show test results."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

from loadlab.gate.checks import ERROR, FAIL, INVALID, SKIPPED, GateResult
from loadlab.terminal import inert

# How each status appears in JUnit: a failed check is a <failure>, a run that cannot be gated or a
# check that cannot be evaluated is an <error>, nothing to compare is <skipped>. Text from the run
# is made `inert` first: XML 1.0 cannot hold ESC or BEL at all, and a bidi override misleads.
_ELEMENT = {FAIL: "failure", INVALID: "error", ERROR: "error", SKIPPED: "skipped"}


def junit_xml(result: GateResult) -> str:
    """The JUnit XML document (one <testsuite> in <testsuites>) of a gate's result."""
    counts = Counter(_ELEMENT.get(c.status, "") for c in result.checks)
    attrs = {
        "name": f"loadlab gate {inert(result.run)}",
        "tests": str(len(result.checks)),
        "failures": str(counts["failure"]),
        "errors": str(counts["error"]),
        "skipped": str(counts["skipped"]),
    }
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", attrs)
    for check in result.checks:
        case = ET.SubElement(suite, "testcase", {"classname": f"loadlab.gate.{check.kind}", "name": inert(check.name)})
        element = _ELEMENT.get(check.status)
        text = inert("; ".join(p for p in (f"measured {check.measured}" if check.measured else "", check.detail) if p))
        if element:
            ET.SubElement(case, element, {"message": text or check.status}).text = text
        elif text:
            ET.SubElement(case, "system-out").text = text
    lines = [f"warning: {w}" for w in result.warnings] + result.notes
    if lines:
        ET.SubElement(suite, "system-out").text = "\n".join(inert(line) for line in lines)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
