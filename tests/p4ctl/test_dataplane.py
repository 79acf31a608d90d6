"""The soft switch's data plane over real UDP sockets: what a burst's pass emits to one worker
leaves as a UDP GSO run, or with GSO off as one datagram per result."""

from __future__ import annotations

import socket

import numpy as np
import pytest
from p4ctl.backend import Endpoint, InMemorySwitch, JobInstall
from p4ctl.dataplane import DataPlane
from p4ctl.protocol import HEADER_SIZE, Kind, Packet, Policy, encode

from tests.conftest import assert_arrival

LANES = 64
FRAGMENTS = 16


@pytest.mark.parametrize("gso", [True, False], ids=["gso-on", "gso-off"])
def test_gso_off_sends_every_result_as_a_datagram_of_its_own(
    gro_receiver: socket.socket, gso: bool
) -> None:
    # One worker of a static job: each gradient completes its slot, and its result is
    # multicast back to the worker, a receiver with UDP_GRO (as a veth or TAP delivers them).
    switch = InMemorySwitch(64, LANES)
    switch.install_job(JobInstall(2, Policy.STATIC, 1, 0, FRAGMENTS, ps=Endpoint("127.0.0.1", 9)))
    switch.add_worker(2, 0, Endpoint(*gro_receiver.getsockname()))
    dataplane = DataPlane(switch.pipeline, gso=gso)
    try:
        lanes = np.arange(LANES, dtype=np.int32)
        for seq in range(FRAGMENTS):
            gradient = Packet(
                kind=Kind.GRADIENT, job=2, fan_in=1, agg_index=seq, seq=seq, bitmap=1, lanes=lanes
            )
            gro_receiver.sendto(encode(gradient), dataplane.address)
        dataplane.start()  # the first burst holds every gradient: one pass, one send
        assert_arrival(gro_receiver, FRAGMENTS, HEADER_SIZE + 4 * LANES, gso=gso)
    finally:
        dataplane.stop()
