# The two set-up commands of the README: `make run` and `make test`.
# Each creates .venv and installs the project into it when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# This machine keeps the CPU build of torch here; pip takes it from there instead of a CUDA build.
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

.PHONY: run test lint p4 p4info bench clean

# The compiled data path (p4ctl._engine) is built by this install: a changed C file rebuilds it.
# P4Runtime on protobuf 7 (README: "P4Runtime and protobuf"): the P4Runtime modules come from
# third_party/p4runtime-upb, not PyPI's p4runtime (removed first: both own the import name `p4`),
# and p4runtime-shell comes without its pins (protobuf<3.21, p4runtime==1.4.1); pyproject.toml
# lists the dependencies its client code has.
P4RUNTIME_SHELL := p4runtime-shell==0.0.6
P4RUNTIME_UPB := third_party/p4runtime-upb
$(BIN)/.installed: pyproject.toml $(wildcard p4/p4ctl/csrc/*.c p4/p4ctl/csrc/*.h) \
        $(wildcard $(P4RUNTIME_UPB)/pyproject.toml $(P4RUNTIME_UPB)/p4/*/*.py* $(P4RUNTIME_UPB)/p4/*/*/*.py*)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip uninstall -q -y --disable-pip-version-check p4runtime
	$(BIN)/pip install -q --disable-pip-version-check $(FIND_LINKS) -e '.[dev,torch,dask]' ./$(P4RUNTIME_UPB)
	$(BIN)/pip install -q --disable-pip-version-check --no-deps $(P4RUNTIME_SHELL)
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
