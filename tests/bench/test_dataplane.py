"""``bench.dataplane``: the fragments its senders send, a case that loses datagrams, and one
quick run's JSON."""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from p4ctl.protocol import Kind, Policy, decode
from p4ctl.rule import JobConfig, static_index

from bench.dataplane import Load, _row, main, measure_case
from bench.dataplane_peers import PEERS, Senders, Served, fragment_rows, stamp


def test_stamped_rows_are_the_static_jobs_fragments_for_their_seqs() -> None:
    rows = fragment_rows(worker=1, senders=2, lanes=64, window=4)
    cfg = JobConfig(1, Policy.STATIC, 2, part_base=0, part_size=4)
    order = stamp(rows, first=13, count=6)
    for i, row in enumerate(order):
        packet = decode(rows[row].tobytes(), 64)
        seq = 13 + i
        assert (packet.kind, packet.worker, packet.fan_in, packet.seq) == (Kind.GRADIENT, 1, 2, seq)
        assert (packet.agg_index, packet.shadow) == static_index(cfg, seq)


@contextlib.contextmanager
def _echo(drop_every: int) -> Iterator[tuple[str, int]]:
    """A UDP echo on loopback that sends every datagram back to its source, except every
    `drop_every`-th one (0: none)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        seen = 0
        while not stop.is_set():
            try:
                data, source = sock.recvfrom(65535)
            except TimeoutError:
                continue
            seen += 1
            if not drop_every or seen % drop_every:
                sock.sendto(data, source)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()
    finally:
        stop.set()
        thread.join()
        sock.close()


def test_a_case_that_loses_datagrams_reports_its_loss_and_the_next_case_runs() -> None:
    senders = Senders(1, timeout_s=0.2)
    # The switch's place is taken by an echo that drops, so that the case loses for sure.
    lossy, clean = PEERS
    try:
        with _echo(drop_every=5) as dropping, _echo(drop_every=0) as echo:
            served = {
                lossy: Served(dropping, None, os.getpid()),
                clean: Served(echo, None, os.getpid()),
            }
            load = Load(fragments=64, window=8)
            cases = [measure_case(64, 1, served, senders, load=load, repeats=2) for _ in range(2)]
    finally:
        senders.close()
    for record in cases:
        assert record.agg_sent > 0 and 0 < record.agg_lost <= record.agg_sent
        assert math.isnan(record.agg_fps) and all(math.isnan(x) for x in record.agg_runs)
        assert record.echo_lost == 0 and record.echo_sent == 2 * 64
        assert math.isfinite(record.echo_fps)
        assert f"{record.agg_lost:,}/{record.agg_sent:,}" in _row(record)


@pytest.mark.slow
def test_quick_run_writes_every_case(tmp_path: Path) -> None:
    out = tmp_path / "dataplane.json"
    assert main(["--quick", "--lanes", "64", "--senders", "2", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    records = document["records"]
    assert [(r["lanes"], r["senders"]) for r in records] == [(64, 2)]
    for record in records:
        assert {"agg_fps", "echo_fps", "agg_runs", "echo_runs", "ratio", "agg_cpu_us"} <= set(
            record
        )
        # What a run lost, if any, is counted beside its figures.
        assert record["agg_lost"] >= 0 and record["echo_lost"] >= 0
    assert [p["lanes"] for p in document["pipeline_fps"]] == [64]
