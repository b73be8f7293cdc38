# Two commands matter (see README.md):
#   make lab    set up .venv, build the engine, open JupyterLab on labs/
#   make test   set up .venv, build the engine, run the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gdrlab-installed

.PHONY: lab test test-fast test-asan fuzz-ci release bench-cpu clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml CMakeLists.txt native/CMakeLists.txt $(wildcard native/src/*/*) $(wildcard native/bind/*)
	$(PY) -m pip install -q "scikit-build-core>=0.10" "nanobind>=2.0"
	$(PY) -m pip install -q --no-build-isolation -e ".[test]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

lab: $(STAMP)
	$(VENV)/bin/gdrlab lab

test-fast: $(STAMP)
	$(PY) -m pytest tests -ra

test: $(STAMP)
	$(PY) -m pytest tests -ra
	@if [ -x bench/asan_tests.sh ]; then bash bench/asan_tests.sh; fi
	@if [ -x bench/fuzz.sh ]; then bash bench/fuzz.sh 60; fi

test-asan: $(STAMP)
	bash bench/asan_tests.sh

fuzz-ci:
	bash bench/fuzz.sh 60

release: $(STAMP)
	$(PY) scripts/release.py

bench-cpu: $(STAMP)
	$(PY) bench/bench_engine.py --cpu-only --out results/engine-cpu.json

clean:
	rm -rf build $(VENV) labs/release
