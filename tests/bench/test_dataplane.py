"""``bench.dataplane``: the fragments its senders send, and one quick run's JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from p4ctl.protocol import Kind, Policy, decode
from p4ctl.rule import JobConfig, static_index

from bench.dataplane import main
from bench.dataplane_peers import fragment_rows, stamp


def test_stamped_rows_are_the_static_jobs_fragments_for_their_seqs() -> None:
    rows = fragment_rows(worker=1, senders=2, lanes=64, window=4)
    cfg = JobConfig(1, Policy.STATIC, 2, part_base=0, part_size=4)
    order = stamp(rows, first=13, count=6)
    for i, row in enumerate(order):
        packet = decode(rows[row].tobytes(), 64)
        seq = 13 + i
        assert (packet.kind, packet.worker, packet.fan_in, packet.seq) == (Kind.GRADIENT, 1, 2, seq)
        assert (packet.agg_index, packet.shadow) == static_index(cfg, seq)


@pytest.mark.slow
def test_quick_run_writes_both_data_paths_for_every_case(tmp_path: Path) -> None:
    out = tmp_path / "dataplane.json"
    assert main(["--quick", "--lanes", "64", "--senders", "2", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    records = document["records"]
    assert {(r["lanes"], r["senders"], r["datapath"]) for r in records} == {
        (64, 2, "engine"),
        (64, 2, "python"),
    }
    for record in records:
        assert {"agg_fps", "echo_fps", "agg_runs", "echo_runs", "ratio", "agg_cpu_us"} <= set(
            record
        )
        # A NaN would be a run whose senders stalled on a lost datagram.
        assert all(math.isfinite(x) for x in record["agg_runs"] + record["echo_runs"])
    passes = {(p["lanes"], p["datapath"]) for p in document["pipeline_fps"]}
    assert passes == {(64, "engine"), (64, "python")}
