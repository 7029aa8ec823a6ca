"""The house stands the right way up, and the toolkit stays light.

Layers, read from every module's imports (lazy ones inside functions too): the helpers (the
`loadlab` package itself, clock, errors, config) at the bottom; then store/ (the run folder and
its schema), workload/ and metrics/ (the definitions of docs/metrics.md); then collect/ and
client/; then analyze/, report/ and gate/; on top the run conductor (conductor/, which drives the users,
collectors, run writer and live display, and the locustfile), cli/ and the demo. analyze/ reads
only the run folder: nothing from client/, and from collect/ only the canonical signal names
(collect/signals.py: what the samples' `signal` column holds). reference_server/ stands alone:
it imports nothing of loadlab, and loadlab nothing of it (`loadlab serve` and the demo start it
as a process, `python -m reference_server`).

No module of `loadlab` imports torch (only `reference_server` does), and the CLI starts without
ssl, gevent or Locust.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("loadlab", "locustfiles", "reference_server")

# Which part a module belongs to: the longest matching prefix wins.
PARTS = {
    "loadlab": "helpers",
    "loadlab.clock": "helpers",
    "loadlab.errors": "helpers",
    "loadlab.config": "helpers",
    "loadlab.urls": "helpers",
    "loadlab.priority": "helpers",
    "loadlab.offload": "helpers",
    "loadlab.terminal": "helpers",
    "loadlab.numbers": "helpers",
    "loadlab.convert": "helpers",
    "loadlab.store": "store",
    "loadlab.workload": "workload",
    "loadlab.metrics": "metrics",
    "loadlab.collect": "collect",
    "loadlab.collect.signals": "signals",
    "loadlab.client": "client",
    "loadlab.analyze": "analyze",
    "loadlab.report": "report",
    "loadlab.gate": "gate",
    "loadlab.conductor": "conductor",
    "locustfiles": "conductor",  # the run conductor, apart from the users
    "loadlab.lab": "lab",  # starts servers and runs load: beside the conductor
    "loadlab.cli": "cli",
    "loadlab.demo": "cli",
    "loadlab.mock": "mock",  # a stand-alone test server
    "reference_server": "reference_server",
}

# What each part may import besides itself.
BELOW_CLIENT = {"helpers", "store", "workload", "metrics", "collect", "signals"}
ALLOWED: dict[str, set[str]] = {
    "helpers": set(),
    "store": {"helpers"},
    "workload": {"helpers", "metrics"},  # a scenario's [slo] table: metrics/slo.py
    "metrics": {"helpers"},
    "collect": {"helpers", "store", "signals"},
    "signals": {"helpers", "store", "collect"},  # the names of the GPU collector's signals
    "client": BELOW_CLIENT,
    "analyze": {"helpers", "store", "metrics", "signals"},
    "report": {"helpers", "store", "metrics", "analyze"},
    "gate": {"helpers", "store", "metrics", "analyze"},
    # lab/processes.py: `loadlab tune` starts and ends servers as the lab does
    "conductor": BELOW_CLIENT | {"client", "analyze", "report", "gate", "lab"},
    "lab": BELOW_CLIENT | {"analyze", "report"},
    "cli": BELOW_CLIENT | {"client", "analyze", "report", "gate", "conductor", "mock", "lab"},
    "mock": {"helpers"},
    "reference_server": set(),
}


def part_of(module: str) -> str | None:
    """The part `module` belongs to; None outside this repository (numpy), "unknown" for a module
    of ours that PARTS does not place (the package `loadlab` itself is only its `__init__`)."""
    for prefix in sorted(PARTS, key=len, reverse=True):
        if module == prefix or (module.startswith(prefix + ".") and prefix != "loadlab"):
            return PARTS[prefix]
    return "unknown" if module.split(".")[0] in PACKAGES else None


def modules() -> dict[str, Path]:
    """Every module of the repository's packages, by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules `module` imports, anywhere in its code; `from pkg import sub` counts as pkg.sub."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . / from ..x
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            subs = {f"{base}.{alias.name}" for alias in node.names} & known
            found.update(subs or {base})
    return found


def violations(imports: dict[str, set[str]]) -> list[str]:
    """'importer -> imported (part -> part)' for every import the layers forbid."""
    bad = []
    for module, targets in sorted(imports.items()):
        part = part_of(module)
        assert part != "unknown", f"{module}: give it a part in PARTS (tests/test_layering.py)"
        for target in sorted(targets):
            to = part_of(target)
            if to is not None and to != part and to not in ALLOWED[part]:
                bad.append(f"{module} -> {target} ({part} -> {to})")
    return bad


def test_no_module_imports_upward():
    found = modules()
    imports = {name: imports_of(name, path, set(found)) for name, path in found.items()}
    assert len(imports) > 90  # the walk really found every package's modules
    assert violations(imports) == []


