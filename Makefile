# `make run` and `make test` do all of their own setup: a virtualenv in .venv with the pinned
# requirements, and the npm packages of the local stack (dynalite) in node_modules.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
VENV_PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# Both cores by default (CI has two); `make test PYTEST_ARGS=` runs one process.
PYTEST_ARGS ?= -n 2 --dist loadgroup

.PHONY: run test deps lint bench clean

run: deps
	$(VENV_PY) -m chalicelib.local

test: deps
	$(VENV_PY) -m pytest $(PYTEST_ARGS)

deps: $(PY_STAMP) $(NODE_STAMP)

$(PY_STAMP): requirements.txt requirements-dev.txt
	test -x $(VENV_PY) || $(PYTHON) -m venv $(VENV)
	$(VENV_PY) -m pip install --quiet --upgrade pip
	$(VENV_PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

bench: deps
	$(VENV_PY) bench/local_scale.py

clean:
	rm -rf $(VENV) node_modules .pytest_cache .hypothesis
