# Two entry points for a fresh machine (see README):
#   make run        set up .venv and run the whole pipeline on the embedded default (snakemake --cores all)
#   make test       set up .venv, ruff (the linter), then the whole test suite (what CI runs)
#   make test-fast  the same without the slow end-to-end tests and the SLURM cluster test (markers `slow`, `cluster`), for daily work
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_VERBOSITY := error

.PHONY: setup run test test-fast lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

setup: $(VENV)/.installed

run: setup
	$(BIN)/snakemake --cores all

test: setup
	$(BIN)/ruff check .
	$(BIN)/pytest -q

test-fast: setup
	$(BIN)/ruff check .
	$(BIN)/pytest -q -m "not slow and not cluster"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/snakemake --lint

clean:
	rm -rf data/extract data/certify data/baselines data/block data/minip data/logs data/long_context data/run data/audit benchmarks figures/minip figures/certify figures/baselines figures/block figures/tables .snakemake
