# The Annotated Transformer: set-up, main job, tests, book. GNU make.
#
#   make main       set up .venv if needed, then the main job (Table 3 parameter counts, a forward pass)
#   make test       set up, then every check: ruff, unit tests, nbval over every chapter, the book (-W)
#
# Every target uses the binaries of .venv directly, so nothing needs to be activated.

# The interpreter that creates .venv (Python >= 3.10).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The one torch that is installed, and only when .venv has none: never an unpinned torch (that would
# pull in gigabytes of CUDA libraries). Extra pip arguments for it, e.g. a CPU-only index:
#   make setup TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_VERSION := 2.13.0
TORCH_PIP_ARGS ?=
PIP_FLAGS := $(if $(CI),--progress-bar off,)
# The book: warnings are errors (-W), missing references too (-n); --all re-reads every page, so that
# a warning in a page unchanged since the last build is not skipped.
BOOK_FLAGS := -W -n --keep-going --all
LINT_PATHS := book annotated_transformer tests tools benchmarks

.DEFAULT_GOAL := help
.PHONY: help setup main test lint unit nbval book bench export notebooks clean distclean

help:
	@echo "make main       set up .venv if needed, then run the main job (tools/main_job.py)"
	@echo "make test       set up, then ruff, unit tests, nbval over every notebook, the book build (-W)"
	@echo "make setup      create .venv (python3) and install torch==$(TORCH_VERSION) and the package [dev]"
	@echo "make book       build the Jupyter Book into _build/html (warnings are errors)"
	@echo "make bench      run the speed benchmarks (benchmarks/run_all.py; minutes, prints a table)"
	@echo "make export     regenerate annotated_transformer/ from the notebooks in book/ (nbdev-export)"
	@echo "make notebooks  export, then re-execute every notebook in place (fresh committed outputs)"
	@echo "make clean      remove build outputs and caches (make distclean also removes .venv)"

# --- set-up ---------------------------------------------------------------------------------------
# Idempotent: the venv is created only when missing, torch installed only when it does not import,
# and the editable install of the package with its [dev] extra redone only when pyproject.toml is
# newer than the last install (the stamp file below).

setup: $(VENV)/.installed
	@echo "set-up: $(VENV) is ready (torch $$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("torch"))'))"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@if $(BIN)/python -c "import torch" >/dev/null 2>&1; then \
		echo "torch: $$($(BIN)/python -c 'import torch; print(torch.__version__)') already in $(VENV)"; \
	else \
		echo "torch: installing torch==$(TORCH_VERSION) into $(VENV)"; \
		$(BIN)/python -m pip install $(PIP_FLAGS) $(TORCH_PIP_ARGS) "torch==$(TORCH_VERSION)" || exit 1; \
	fi
	$(BIN)/python -m pip install $(PIP_FLAGS) -e ".[dev]"
	@touch $@

# --- the main job -------------------------------------------------------------------------------

main: setup
	$(BIN)/python tools/main_job.py

# --- every test, in order ------------------------------------------------------------------------
# `make test` runs lint, unit, nbval and book in this order; `make -k test` (as .ci/run does) goes on
# after a failing step, so that one run reports every failure, and still exits non-zero.

test: lint unit nbval book

lint: setup
	$(BIN)/ruff check $(LINT_PATHS)

unit: setup
	$(BIN)/python -m pytest tests -q

# The notebooks run in quick mode (ANNOTATED_TRANSFORMER_QUICK=1): training shrinks to seconds.
# Only outputs that do not depend on it are compared (cells tagged nbval-check-output).
nbval: setup
	ANNOTATED_TRANSFORMER_QUICK=1 $(BIN)/python -m pytest --nbval-lax --nbval-current-env book/ -q

book: setup
	$(BIN)/jupyter-book build . $(BOOK_FLAGS)

# --- benchmarks (speed goals live here, never in the tests) -------------------------------------

bench: setup
	cd benchmarks && ../$(BIN)/python run_all.py

# --- authoring ----------------------------------------------------------------------------------
# The notebooks in book/ are the source; annotated_transformer/ is generated from them.

export: setup
	$(BIN)/nbdev-export

notebooks: export
	$(BIN)/python tools/execute_notebooks.py

clean:
	rm -rf _build build dist .pytest_cache .ruff_cache *.egg-info
	find . -path ./$(VENV) -prune -o -type d \( -name __pycache__ -o -name .ipynb_checkpoints \) -print \
		| xargs rm -rf

distclean: clean
	rm -rf $(VENV)
