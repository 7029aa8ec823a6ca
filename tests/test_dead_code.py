"""No dead code in loadlab: every public function, class and method is used somewhere in the
toolkit (tests do not count: a function only its test calls is dead), and no package is empty.

Functions that Locust, typer or an event calls are decorated or registered by name, so they
count as used; the check reads source text, like vulture, and errs towards "used".
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USERS = ("loadlab", "locustfiles")  # where a use counts
CALLED_BY_NAME = {
    "wait_time",
    "on_start",
    "on_stop",  # Locust's User hooks
    "filter",  # logging.Filter's hook
    "process_renderables",  # rich's RenderHook
}


def sources() -> dict[Path, str]:
    return {p: p.read_text() for root in USERS for p in sorted((REPO / root).rglob("*.py"))}


def public_definitions(tree: ast.Module) -> list[str]:
    """Module-level functions, classes and constants, and the methods of classes; not private,
    not dunder, not decorated (a decorator registers them with a framework)."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.decorator_list:
            names.append(node.name)
        if isinstance(node, ast.ClassDef):
            names += [
                f.name
                for f in node.body
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                and not f.decorator_list
                and not f.name.startswith("__")
            ]
    return [n for n in names if not n.startswith("_") and n not in CALLED_BY_NAME]


def unused(texts: dict[Path, str]) -> list[str]:
    """'path: name' for each public definition whose name appears nowhere but its definition."""
    everything = "\n".join(texts.values())
    found = []
    for path, text in texts.items():
        for name in public_definitions(ast.parse(text)):
            if len(re.findall(rf"\b{re.escape(name)}\b", everything)) < 2:
                found.append(f"{path.relative_to(REPO)}: {name}")
    return found


def test_every_public_definition_is_used():
    assert unused(sources()) == []


def test_no_package_is_empty():
    empty = [
        str(init.parent.relative_to(REPO))
        for init in (REPO / "loadlab").rglob("__init__.py")
        if not init.read_text().strip()
        and [p.name for p in init.parent.iterdir() if p.suffix == ".py"] == ["__init__.py"]
    ]
    assert empty == []


def test_the_check_finds_an_unused_function():
    text = "def used() -> int:\n    return 1\n\n\ndef dead() -> int:\n    return used()\n"
    assert unused({REPO / "loadlab" / "m.py": text}) == ["loadlab/m.py: dead"]
