# Two commands matter (see README.md):
#   make lab    set up .venv, build the engine, open JupyterLab on your working copies of the labs
#   make test   set up .venv, build the engine, run the whole test suite
# Python packages come at the versions in constraints.txt, through scripts/install-gdrlab.sh (the
# same script the container recipes and binder/postBuild call).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gdrlab-installed
# `make lab` needs only the [lab] extra (JupyterLab, nbgrader, plotly...); the test kit (Playwright,
# ruff, mypy...) comes with `make test`. Either stamp is enough for the labs.
LAB_STAMP := $(VENV)/.gdrlab-lab
ENGINE_DEPS := $(PY) pyproject.toml constraints.txt CMakeLists.txt native/CMakeLists.txt $(wildcard native/src/*/*) $(wildcard native/bind/*)

.PHONY: lab lab-instructor test test-fast test-asan test-stress fuzz-ci release release-check constraints wheel bench-cpu clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(ENGINE_DEPS)
	bash scripts/install-gdrlab.sh --python $(PY) --extra test --editable
	touch $(STAMP) $(LAB_STAMP)

$(LAB_STAMP): $(ENGINE_DEPS)
	@if [ -f $(STAMP) ] && [ -z "$$(find $(ENGINE_DEPS) -newer $(STAMP) 2>/dev/null | head -1)" ]; then \
	  echo "make: the test kit's install already holds the lab extra"; \
	else bash scripts/install-gdrlab.sh --python $(PY) --extra lab --editable; fi
	touch $(LAB_STAMP)

# student copies (no solutions) in ~/gdrlab-labs or $GDRLAB_WORKDIR; your files there are never overwritten
lab: $(LAB_STAMP)
	@echo "make: the gdrlab command is $(VENV)/bin/gdrlab (or run '. $(VENV)/bin/activate' first, then gdrlab)"
	$(VENV)/bin/gdrlab lab

# the sources with solutions, hidden tests and nbgrader's instructor tools (labs/)
lab-instructor: $(LAB_STAMP)
	@echo "make: the gdrlab command is $(VENV)/bin/gdrlab (or run '. $(VENV)/bin/activate' first, then gdrlab)"
	$(VENV)/bin/gdrlab lab --instructor

test-fast: $(STAMP)
	$(PY) -m pytest tests -ra

test: $(STAMP)
	$(PY) -m pytest tests -ra
	@if [ -x bench/asan_tests.sh ]; then bash bench/asan_tests.sh; fi
	@if [ -x bench/fuzz.sh ]; then bash bench/fuzz.sh 60; fi

test-asan: $(STAMP)
	bash bench/asan_tests.sh

# the timing-sensitive tests, 5 runs in a row plain and sanitized, beside two CPU-bound processes
test-stress: $(STAMP)
	bash bench/stress_tests.sh

fuzz-ci:
	bash bench/fuzz.sh 60

# rebuild labs/source from its generators, then the student labs the package ships
# (gdrlab/data/labs) from labs/source; commit both
release: $(STAMP)
	$(PY) scripts/build_labs.py
	$(PY) scripts/release.py

release-check: $(STAMP)
	$(PY) scripts/release.py --check

# after a green `make test`: record the versions that passed
constraints: $(STAMP)
	{ sed -n '1,3p' constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v '^gdrlab=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

wheel: $(STAMP)
	$(PY) -m pip wheel --no-build-isolation --no-deps -w dist .

bench-cpu: $(STAMP)
	$(PY) bench/bench_engine.py --cpu-only --out results/engine-cpu.json

clean:
	rm -rf build dist $(VENV) labs/release
