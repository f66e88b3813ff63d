# Two entry points for a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch 2.13.0 is pinned first: a bare range would make pip pick a multi-GB CUDA build.
TORCH  ?= torch==2.13.0

.PHONY: demo test test-floor lint venv bench clean gpu-wheels

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml twin/pyproject.toml
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[test]" -e ./twin
	touch $@

venv: $(VENV)/.installed

# The demo tunes the synthetic twin of SkyRL's text-to-SQL run; running it again resumes the study.
RESULTS     ?= results
DEMO_TRIALS ?= 16

demo: venv
	$(BIN)/nccl-tune run --study demo --results $(RESULTS) --trials $(DEMO_TRIALS) \
		--output $(RESULTS)/demo-tuned.yaml -- bash examples/run_skyrl_sql_sim.sh

# Two pytest workers per core (16 at most): most tests wait on trainer processes and their clocks.
# On 2 cores the suite took 823-905 s with 4 workers and 1015 s with 6, all passing.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(16, 2 * len(os.sched_getaffinity(0))))")

# Style is checked, not discussed: ruff's lint and format (settings in pyproject.toml) before the tests.
lint: venv
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .

# A worker the backstop ended (tests/backstop.py) is not replaced: with the suite's own scheduler
# (tests/conftest.py) a replacement left the run waiting for good; the others finish the run.
PYTEST_N = -n $(TEST_WORKERS) --max-worker-restart 0

test: lint
	$(BIN)/python -m pytest -q $(PYTEST_N) tests

# The lowest version of every requirement pyproject.toml admits (.ci/floor.py), in a venv of its own:
# CI runs the suite there too, so each floor is a version the tests pass on.
FLOOR := .venv-floor
$(FLOOR)/.installed: pyproject.toml twin/pyproject.toml .ci/floor.py
	rm -rf $(FLOOR)
	$(PYTHON) -m venv $(FLOOR)
	$(FLOOR)/bin/python -m pip install --quiet --upgrade pip
	$(PYTHON) .ci/floor.py > $(FLOOR)/constraints.txt
	$(FLOOR)/bin/python -m pip install --quiet -c $(FLOOR)/constraints.txt -e ".[test]" -e ./twin
	touch $@

test-floor: $(FLOOR)/.installed
	$(FLOOR)/bin/python -m pip list --format=freeze > $(FLOOR)/installed.txt
	PYTHON=$(CURDIR)/$(FLOOR)/bin/python $(FLOOR)/bin/python -m pytest -q $(PYTEST_N) tests

# Each benchmark exits non-zero when it misses a target; all of them run anyway.
bench: venv
	mkdir -p benchmarks/out
	-$(BIN)/python benchmarks/search.py --json benchmarks/out/search.json
	-$(BIN)/python benchmarks/hang.py --json benchmarks/out/hang.json
	-$(BIN)/python benchmarks/ingest.py --json benchmarks/out/ingest.json
	-$(BIN)/python benchmarks/parallel.py --json benchmarks/out/parallel.json
	-$(BIN)/python benchmarks/twin_speed.py --json benchmarks/out/twin.json
	-$(BIN)/python benchmarks/worst_case.py --json benchmarks/out/worst_case.json
	-$(BIN)/python benchmarks/landscapes.py --json benchmarks/out/landscapes.json

# The wheels a GPU node without network lacks, for benchmarks/gpu_run.sh (docs/gpu.md): the node has
# torch, numpy, nvidia-ml-py, psutil, rich, typer, matplotlib and Jinja2; the rest of the project's
# dependencies, their own (read from each wheel's METADATA) and pytest travel in $(WHEELS), at the
# versions this venv tests with, for CPython 3.12 on x86-64 Linux. Ray stays behind (70 MB; the
# local launcher does not import it).
WHEELS       ?= .whl
WHEELS_MAX_MIB ?= 48
GPU_PYTHON   ?= 3.12
# compiled: one wheel per platform tag
GPU_BINARY   := SQLAlchemy MarkupSafe PyYAML ahocorasick-rs setproctitle py-spy
# pure Python: optuna (alembic, colorlog, SQLAlchemy, tqdm, PyYAML, packaging), alembic (Mako,
# typing-extensions), omegaconf (PyYAML), pytest (pluggy, iniconfig), pytest-xdist (execnet)
GPU_PURE     := optuna alembic Mako colorlog tqdm omegaconf typing-extensions packaging \
	pytest pluggy iniconfig pytest-timeout pytest-xdist execnet
PIN_OF        = $$($(BIN)/python -c "import importlib.metadata as m, sys; print(sys.argv[1] + '==' + m.version(sys.argv[1]))" $(1))

gpu-wheels: venv
	rm -rf $(WHEELS) && mkdir -p $(WHEELS)
	for name in $(GPU_BINARY); do \
		$(BIN)/python -m pip download --quiet --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) \
			--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
			--platform manylinux2014_x86_64 -d $(WHEELS) $(call PIN_OF,$$name) || exit 1; \
	done
	for name in $(GPU_PURE); do \
		$(BIN)/python -m pip download --quiet --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) \
			-d $(WHEELS) $(call PIN_OF,$$name) || exit 1; \
	done
	@ls $(WHEELS)
	@size=$$(du -sm $(WHEELS) | cut -f1); echo "$(WHEELS): $$(ls $(WHEELS) | wc -l) wheels, $$(du -sh $(WHEELS) | cut -f1)"; \
		test $$size -le $(WHEELS_MAX_MIB) || { echo "$(WHEELS) is over $(WHEELS_MAX_MIB) MiB: what travels to the GPU node with the checkout is kept small"; exit 1; }

clean:
	rm -rf $(VENV) $(FLOOR) results/* benchmarks/out $(WHEELS)
