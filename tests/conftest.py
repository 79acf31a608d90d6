"""Fixtures shared by every test package: an in-process soft switch on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from p4ctl.engine import DATAPATH_ENV
from p4ctl.softswitch import SoftSwitch

# Small enough that wildcard register reads stay cheap, large enough for a few jobs' slots.
TEST_AGGREGATORS = 256
TEST_LANES = 64


@pytest.fixture(params=["engine", "python"])
def datapath(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once on each data path (``p4ctl.engine``): every switch, client and PS
    the test makes follows ``INASCHED_DATAPATH``. The engine must be built: a missing
    extension fails the engine runs rather than skipping them."""
    monkeypatch.setenv(DATAPATH_ENV, request.param)
    return str(request.param)


@pytest.fixture
def soft_switch() -> Iterator[SoftSwitch]:
    """A started `SoftSwitch` (256 aggregators x 64 lanes, no pipeline set yet) on ephemeral
    loopback ports: ``.data_address`` is ``(host, port)``, ``.p4runtime_address`` "host:port"."""
    with SoftSwitch(aggregators=TEST_AGGREGATORS, lanes=TEST_LANES) as switch:
        yield switch


@pytest.fixture
def make_soft_switch() -> Iterator[Callable[..., SoftSwitch]]:
    """A factory of started soft switches with any `SoftSwitch` keyword arguments; every
    switch it made is stopped at teardown."""
    made: list[SoftSwitch] = []

    def make(**kwargs: object) -> SoftSwitch:
        switch = SoftSwitch(**kwargs).start()  # type: ignore[arg-type]
        made.append(switch)
        return switch

    yield make
    for switch in made:
        switch.stop()
