"""Every p4ctl module keeps a sorted `__all__` naming only what it defines or re-exports."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "backend",
    "client",
    "client_codec",
    "dataplane",
    "engine",
    "errors",
    "p4rt_service",
    "pipeline",
    "replication",
    "softswitch",
    "switch_engine",
    "tables",
    "values",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_resolves(name: str) -> None:
    module = importlib.import_module(f"p4ctl.{name}")
    exported = list(module.__all__)
    assert exported == sorted(exported)
    for symbol in exported:
        assert hasattr(module, symbol), f"p4ctl.{name}.{symbol}"
