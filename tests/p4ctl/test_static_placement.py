"""Static placement (p4/PROTOCOL.md section 3) is one rule in Python and P4: masks on a
power-of-two partition, and a partition of any other size is refused or serves nothing."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from p4.v1 import p4runtime_pb2 as p4rt
from p4ctl.backend import Endpoint, JobInstall
from p4ctl.client_codec import P4Names, write_errors
from p4ctl.p4info import Sizing, build_p4info
from p4ctl.protocol import DropReason, Kind, Packet, Policy
from p4ctl.rule import JobConfig, check, static_index
from p4ctl.softswitch import SoftSwitch
from p4runtime_sh.p4runtime import P4RuntimeClient

AGGREGATORS = 1 << 20


@given(st.integers(0, 12), st.integers(0, 2**32 - 1), st.integers(0, 4096))
def test_static_index_is_seq_mod_and_div_part_size(log2: int, seq: int, base: int) -> None:
    size = 1 << log2
    cfg = JobConfig(1, Policy.STATIC, 2, part_base=base, part_size=size)
    shadow = (seq // size) % 2
    assert static_index(cfg, seq) == (base + shadow * size + seq % size, shadow)


@pytest.mark.parametrize("size", [0, 3, 6, 100])
def test_static_index_refuses_a_partition_that_is_not_a_power_of_two(size: int) -> None:
    cfg = JobConfig(1, Policy.STATIC, 2, part_base=0, part_size=size)
    with pytest.raises(ValueError, match="not a power of two"):
        static_index(cfg, 5)


@given(
    st.sampled_from([0, 3, 5, 6, 7, 100]),
    st.integers(0, 1023),
    st.integers(0, 1),
    st.integers(0, 2**32 - 1),
)
def test_a_partition_that_is_not_a_power_of_two_serves_no_fragment(
    size: int, index: int, shadow: int, seq: int
) -> None:
    # What fragment_check.p4 does with such a job table entry: no index is valid.
    cfg = JobConfig(1, Policy.STATIC, 2, part_base=0, part_size=size)
    pkt = Packet(
        kind=Kind.GRADIENT,
        job=1,
        worker=1,
        fan_in=2,
        agg_index=index,
        seq=seq,
        shadow=shadow,
        bitmap=2,
        lanes=np.zeros(4, dtype=np.int32),
    )
    assert check(pkt, cfg, AGGREGATORS) == DropReason.BAD_AGG_INDEX


def test_job_install_refuses_a_static_partition_that_is_not_a_power_of_two() -> None:
    ps = Endpoint("127.0.0.1", 9)
    with pytest.raises(ValueError, match="power of two.*partition_slots"):
        JobInstall(1, Policy.STATIC, 2, 0, 24, ps=ps)
    assert JobInstall(1, Policy.STATIC, 2, 0, 32, ps=ps).part_size == 32


def test_soft_switch_refuses_a_static_job_entry_that_is_not_a_power_of_two(
    soft_switch: SoftSwitch,
) -> None:
    info = build_p4info(Sizing(soft_switch.aggregators, soft_switch.lanes))
    names = P4Names(info)
    shell = P4RuntimeClient(0, soft_switch.p4runtime_address, (0, 1))
    try:
        request = p4rt.SetForwardingPipelineConfigRequest(
            device_id=0, action=p4rt.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        request.election_id.low = 1
        request.config.p4info.CopyFrom(info)
        shell.stub.SetForwardingPipelineConfig(request)
        params = {"policy": int(Policy.STATIC), "fan_in": 2, "part_base": 0, "part_size": 24}
        params |= {"mcast_group": 2, "ps_port": 9, "priority": 0}
        write = p4rt.WriteRequest(device_id=0)
        write.election_id.low = 1
        write.updates.add(
            type=p4rt.Update.INSERT,
            entity=names.table_entry("job_table", {"job": 1}, "set_job", params),
        )
        with pytest.raises(grpc.RpcError) as refused:
            shell.stub.Write(write)
        (error,) = write_errors(refused.value) or []
        assert error.code == "INVALID_ARGUMENT" and "not a power of two" in error.message
        assert soft_switch.pipeline.jobs == {}
    finally:
        shell.tear_down()
