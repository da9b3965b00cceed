# The two commands of the README. Each creates the venv (VENV, .venv by default) on first use and installs into it
# what it needs: `make app` the project alone, `make test` the project with its test and ray extras. torch comes
# first, pinned by constraints.txt, in the build this machine can use (TORCH below).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8501

# TORCH=cpu: PyTorch's CPU wheels (TORCH_INDEX), as requirements.txt takes them for Streamlit Community Cloud; PyPI's
# torch for Linux is the CUDA build, whose NVIDIA wheels are several GB that a machine without the GPU never uses.
# TORCH=cuda: PyPI's build. Decided here: cuda where an NVIDIA driver shows (nvidia-smi on PATH, or NVIDIA_DRIVER
# present), cpu elsewhere; `make app TORCH=cpu|cuda` decides instead. Changing it on a built venv replaces torch.
NVIDIA_DRIVER ?= /proc/driver/nvidia
ifndef TORCH
TORCH := $(shell if command -v nvidia-smi >/dev/null 2>&1 || [ -e "$(NVIDIA_DRIVER)" ]; then echo cuda; else echo cpu; fi)
endif
ifeq ($(filter $(TORCH),cpu cuda),)
$(error TORCH=$(TORCH): cpu (PyTorch's CPU wheels) or cuda (PyPI's build))
endif
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_FROM.cpu := --index-url $(TORCH_INDEX)
TORCH_FROM.cuda :=
TORCH_FAILED.cpu := make: no torch from PyTorch's CPU wheels ($(TORCH_INDEX)): point TORCH_INDEX at a mirror of that \
	index, or take PyPI's build with TORCH=cuda (several GB of NVIDIA wheels on Linux)
TORCH_FAILED.cuda := make: no torch from PyPI (pip's own index): TORCH=cpu takes PyTorch's CPU wheels instead
# One stamp a step: torch (named by its build), the app's install, the tests' install on top of it.
TORCH_STAMP := $(VENV)/.torch-$(TORCH)
APP_STAMP := $(VENV)/.installed-app
TEST_STAMP := $(VENV)/.installed-test

.PHONY: app test test-numeric bench install install-test clean

app: $(APP_STAMP)
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

test: $(TEST_STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check probes dashboard tests benchmarks
	$(BIN)/mypy --num-workers 2
	site=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir "$$site"; \
		status=$$?; rm -rf "$$site"; exit $$status
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m "not ($(NUMERIC))" -n $(TEST_JOBS) --dist loadgroup --durations=15
	$(MAKE) --no-print-directory test-numeric

# The tests that compare floating results with a tolerance, alone, as `make test` runs them (its second run).
test-numeric: $(TEST_STAMP)
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 PROBES_THREADS=1 $(BIN)/python -m pytest -m "$(NUMERIC)" \
		-n $(TEST_JOBS) --dist loadgroup --durations=15

bench: $(TEST_STAMP)
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

# What `make app` installs (install), and what `make test` and `make bench` install (install-test), without running
# anything.
install: $(APP_STAMP)
install-test: $(TEST_STAMP)

$(TORCH_STAMP): constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed (set PYTHON=...)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@for old in $(VENV)/.torch-*; do \
		if [ -e "$$old" ] && [ "$$old" != "$@" ]; then \
			echo "TORCH=$(TORCH): replacing the torch of $${old##*/.torch-}"; \
			$(BIN)/python -m pip uninstall -y -q torch && rm -f "$$old" || exit 1; \
		fi; \
	done
	$(BIN)/python -m pip install -c constraints.txt $(TORCH_FROM.$(TORCH)) torch || { echo "$(TORCH_FAILED.$(TORCH))" >&2; exit 1; }
	touch $@

$(APP_STAMP): pyproject.toml constraints.txt $(TORCH_STAMP)
	$(BIN)/python -m pip install -c constraints.txt -e .
	touch $@

$(TEST_STAMP): pyproject.toml constraints.txt $(TORCH_STAMP)
	$(BIN)/python -m pip install -c constraints.txt -e ".[test,ray]"
	touch $@

clean:
	rm -rf $(VENV)
