# The two commands of the README: `make demo` (set up, then run the demo DAG) and `make test`.
# Set-up is idempotent: .venv is created once and reinstalled when pyproject.toml changes.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch where no NVIDIA GPU is present (with one, pip's default, CUDA build). From PyPI, Linux's torch is the
# CUDA build (several GB): TORCH_INDEX=https://download.pytorch.org/whl/cpu asks PyTorch's CPU index instead.
TORCH_CPU ?= torch==2.13.0
TORCH_INDEX ?=
CORES ?= all

.PHONY: setup demo test lint dryrun clean-demo lock

setup: $(VENV)/.installed

# requirements.lock pins the package set the tests ran on (torch, triton and CUDA libraries aside: a GPU node
# keeps its own build); pyproject.toml states the ranges rnmt works with.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_CPU)"; fi
	$(BIN)/pip install --quiet -e '.[dev,slurm]' -c requirements.lock
	touch $@

# Rewrite the lock from the set-up venv (after changing pyproject.toml's ranges and running the tests).
lock: setup
	{ echo "# The package set the tests ran on; make setup installs with it as constraints. Written by make lock."; \
	  $(BIN)/pip freeze --exclude-editable | grep -Eiv '^(torch|triton|nvidia-)'; } > requirements.lock

demo: setup
	@echo "make demo: about 322 jobs (58 models on the synthetic pair), about 26 minutes on 2 CPU cores;"
	@echo "the tables land in results/demo/tables, the figures in results/demo/figures"
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --cores $(CORES)
	@# the numbers against the committed record the README quotes (a difference is explained, not fatal:
	@# another CPU type rounds differently)
	@$(BIN)/rnmt -q record check results/demo benchmarks/demo/record.csv || true

# Three worker processes, each taking whole test files (module fixtures such as a trained table run once):
# most tests wait on Snakemake and trainers, so on 2 cores three workers took 17 min 28 s where two took
# 20 min 52 s (842 tests, one after the other on a quiet machine; one process took 25 minutes for 795).
TEST_WORKERS ?= 3
test: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: setup
	$(BIN)/ruff check src tests

dryrun: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake -n

clean-demo:
	rm -rf results/demo
