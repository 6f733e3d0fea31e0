# Two entry points for a fresh machine (see README):
#   make run        set up .venv and run the whole pipeline on the embedded default (snakemake --cores all)
#   make test       set up .venv, ruff (the linter), then the whole test suite on 2 workers (what CI runs)
#   make test-fast  the same without the slow end-to-end tests and the SLURM cluster test (markers `slow`, `cluster`), for daily work
#   make archive [ARGS="--configfile ..."] [OUT=FILE]   a finished run as archives/MODEL_minip-GRID.tar.gz
#   make unarchive ARCHIVE=FILE                        unpack one into this clone (docs/sharing_a_run.md)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_VERBOSITY := error

.PHONY: setup run test test-fast lint clean archive unarchive

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The install: uv (the one on PATH, else bootstrapped from PyPI into $(VENV)/.uv, outside the venv's packages), with
# pip's own index settings (`pip config list`: find-links, index URLs, constraints; uv reads none of them) and
# pip's choice among indexes (the best version anywhere); pip itself when uv is missing or fails, or INSTALLER=pip.
# Both give the same packages and versions (`pip freeze`), torch the CPU wheel 2.13.0.
INSTALLER ?= uv
PIP_INSTALL = $(BIN)/pip install --quiet --upgrade pip && $(BIN)/pip install --quiet torch==2.13.0 && \
	$(BIN)/pip install --quiet -e ".[test]"
UV_INSTALL = test "$(INSTALLER)" = uv && \
	uv=$$(command -v uv || { $(BIN)/pip install --quiet --target $(VENV)/.uv uv >&2 && echo $(VENV)/.uv/bin/uv; }) && \
	opts=$$($(BIN)/pip config list | sed -n "s/^[^.]*\.\(find-links\|extra-index-url\|index-url\|constraint\)='\(.*\)'$$/\1 \2/p" | \
	  sort -u | while read -r key values; do for v in $$values; do printf -- '--%s %s ' "$$key" "$$v"; done; done) && \
	echo "uv pip install $$opts" && \
	$$uv pip install --quiet --python $(BIN)/python --compile-bytecode --index-strategy unsafe-best-match $$opts \
	  --upgrade-package pip pip torch==2.13.0 -e ".[test]"

$(VENV)/.installed: $(BIN)/python pyproject.toml
	@$(UV_INSTALL) || { echo "installing with pip (INSTALLER=$(INSTALLER), or uv missing or failed)"; $(PIP_INSTALL); }
	touch $@

setup: $(VENV)/.installed

# data/logs/make_run.timing: `setup S run R cpu C rc X` (wall seconds of the set-up and of the pipeline, the user +
# system CPU seconds of the pipeline's process tree, from the shell's `times` before and after it, and its exit
# code); `python -m attncert.paper_comparison.readme_results --timing data/logs/make_run.timing` records a fresh
# clone's run in data/reference_run.json and the README
run:
	@t0=$$(date +%s.%N); $(MAKE) --no-print-directory setup || exit $$?; mkdir -p data/logs; \
	times > data/logs/.times_before; t1=$$(date +%s.%N); \
	$(BIN)/snakemake --cores all; rc=$$?; t2=$$(date +%s.%N); times > data/logs/.times_after; \
	awk -v a=$$t0 -v b=$$t1 -v c=$$t2 -v rc=$$rc -f workflow/cpu_of_times.awk data/logs/.times_before \
	  data/logs/.times_after > data/logs/make_run.timing; rm -f data/logs/.times_before data/logs/.times_after; \
	exit $$rc

# -n 2: two pytest-xdist workers, one per core of the 2-core machine the README assumes
test: setup
	$(BIN)/ruff check .
	$(BIN)/pytest -q -n 2

test-fast: setup
	$(BIN)/ruff check .
	$(BIN)/pytest -q -m "not slow and not cluster"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/snakemake --lint

# a finished run's generated files, Snakemake's records of them and the times of the sources (attncert.provenance.run_archive)
archive:
	@test -x $(BIN)/python || { echo "attncert: $(BIN)/python is missing, so this clone has made no run; fix: make run, then make archive" >&2; exit 2; }
	PYTHONPATH=src $(BIN)/python -m attncert.provenance.run_archive pack $(if $(OUT),--out $(OUT)) -- $(ARGS)

# standard library only: runs before `make setup`
unarchive:
	@test -n "$(ARCHIVE)" || { echo "attncert: no archive given; fix: make unarchive ARCHIVE=archives/NAME.tar.gz" >&2; exit 2; }
	PYTHONPATH=src $(PYTHON) -m attncert.provenance.run_archive unpack $(ARCHIVE)

clean:
	rm -rf data/extract data/certify data/baselines data/block data/minip data/logs data/long_context data/run data/audit benchmarks figures/minip figures/certify figures/baselines figures/block figures/long_context figures/report figures/tables .snakemake
