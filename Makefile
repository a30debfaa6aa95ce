# vramscope developer commands.  Quick start: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
EXAMPLE := assets/example_fragmentation_oom.pickle
# torch is only needed by the capture side and its tests; 2.13.0 is a CPU build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: run test bench install install-test screenshot clean help

help:
	@echo "make run     - install into .venv and open the GUI on the bundled example"
	@echo "make test    - install test tools and run the whole test suite"
	@echo "make bench   - run the benchmarks (ratios against pickle.load)"
	@echo "make screenshot - render the example to docs/screenshot.png"

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q -e .
	touch $@

$(VENV)/.test-installed: $(VENV)/.installed Makefile
	$(PIP) install -q pytest pytest-qt pytest-timeout hypothesis build "$(TORCH_SPEC)"
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.test-installed

run: install
	$(VENV)/bin/vramscope $(EXAMPLE)

test: install-test
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q $(PYTEST_ARGS)

bench: install-test
	QT_QPA_PLATFORM=offscreen $(PY) tests/bench/run_bench.py

screenshot: install
	QT_QPA_PLATFORM=offscreen $(VENV)/bin/vramscope $(EXAMPLE) --screenshot assets/screenshot.png

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
