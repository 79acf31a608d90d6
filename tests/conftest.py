"""Fixtures shared by every test package: an in-process soft switch on loopback."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest
from p4ctl.softswitch import SoftSwitch

# Small enough that wildcard register reads stay cheap, large enough for a few jobs' slots.
TEST_AGGREGATORS = 256
TEST_LANES = 64
# Linux's UDP_GRO socket option (include/uapi/linux/udp.h), where the socket module lacks it.
UDP_GRO = getattr(socket, "UDP_GRO", 104)


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


@pytest.fixture
def gro_receiver() -> Iterator[socket.socket]:
    """A UDP socket on loopback with UDP_GRO on: a GSO run sent to it arrives as one payload
    (many datagrams' worth), single datagrams as themselves. Skips where the kernel refuses."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
        except OSError as exc:
            pytest.skip(f"no UDP_GRO here: {exc}")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(10.0)
        yield sock


def assert_arrival(sock: socket.socket, count: int, row: int, *, gso: bool) -> None:
    """`count` datagrams of `row` bytes reach `sock` (a `gro_receiver`): with `gso`, some of
    them coalesced into one payload (a GSO run); without, each as a payload of its own."""
    sizes: list[int] = []
    while sum(sizes) < count * row:
        sizes.append(len(sock.recv(65536)))
    assert sum(sizes) == count * row and all(size % row == 0 for size in sizes)
    if gso:
        assert max(sizes) > row
    else:
        assert sizes == [row] * count
