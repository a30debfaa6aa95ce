# vramscope developer commands.  Quick start: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
EXAMPLE := assets/example_fragmentation_oom.pickle
# torch is only needed by the capture side and its tests; 2.13.0 is a CPU build.
TORCH_SPEC ?= torch==2.13.0

# C extensions (viewer/model/_native/*.c, built by setup.py; optional: without a
# compiler everything runs on the pure-Python paths).  Editing one re-installs.
NATIVE_SRC := $(wildcard viewer/model/_native/*.c viewer/model/_native/*_src/* viewer/model/_native/common/*)

.PHONY: run test lint lint-imports bench zoo-table install install-test screenshot clean help native fuzz ssh-tools \
        browser-tools desktop-tools

help:
	@echo "make run     - install into .venv and open the GUI on the bundled example"
	@echo "make test    - install test tools, lint (imports, ruff, mypy), run the tests"
	@echo "make test-fast - the tests not marked slow, on TEST_JOBS processes (no linters)"
	@echo "make lint    - only the linters: lint-imports, ruff check, mypy"
	@echo "make bench   - run the benchmarks at 1M and 10M events (ratios against pickle.load)"
	@echo "make zoo-table - the held-out zoo reports (tests/bench/zoo_*.md) from the zoo recordings"
	@echo "make screenshot - render the example to assets/screenshot.png (the README picture)"
	@echo "make native  - rebuild the C extensions in place (after editing viewer/model/_native/*.c)"
	@echo "make fuzz    - fuzz the compiled snapshot parser against the Python one (1M inputs)"
	@echo "make sanitize - the C extensions under ASan+UBSan (in build/sanitize): C = Python and fuzz tests"

$(VENV)/.installed: pyproject.toml setup.py $(NATIVE_SRC)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q -e .
	touch $@

# The optional extras the tests exercise are installed from pyproject.toml's own
# specs (`.[mcp]`: `vramscope mcp`'s SDK; `.[dask]`: a rank directory on a Dask cluster,
# tests/model/test_ranks_dask.py starts a LocalCluster; `.[notebook]`: IPython and a Jupyter
# kernel, tests/api/test_notebook.py runs the example notebook), never restated here.
$(VENV)/.test-installed: $(VENV)/.installed Makefile
	$(PIP) install -q pytest pytest-qt pytest-timeout pytest-xdist hypothesis build import-linter \
	    ruff==0.17.5 mypy==2.4.1 "$(TORCH_SPEC)" -e ".[mcp,dask,notebook]"
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.test-installed

# The window's X11 libraries that Qt's wheel does not bundle (README, "Install"): with an
# X display and some missing, installed where that is possible (root with apt), else the
# command to run said once; without a display vramscope itself says what to do.
run: install
	@missing=$$($(PY) -m vramscope.viewer.startup.display); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make run: installing the X11 libraries Qt's window needs: apt-get install $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends $$missing >/dev/null; \
	  else echo "make run: Qt's window needs X11 libraries: sudo apt-get install $$missing"; fi; \
	fi
	$(VENV)/bin/vramscope $(EXAMPLE)

# lint-imports: the layers and import rules of .importlinter (viewer/README.md, "Architecture");
# ruff: the whole tree, checked and formatted ([tool.ruff] in pyproject.toml; .pre-commit-config.yaml
# runs the same on each commit); mypy: the model, the commands and capture ([tool.mypy]).
# import-linter takes only top-level or namespace packages as roots, and vramscope.viewer and
# vramscope.capture are subpackages of the installed `vramscope` (the Python API, viewer/api/):
# it reads them through a namespace view of the tree, links under $(IMPORT_VIEW).
IMPORT_VIEW := build/import-view
lint: lint-imports
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --check --no-cache .
	$(VENV)/bin/mypy

lint-imports: install-test
	@mkdir -p $(IMPORT_VIEW)/vramscope && ln -sfn "$(CURDIR)/viewer" $(IMPORT_VIEW)/vramscope/viewer \
	  && ln -sfn "$(CURDIR)/capture" $(IMPORT_VIEW)/vramscope/capture
	PYTHONPATH=$(IMPORT_VIEW) $(VENV)/bin/lint-imports --no-cache

# The tests run on TEST_JOBS processes (pytest-xdist), a file to a process (--dist loadfile:
# a file's module-scoped fixtures and its tests that check the others ran stay together).
# TEST_JOBS=0 runs them in this process.  test-fast: all but the tests marked slow
# (tests/conftest.py lists the slow files: sshd, Chromium, Jupyter, Dask, the walks over
# every snapshot, the screenshot walks, wheels), a couple of minutes.
TEST_JOBS ?= 2
# A crashed process ends the run (--max-worker-restart 0): pytest-xdist's loadfile
# scheduling can wait forever for the work of a replaced one.
PYTEST_N := $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile --max-worker-restart 0)
test: lint ssh-tools browser-tools desktop-tools
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q $(PYTEST_N) $(PYTEST_ARGS)

.PHONY: test-fast
test-fast: install-test
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q $(PYTEST_N) -m "not slow" $(PYTEST_ARGS)

# What the tests start or call beyond Python, installed when missing where that is possible
# (root with apt), announced in one line first, else the command to run said once:
# $(call apt_tools,CHECK,PACKAGES,WHAT,NEED) installs PACKAGES ("installing WHAT") unless
# the shell test CHECK passes; NEED says who needs them.
apt_tools = if ! { $(1); }; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make test: installing $(strip $(3)): apt-get install $(strip $(2))"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends $(2) >/dev/null; \
	  else echo "make test: $(strip $(4)) (apt-get install $(strip $(2)))"; fi; \
	fi

# tests/remote start a real sshd on 127.0.0.1 with throwaway keys: OpenSSH's client and server.
SSH_APT := openssh-server openssh-client
ssh-tools:
	@$(call apt_tools,command -v ssh >/dev/null && command -v ssh-keygen >/dev/null && \
	  { command -v sshd >/dev/null || [ -x /usr/sbin/sshd ]; },$(SSH_APT),OpenSSH for tests/remote,\
	  tests/remote need sshd)

# The HTML report's tests lay its pages out in a real headless Chromium.
BROWSER_APT := chromium
browser-tools:
	@$(call apt_tools,command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  command -v google-chrome >/dev/null,$(BROWSER_APT),Chromium for the HTML report's tests,\
	  the HTML report's tests need Chromium)

# tests/packaging check the desktop entry and the MIME type as the installers' build does.
DESKTOP_APT := desktop-file-utils libxml2-utils
desktop-tools:
	@$(call apt_tools,command -v desktop-file-validate >/dev/null && command -v xmllint >/dev/null,\
	  $(DESKTOP_APT),the desktop entry's checkers,\
	  tests/packaging need desktop-file-validate and xmllint)

# BENCH_ARGS: e.g. --quick (1M events only), --keep DIR (reuse the tiled 10M file), FILE...
bench: install-test native
	QT_QPA_PLATFORM=offscreen $(PY) tests/bench/run_bench.py $(BENCH_ARGS)

# The zoo's recordings (tests/workloads/zoo.py) in ZOO (default /work/zoo, then
# tests/data/zoo): how the predictions do on the held-out families, into tests/bench/:
# zoo_table.md (batch what-if, categories, remedies), zoo_seq.md (the sequence what-if from
# one recording) and zoo_pairs.md (a third size from two recordings).
zoo-table: install native
	QT_QPA_PLATFORM=offscreen $(PY) tests/workloads/zoo_table.py $(if $(ZOO),--zoo $(ZOO))
	QT_QPA_PLATFORM=offscreen $(PY) tests/workloads/zoo_seq.py $(if $(ZOO),--zoo $(ZOO))
	QT_QPA_PLATFORM=offscreen $(PY) tests/workloads/zoo_pairs.py $(if $(ZOO),--zoo $(ZOO))

native: install
	$(PY) setup.py -q build_ext --inplace

fuzz: install-test
	$(PY) tests/fuzz/fuzz_parser.py --inputs $(or $(FUZZ_INPUTS),1000000)

# The C extensions built with AddressSanitizer and UBSan into $(SAN_LIB) (a package tree of
# its own: the in-place extensions stay as they are), then the tests that hold C = Python
# and the fuzzers run against them; any report ends the run with an error, and the reports
# (written to $(SAN_DIR)/report.<pid>: pytest's capture would swallow them) are printed.  libasan is
# preloaded (python itself is not instrumented); leaks are not checked (CPython keeps
# memory until exit by design); RLIMIT_AS cannot work with ASan's shadow memory, so the
# out-of-memory tests and the fuzzer's address-space limit are left out here.
SAN_DIR   := build/sanitize
SAN_LIB   := $(SAN_DIR)/lib
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -g
SAN_TESTS := tests/model/test_native_parser.py tests/model/test_fuzz_loader.py \
             tests/model/test_whatif_native.py tests/model/test_categories_native.py \
             tests/model/test_build_requests_fast.py tests/model/test_replay.py
SAN_ENV   := PYTHONPATH=$(CURDIR)/$(SAN_LIB) LD_PRELOAD=$$(gcc -print-file-name=libasan.so) \
             ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:log_path=$(CURDIR)/$(SAN_DIR)/report \
             UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(CURDIR)/$(SAN_DIR)/report \
             QT_QPA_PLATFORM=offscreen VRAMSCOPE_REQUIRE_NATIVE=1
.PHONY: sanitize
sanitize: install-test
	rm -rf $(SAN_LIB)
	VRAMSCOPE_REQUIRE_NATIVE=1 VRAMSCOPE_NATIVE_CFLAGS="$(SAN_FLAGS)" \
	  $(PY) setup.py -q build --build-base $(SAN_DIR) --build-lib $(SAN_LIB)
	$(SAN_ENV) $(PY) -c "import importlib; fs = [importlib.import_module(f'vramscope.viewer.model._native.{m}')\
	  .__file__ for m in ('catcore', 'replay_core', 'snapparse', 'whatif_core')]; \
	  assert all('/$(SAN_LIB)/' in f for f in fs), fs"
	rm -f $(SAN_DIR)/report.*
	$(SAN_ENV) $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_N) $(SAN_TESTS) \
	  || { cat $(SAN_DIR)/report.* 2>/dev/null; exit 1; }
	$(SAN_ENV) $(PY) tests/fuzz/fuzz_parser.py --inputs $(or $(FUZZ_INPUTS),3000) --rss-mb 0 \
	  || { cat $(SAN_DIR)/report.* 2>/dev/null; exit 1; }

screenshot: install
	QT_QPA_PLATFORM=offscreen $(VENV)/bin/vramscope $(EXAMPLE) --screenshot assets/screenshot.png

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache fuzz-findings
	rm -f viewer/model/_native/*.so viewer/model/_native/*.pyd

# ---------------------------------------------------------------- installers
# `make package`: PyInstaller app (viewer only) -> dist/vramscope-<version>-linux-<arch>.tar.gz
# and dist/vramscope_<version>-1_<arch>.deb, self-tested, desktop entry validated, a real
# window checked under Xvfb (packaging/README.md).  Builds in its own venv, never .venv.
PKG_VENV := build/package/venv
PKG_PY   := $(PKG_VENV)/bin/python
PKG_PIP  := $(PKG_PY) -m pip --disable-pip-version-check
# Tools the build runs (dpkg-deb, desktop-file-validate, xmllint, Xvfb + xwd/xwininfo,
# lintian) and the X11 libraries PyInstaller bundles from this system (libxcb-cursor0 ...).
PKG_APT  := dpkg-dev desktop-file-utils libxml2-utils shared-mime-info xvfb xauth x11-apps x11-utils \
            lintian binutils libxcb-cursor0 libxkbcommon-x11-0 libxcb-icccm4 libxcb-image0 \
            libxcb-keysyms1 libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 \
            libxcb-xkb1 libegl1 libgl1 libfontconfig1 libdbus-1-3 libglib2.0-0
PKG_TOOLS := dpkg-deb desktop-file-validate xmllint xvfb-run xwd xwininfo objdump

.PHONY: package
package:
	@missing=; for t in $(PKG_TOOLS); do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	[ -e /usr/lib/x86_64-linux-gnu/libxcb-cursor.so.0 ] || [ -e /usr/lib/aarch64-linux-gnu/libxcb-cursor.so.0 ] \
	  || missing="$$missing libxcb-cursor0"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make package: installing build tools ($$missing )"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(PKG_APT) >/dev/null; \
	  else echo "make package: missing$$missing; install: sudo apt-get install $(PKG_APT)"; exit 1; fi; \
	fi
	test -x $(PKG_PY) || $(PYTHON) -m venv $(PKG_VENV)
	$(PKG_PIP) install -q --upgrade pip
	$(PKG_PIP) install -q -r packaging/requirements.txt .
	$(PKG_PIP) install -q --no-deps --force-reinstall .
	$(PKG_PY) packaging/build.py
