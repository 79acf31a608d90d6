"""The embedded soft switch is read and written over P4Runtime like any other target."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from p4ctl.client import SwitchClient
from p4ctl.protocol import AggState

from api.coordinator.runtime import connect_switch
from api.settings import Settings


def test_embedded_switch_is_a_p4runtime_client(tmp_path: Path) -> None:
    closers: list[Callable[[], None]] = []
    settings = Settings(
        data_dir=tmp_path, switch={"target": "embedded", "aggregators": 512, "lanes": 64}
    )
    try:
        backend, data = connect_switch(settings, closers)
        assert isinstance(backend, SwitchClient)
        occupancy = backend.occupancy()
        assert occupancy.aggregators == 512
        assert set(occupancy.state) == {AggState.FREE}
        assert data.port > 0
    finally:
        for close in reversed(closers):
            close()
