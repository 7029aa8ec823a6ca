# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/loadlab: pyproject.toml
	$(PY) -m venv $(VENV)
	# torch first, pinned: the CPU wheel is on this machine's disk; anything newer downloads gigabytes.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[server,dev]'
	touch $@

venv: $(BIN)/loadlab

# Debian packages the tests start for real: a Prometheus server and headless Chromium.
system-deps:
	@command -v prometheus >/dev/null && command -v chromium >/dev/null || \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus chromium)

demo: venv
	$(BIN)/python -m loadlab.demo

# The committed example report: a short sweep of the reference server, and a picture of its top for README.
report: venv system-deps
	rm -rf runs/example
	$(BIN)/python -m loadlab.demo --out runs/example --report reports/example.html
	chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars \
	  --window-size=1400,1100 --virtual-time-budget=8000 --screenshot=reports/example.png \
	  file://$(CURDIR)/reports/example.html 2>/dev/null

# Lint, format and type checks: the one command, here and in CI (`make test` runs it first).
check: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The suite in two tiers. First the tests marked `serial` (a provoked load, a verdict that depends
# on this host's speed: the lab, the KV-bound run, a real vLLM), one at a time with the host to
# themselves; then the rest side by side in TEST_WORKERS processes (pytest-xdist), a test file per
# process so that a module's server starts once. Both tiers run; either failing fails the target.
TEST_WORKERS ?= 3
test: venv system-deps check
	@$(BIN)/python -m pytest -q -m serial --durations=10; serial=$$?; \
	$(BIN)/python -m pytest -q -m 'not serial' -n $(TEST_WORKERS) --dist loadfile --durations=15; rest=$$?; \
	test $$serial -eq 0 && test $$rest -eq 0

.PHONY: venv system-deps demo report check test
