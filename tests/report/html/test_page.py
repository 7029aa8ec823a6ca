"""The page: the verdict from analysis.json, plotly.js exactly once, run text escaped in tables
and in chart text."""

from __future__ import annotations

import json
import re
from html import escape

from plotly.offline import get_plotlyjs

from loadlab.analyze.answer import build_answer
from loadlab.report.answer import answer_lines, slo_note
from loadlab.report.html.data import build_report_data
from loadlab.report.html.page import render_page, run_sections
from loadlab.store.reader import load_run
from loadlab.store.schema import StepInfo
from loadlab.terminal import inert
from tests.support.analysis import write_analysis
from tests.support.records import T, req
from tests.support.runs import fill_run, run_of, write_drawn_run, write_run

EVIL = '<script>alert(1)</script>"onerror=x'


def page_of(folder) -> str:
    data = build_report_data(load_run(folder))
    return render_page("r", run_sections(data))


def test_the_verdict_its_evidence_and_advice_come_from_analysis_json(tmp_path):
    fill_run(tmp_path / "run")
    write_analysis(tmp_path / "run", ["x"])
    html = page_of(tmp_path / "run")
    assert "KV capacity binds at the knee" in html and "No analysis yet" not in html
    for text in (
        "KV usage p90 97 % &gt;= 90 %",
        "vLLM: raise --gpu-memory-utilization",
        "add KV blocks",
        "gpu: no GPU collector",
        "a note",
        "<b>constraint</b> kv_capacity",
        "<b>saturation</b> past_knee",
    ):
        assert text in html
    # The per-step table gains the step's saturation and constraint.
    steps = html[html.index('id="steps"') : html.index('id="load-curve"')]
    assert "<th>step</th><th>saturation</th><th>constraint</th>" in steps
    assert (
        '<td>x</td><td><span class="word">under_loaded</span></td><td><span class="word">memory_bandwidth</span></td>'
    ) in steps


def test_without_analysis_json_the_verdict_says_how_to_get_one(tmp_path):
    fill_run(tmp_path / "run")
    html = page_of(tmp_path / "run")
    assert f"No analysis yet: run <code>loadlab analyze {tmp_path / 'run'}</code>" in html


def test_plotly_js_is_inlined_once_for_all_charts(tmp_path):
    fill_run(tmp_path / "run")
    html = page_of(tmp_path / "run")
    assert html.count(get_plotlyjs()[:300]) == 1
    assert html.count("Plotly.newPlot(") == 4
    # Nothing outside plotly.js loads anything: no src, no href but the table of contents', no CSS url().
    rest = html.replace(get_plotlyjs(), "")
    assert not re.search(r"""\s(src|href)=(?!["']?#)|url\(""", rest)


def test_run_text_is_escaped_in_tables_and_chart_text():
    steps = [StepInfo(0, EVIL, "closed", 1, T, T + 10)]
    run = run_of(
        [req(0, T, [T + 0.5, T + 1]), req(1, T + 1, [], T + 2, error="http_5xx", error_detail=EVIL)],
        steps,
        config={"model": EVIL, "url": "http://x"},
    )
    html = render_page(EVIL, run_sections(build_report_data(run)))
    assert EVIL not in html and "<script>alert" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;&quot;onerror=x") >= 4  # title, model, step, error
    # Chart text reaches plotly as entities (its JSON escapes "<" as \u003c on top).
    figures = re.findall(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*(\[.*?\]),\s*\{", html, re.S)
    names = [t.get("name", "") for f in figures for t in json.loads(f)]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\"onerror=x" in names and not any("<" in n for n in names)


def test_control_characters_from_the_run_and_the_server_are_written_out_as_in_the_terminal():
    # ESC retitles a terminal, BEL rings, U+202E turns the rest of the line around: in a page too.
    hostile = "m\x1b]0;pwned\x07\u202eevil"
    steps = [StepInfo(0, hostile, "closed", 1, T, T + 10)]
    run = run_of(
        [req(0, T, [T + 0.5, T + 1]), req(1, T + 1, [], T + 2, error="http_5xx", error_detail=f"boom {hostile}")],
        steps,
        config={"model": hostile, "url": "http://x"},
    )
    html = render_page(hostile, run_sections(build_report_data(run)))
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in html
    shown = inert(hostile)  # one function for the terminal and the page
    assert shown == "m\\x1b]0;pwned\\x07\\u202eevil"
    assert f"<td>{shown}</td>" in html  # the model's cell (and the step's)
    assert f"boom {shown}" in html  # the error example's cell
    assert html.count(shown) >= 5  # title, model, steps, step row, error example, chart text


def test_turns_and_media_get_their_tables_when_the_run_has_them(tmp_path):
    def sessions(t0: float) -> tuple[list, list]:
        records = [
            req(1, t0 + 0.1, [t0 + 0.3], conversation="s", turn=0, prompt_tokens=100, cached_tokens=0),
            req(2, t0 + 1.0, [t0 + 1.15], conversation="s", turn=1, prompt_tokens=200, cached_tokens=150),
            req(3, t0 + 1.2, [t0 + 1.9], images=2, image_pixels=2 * 512 * 512, prompt_tokens=530),
        ]
        return records, []

    write_run(tmp_path / "run", sessions)
    html = page_of(tmp_path / "run")
    breakdown = html[html.index('id="breakdown"') : html.index('id="timeline"')]
    assert "<td>1</td><td>1</td><td>0</td><td>200</td><td>150</td><td>150</td><td>75 %</td>" in breakdown
    assert "<td>2</td><td>0.524</td><td>0</td><td>1</td><td>0</td><td>530</td><td>700</td><td>700</td>" in breakdown
    fill_run(tmp_path / "plain")
    assert 'id="breakdown"' not in page_of(tmp_path / "plain")


def test_the_answer_in_plain_words_tops_the_page(tmp_path):
    write_drawn_run(tmp_path / "run", seed=1, targets=(1, 2, 4), n=40)
    html = page_of(tmp_path / "run")
    answer = build_answer(load_run(tmp_path / "run"), None)
    assert answer is not None
    sections = re.findall(r'<section id="([^"]+)"', html)
    assert sections[0] == "answer" and sections[1] == "run"
    top = html[html.index('<section id="answer"') : html.index('<section id="run"')]
    for label, text in answer_lines(answer):
        assert f"<td><b>{label}</b></td><td>{escape(text)}</td>" in top
    assert escape(slo_note(answer)) in top
