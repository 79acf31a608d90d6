"""The embedded soft switch is read and written over P4Runtime like any other target."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from p4ctl.client import SwitchClient
from p4ctl.protocol import AggState
from p4ctl.softswitch import SoftSwitch

from api.coordinator.plane import connect_switch, start_ps
from api.settings import Settings
from workers.ps import ParameterServer


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


def test_gso_off_in_the_settings_reaches_the_embedded_switch_and_ps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INASCHED_SWITCH_GSO", "off")
    settings = Settings(data_dir=tmp_path, switch={"aggregators": 64, "lanes": 64})
    assert settings.switch.gso is False
    closers: list[Callable[[], None]] = []
    try:
        _, data = connect_switch(settings, closers)
        _, ps = start_ps(settings, data, closers)
        switches = [
            c.__self__ for c in closers if isinstance(getattr(c, "__self__", None), SoftSwitch)
        ]
        assert [s.gso for s in switches] == [False]
        assert isinstance(ps, ParameterServer) and ps.gso is False
    finally:
        for close in reversed(closers):
            close()
