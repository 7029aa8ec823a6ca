"""README is the front page: its two commands are the real ones, every link in it leads somewhere,
and every figure it quotes stands, word for word, in the results file it links, where the
conditions and the history live."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)


def _squeezed(text: str) -> str:
    """Whitespace runs as one space: a figure may wrap across lines in a results file."""
    return re.sub(r"\s+", " ", text)


def _section(text: str, heading: str) -> str:
    """The body under a `## heading`, up to the next heading of that level."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README has no '## {heading}' section"
    return match.group(1)


def performance_rows(text: str) -> list[tuple[str, str, str]]:
    """(what, figure, linked file) of each row of README's performance table."""
    rows = []
    for line in _section(text, "Performance").splitlines():
        if not line.startswith("|") or line.startswith(("| what ", "|---")):
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        assert len(cells) == 4, f"a row is what | figure | command | results: {line}"
        links = LINK.findall(cells[3])
        assert len(links) == 1, f"a row links one results file: {line}"
        rows.append((cells[0], cells[1], links[0]))
    return rows


def figure_misses(text: str) -> list[str]:
    """The performance rows whose figure is not, verbatim, in the bench/results file they link."""
    misses = []
    for what, figure, link in performance_rows(text):
        source = ROOT / link
        if not link.startswith("bench/results/") or not source.is_file():
            misses.append(f"{what}: links {link}, not a file under bench/results/")
        elif _squeezed(figure) not in _squeezed(source.read_text()):
            misses.append(f"{what}: '{figure}' is not in {link}")
    return misses


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def broken_links(text: str) -> list[str]:
    """Relative links of README that name no file in the repository, or no heading in it."""
    broken = []
    for link in LINK.findall(FENCE.sub("", text)):
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.is_file():
            broken.append(link)
        elif anchor and anchor not in _anchors(target):
            broken.append(link)
    return broken


def test_every_figure_in_the_performance_table_is_in_the_results_it_links():
    text = README.read_text()
    rows = performance_rows(text)
    assert len(rows) >= 10
    assert figure_misses(text) == []
    for what, figure, _ in rows:
        # One figure a row: the history and the conditions belong to the results file.
        assert re.search(r"\d", figure) and len(figure) <= 40, f"{what}: '{figure}'"


def test_a_figure_that_drifts_from_its_results_fails():
    text = README.read_text()
    what, figure, link = performance_rows(text)[0]
    last = re.findall(r"\d", figure)[-1]
    at = figure.rindex(last)
    drifted = figure[:at] + str((int(last) + 1) % 10) + figure[at + 1 :]
    misses = figure_misses(text.replace(f"| {figure} |", f"| {drifted} |", 1))
    assert misses == [f"{what}: '{drifted}' is not in {link}"]
    unlinked = text.replace(f"({link})", "(bench/results/nowhere.md)", 1)
    assert f"{what}: links bench/results/nowhere.md, not a file under bench/results/" in figure_misses(unlinked)


def test_the_answer_shown_is_the_one_measured_in_the_results_it_links():
    text = README.read_text()
    seed = _section(text, '"1000 tokens/s: do 1000 users get 1 token/s each?"')
    answer = next(block for block in FENCE.findall(seed) if block.startswith("the answer ("))
    before = seed[: seed.index(answer)]
    results = [link for link in LINK.findall(before) if link.startswith("bench/results/")]
    assert results, "the answer names the results file it was measured in"
    assert answer in (ROOT / results[-1]).read_text()


def test_every_relative_link_leads_to_a_file_and_heading_in_the_repository():
    text = README.read_text()
    assert len(LINK.findall(text)) >= 20
    assert broken_links(text) == []
    assert broken_links("[x](docs/nowhere.md) [y](docs/sweep.md#no-such-heading) [z](https://e.x)") == [
        "docs/nowhere.md",
        "docs/sweep.md#no-such-heading",
    ]


def test_the_two_commands_are_make_demo_and_make_test_and_ci_runs_make_test():
    blocks = FENCE.findall(_section(README.read_text(), "Two commands"))
    assert blocks == ["make demo\nmake test\n"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in ci if line and not line.startswith("#")]
    assert commands[-1] == "make test"
    assert all(not line.startswith("make") for line in commands[:-1])
