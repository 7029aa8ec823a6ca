"""The toolkit stays light: no module of `loadlab` imports torch (only `reference_server` does), and
the CLI starts without ssl, gevent or Locust."""

from __future__ import annotations

import subprocess
import sys

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
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout) > 30   # the walk really found the package's modules


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