@pytest.mark.parametrize(
    "importer, imported",
    [
        ("loadlab.store.meta", "loadlab.client.users"),
        ("loadlab.store.run_folder", "loadlab.collect.nccl"),
        ("loadlab.store.run_folder", "loadlab.analyze.summary"),
        ("loadlab.store.reader", "loadlab.report.console"),
        ("loadlab.analyze.summary", "loadlab.client.stream"),
        ("loadlab.analyze.timeline", "loadlab.collect.nccl"),
        ("loadlab.client.stream", "loadlab.conductor.livestats"),
        ("loadlab.client.users", "loadlab.conductor.runloop"),
        ("loadlab.analyze.summary", "loadlab.conductor.runloop"),
        ("loadlab.collect.host", "loadlab.client.selfcheck"),
        ("loadlab.report.console", "loadlab.cli.summary"),
        ("loadlab.analyze.compare", "loadlab.gate.checks"),
        ("loadlab.gate.checks", "loadlab.conductor.runloop"),
        ("loadlab.gate.junit", "loadlab.cli.gate"),
        ("loadlab.metrics.slo", "loadlab.workload.scenario"),
        ("loadlab.workload.base", "loadlab.store.schema"),
        ("loadlab.config", "loadlab.store.schema"),
        ("loadlab.cli.serve", "reference_server.config"),
        ("reference_server.engine.runner", "loadlab.clock"),
        ("loadlab.analyze.analysis", "loadlab.lab.runner"),
        ("loadlab.lab.runner", "loadlab.cli.run"),
        ("loadlab.cli.run", "loadlab.newpackage.thing"),  # a new package must be placed first
    ],
)
def test_each_rule_can_fail(importer: str, imported: str):
    assert violations({importer: {imported}}) != []


def circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import circles among our modules (lazy imports count): each a sorted list of the
    modules that reach each other (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(imports.get(module, set()) & imports.keys()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return found


def test_no_import_circle():
    found = modules()
    imports = {name: imports_of(name, path, set(found)) for name, path in found.items()}
    assert circles(imports) == []
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The modules of loadlab/cli/ that are not commands: what several commands share (flag groups,
# reading run folders, starting and ending a run, a sweep); `loadlab.cli` registers the commands.
CLI_SHARED = {"loadlab.cli", "loadlab.cli.__main__", "loadlab.cli.options", "loadlab.cli.output"}
CLI_SHARED |= {"loadlab.cli.running", "loadlab.cli.sweeping"}


def command_imports(imports: dict[str, set[str]]) -> list[str]:
    """'importer -> imported' for every module in cli/ (a command, or a shared module) that
    imports a command module: commands share through CLI_SHARED, never through each other (only
    the package, `loadlab.cli`, imports them all, to register them)."""
    commands = {m for m in imports if m.startswith("loadlab.cli.") and m not in CLI_SHARED}
    return [
        f"{module} -> {target}"
        for module, targets in sorted(imports.items())
        if module.startswith("loadlab.cli.")
        for target in sorted(targets & commands - {module})
    ]


def test_no_command_module_imports_another():
    found = modules()
    imports = {name: imports_of(name, path, set(found)) for name, path in found.items()}
    commands = {m for m in found if m.startswith("loadlab.cli.") and m not in CLI_SHARED}
    # A command module registers its command; a module that does not is one of CLI_SHARED.
    assert {m for m in commands if "def register(" not in found[m].read_text()} == set()
    assert len(commands) > 10
    assert command_imports(imports) == []
    assert command_imports({"loadlab.cli.plan": {"loadlab.cli.sweep"}, "loadlab.cli.sweep": set()}) != []


CODE = """
import importlib, pkgutil, sys
sys.modules['torch'] = None          # any `import torch` now raises ImportError
import loadlab
names = [m.name for m in pkgutil.walk_packages(loadlab.__path__, 'loadlab.')
         if not m.name.endswith('__main__')]   # entry points run when imported
for name in names:
    importlib.import_module(name)
print(len(names))
"""


def test_every_loadlab_module_imports_without_torch():
    """Imported for real, so an import cycle or a missing module shows here too."""
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout) > 30  # the walk really found the package's modules


TORCH_FREE = """
import sys
sys.modules['torch'] = None
import reference_server.shapes, reference_server.config, reference_server.accounting, reference_server.twin.timing
print(len(reference_server.shapes.PRESETS))
"""


def test_model_shapes_the_twin_and_the_config_read_need_no_torch():
    """The twin's timing and the server's config (its --help) read the model shapes without PyTorch."""
    result = subprocess.run([sys.executable, "-c", TORCH_FREE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout) >= 6


STARTUP = """
import sys
import loadlab.cli
loadlab.cli._register_commands()     # what `loadlab ...` imports before a command runs
print(sorted(m for m in ('ssl', 'locust', 'gevent') if m in sys.modules))
"""


def test_the_cli_starts_without_ssl_so_locust_can_patch_it_first():
    """`loadlab run` imports Locust, which patches sockets and ssl with gevent, before anything
    opens a connection; ssl imported earlier makes gevent's patching fragile (RecursionError in
    SSLContext). So the CLI's start-up imports neither."""
    result = subprocess.run([sys.executable, "-c", STARTUP], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_tests_share_helpers_only_through_tests_support():
    """A test module (or a benchmark) imports no test module; shared helpers live in tests/support/,
    and a conftest.py holds fixtures only."""
    bad = []
    for path in sorted([*(REPO / "tests").rglob("*.py"), *(REPO / "bench").rglob("*.py")]):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                bad.append(f"{path.relative_to(REPO)}: relative import from {node.module}")
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            bad += [
                f"{path.relative_to(REPO)}: imports {n}"
                for n in names
                if n.split(".")[0] == "tests" and not n.startswith("tests.support")
            ]
        if path.name == "conftest.py":
            bad += [
                f"{path.relative_to(REPO)}: {node.name} is not a fixture"
                for node in tree.body
                if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                and not any("fixture" in ast.unparse(d) for d in node.decorator_list)
            ]
    assert bad == []
