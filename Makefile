# The two commands of the README. Each creates .venv on first use and installs the project into it,
# pinning torch first (constraints.txt) so nothing pulls a multi-GB CUDA build on a CPU machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8501

.PHONY: app test test-numeric bench install clean

app: $(STAMP)
	$(BIN)/streamlit run dashboard/serve.py --server.port $(PORT)

# The architecture contract first (pyproject.toml, [tool.importlinter]: imports run one way, inside functions too),
# then the linter and the type checker over probes/, dashboard/, tests/ and benchmarks/ ([tool.ruff], [tool.mypy]:
# 0 errors; mypy on two processes: sooner from a fresh clone, which has no cache; docs/tests.md, "How long", has its
# time), then the docs site (mkdocs.yml: --strict, so a broken link or anchor between docs/ pages fails; built into a
# temporary folder, removed after), then the suite in two runs, each test once:
# - every test but those that compare floating results with a tolerance, on this CPU's own kernels;
# - those (marker `numeric`, not `bitwise`: `make test-numeric`) under another CPU's kernels, the portable ones (no
#   AVX, ATEN_CPU_CAPABILITY=default) and one thread: another reduction order and vector width than the machine
#   they were written on, where a tolerance too tight for the arithmetic shows. The `bitwise` ones (a Ray run
#   against one process, bit for bit) stay in the first run: both sides change alike under other kernels.
# Both on TEST_JOBS processes (pytest-xdist), each on one thread (OpenMP's threads busy-wait: two workers of two
# threads on two cores spend more time waiting than computing); the tests that start a local Ray run on one worker,
# one after the other (the "ray" group), as do those that start the app for Chromium (the "browser" group).
# TEST_JOBS=0: one process.
TEST_JOBS ?= 2
NUMERIC := numeric and not bitwise

test: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check probes dashboard tests benchmarks
	$(BIN)/mypy --num-workers 2
	site=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir "$$site"; \
		status=$$?; rm -rf "$$site"; exit $$status
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m "not ($(NUMERIC))" -n $(TEST_JOBS) --dist loadgroup --durations=15
	$(MAKE) --no-print-directory test-numeric

# The tests that compare floating results with a tolerance, alone, as `make test` runs them (its second run).
test-numeric: $(STAMP)
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 PROBES_THREADS=1 $(BIN)/python -m pytest -m "$(NUMERIC)" \
		-n $(TEST_JOBS) --dist loadgroup --durations=15

bench: $(STAMP)
	$(BIN)/python benchmarks/forward.py
	$(BIN)/python benchmarks/long_inputs.py --out benchmarks/results
	$(BIN)/python benchmarks/long_inputs.py --model smollm2 --out benchmarks/results
	$(BIN)/python benchmarks/profile_speed.py --out benchmarks/results
	$(BIN)/python benchmarks/rerender.py
	$(BIN)/python benchmarks/why_panel.py --out benchmarks/results
	$(BIN)/python benchmarks/generate.py --out benchmarks/results
	$(BIN)/python benchmarks/load_test.py --out benchmarks/results
	$(BIN)/python benchmarks/bytes_per_change.py --out benchmarks/results
	$(BIN)/python benchmarks/cold_start.py --out benchmarks/results
	$(BIN)/python benchmarks/memory_by_source.py --out benchmarks/results
	$(BIN)/python benchmarks/parity_reuse.py --out benchmarks/results
	$(BIN)/python benchmarks/corpus_ray.py --out benchmarks/results
	$(BIN)/python benchmarks/remote_speed.py --out benchmarks/results
	$(BIN)/python benchmarks/ablation.py --out benchmarks/results
	$(BIN)/python benchmarks/effects_checks.py --out benchmarks/results
	$(BIN)/python benchmarks/effects_first_grid.py --out benchmarks/results
	$(BIN)/python benchmarks/compose.py --out benchmarks/results
	$(BIN)/python benchmarks/circuit_smollm2.py --out benchmarks/results
	$(BIN)/python benchmarks/evidence.py --out benchmarks/results
	$(BIN)/python benchmarks/cancel.py --out benchmarks/results

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -c constraints.txt "torch==2.13.0"
	$(BIN)/python -m pip install -c constraints.txt -e ".[test,ray]"
	touch $(STAMP)

clean:
	rm -rf $(VENV)
