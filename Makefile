# vehcal_ros — fresh-machine entry points. Every target sets up .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv test test-fast demo bench bench-peers lint clean

venv: $(STAMP)

$(STAMP): requirements.txt requirements-test.txt setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet -r requirements-test.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

## make test: the whole suite, slow statistical checks included (as CI runs it), on two pytest-xdist workers
## (a test file per worker at a time: the tests' processes wait on real-time drives much of the time). The kernels
## are compiled first, once, in parallel (vehcal precompile; seconds when the cache is warm), instead of by every
## test process and node that finds the cache empty.
PYTEST := $(BIN)/python -m pytest -q -n 2 --dist loadfile
test: $(STAMP)
	$(BIN)/vehcal precompile
	$(PYTEST) test

## make test-fast: skip the tests marked slow
test-fast: $(STAMP)
	$(BIN)/vehcal precompile
	$(PYTEST) -m "not slow" test

## make demo: the main job end to end
demo: $(STAMP)
	$(BIN)/vehcal demo

## (bench_carry_forward.py reads the fleet chain bench_fleet.py writes, so it runs last)
BENCH_LAST := benchmarks/bench_carry_forward.py
bench: $(STAMP)
	for f in $(filter-out $(BENCH_LAST),$(sort $(wildcard benchmarks/bench_*.py))) $(BENCH_LAST); do \
		echo "== $$f"; $(BIN)/python $$f || exit 1; done

## make bench-peers: this project's SMC against PyMC on the same model (benchmarks/bench_vs_pymc.py). PyMC and its
## deps go into a separate .venv-bench (benchmarks/requirements-peers.txt), never into .venv or requirements.txt;
## this package is installed there with --no-deps.
BENCH_VENV  := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

$(BENCH_STAMP): benchmarks/requirements-peers.txt setup.py
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BENCH_VENV)/bin/python -m pip install --quiet -r benchmarks/requirements-peers.txt
	$(BENCH_VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(BENCH_STAMP)

bench-peers: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/bench_vs_pymc.py --json benchmarks/results/vs_pymc.json

lint: $(STAMP)
	$(BIN)/ruff check vehcal_ros test benchmarks launch tools
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) $(BENCH_VENV) build *.egg-info .pytest_cache
	find vehcal_ros test benchmarks -name '*.nbi' -delete -o -name '*.nbc' -delete
	rm -rf "$${XDG_CACHE_HOME:-$$HOME/.cache}/vehcal_ros/numba"   # numba's kernels (vehcal_ros/numba_cache.py)
