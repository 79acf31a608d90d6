# The two set-up commands of the README: `make run` and `make test`.
# Each creates .venv and installs the project into it when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# This machine keeps the CPU build of torch here; pip takes it from there instead of a CUDA build.
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

.PHONY: run test lint p4 p4info bench clean

# The compiled data path (p4ctl._engine) is built by this install: a changed C file rebuilds it.
$(BIN)/.installed: pyproject.toml $(wildcard p4/p4ctl/engine/*.c p4/p4ctl/engine/*.h)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(FIND_LINKS) -e '.[dev,torch]'
	touch $@

run: $(BIN)/.installed
	$(BIN)/inasched up --demo

test: $(BIN)/.installed
	$(BIN)/pytest

# ruff and mypy --strict on the library packages (pyproject.toml's [tool.mypy] files); .ci/run runs it.
lint: $(BIN)/.installed
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

p4info: $(BIN)/.installed
	$(BIN)/python -m p4ctl.p4info --write p4/build/inasched.p4info.txtpb

p4: $(BIN)/.installed
	$(BIN)/python -m p4ctl.build

clean:
	rm -rf $(VENV) .pytest_cache .coverage
