"""What open event streams cost everyone else: the service with none and with many open.

    python -m bench.streams [--streams 500] [--rate 100] [--jobs 1000] [--repeats 3] [--json FILE]

Each measurement gets a fresh service process (``inasched up --switch memory``, SQLite) with
`--streams` open ``/events`` streams of one tenant (or none), each read to the end by a process
of their own. Then 10 clients submit `--jobs` jobs paced to `--rate`/s, latency
counted from when each job was due (``bench.api``'s clients). From the service's ``/metrics``
before and after the load: the mean decision round and the mean scheduling tick (the pass that
watches the workers' heartbeats and publishes the switch view) over the load. Runs with and
without streams alternate; each row prints the median and [min-max] over `--repeats`, and the
ratio of the streams' figure to the figure without (the target: within 2x).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import re
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import httpx

from bench.api import _load, _service

__all__ = ["Sample", "main", "measure"]

CLIENTS = 10
TARGET_RATIO = 2.0
_SUM_COUNT = re.compile(r"^(inasched_\w+_seconds)_(sum|count) ([0-9.e+-]+)$", re.M)


@dataclass(frozen=True, slots=True)
class Sample:
    """One measurement: `streams` open, submission p99 (ms) at the paced rate, and the mean
    decision round and scheduling tick (ms) during the load."""

    streams: int
    p99_ms: float
    round_ms: float
    tick_ms: float
    errors: int


def _loop_seconds(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {f"{m[1]}_{m[2]}": float(m[3]) for m in _SUM_COUNT.finditer(text)}


def _mean_ms(before: dict[str, float], after: dict[str, float], name: str) -> float:
    count = after[f"{name}_count"] - before[f"{name}_count"]
    total = after[f"{name}_sum"] - before[f"{name}_sum"]
    return 1000 * total / count if count else float("nan")


async def _read_streams(url: str, token: str, count: int, ready: Connection) -> None:
    """Open `count` streams, say so on `ready`, and read each until the process ends."""
    parsed = httpx.URL(url)

    async def one(i: int, opened: asyncio.Queue[str]) -> None:
        reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
        writer.write(f"GET /events?token={token} HTTP/1.1\r\nHost: {parsed.host}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        await opened.put(head.splitlines()[0].decode())
        while await reader.read(65536):
            pass

    opened: asyncio.Queue[str] = asyncio.Queue()
    tasks = [asyncio.create_task(one(i, opened)) for i in range(count)]
    statuses = [await opened.get() for _ in range(count)]
    refused = [s for s in statuses if " 200 " not in s]
    ready.send(refused[0] if refused else "")
    await asyncio.gather(*tasks)


def _stream_process(url: str, token: str, count: int, ready: Connection) -> None:
    asyncio.run(_read_streams(url, token, count, ready))


def _with_streams(url: str, token: str, streams: int, rate: float, jobs: int) -> Sample:
    # The streams are read in a process of their own, so that reading them does not delay
    # this process's clients (whose latency is the figure).
    process = None
    if streams:
        ours, theirs = multiprocessing.Pipe()
        process = multiprocessing.Process(
            target=_stream_process, args=(url, token, streams, theirs), daemon=True
        )
        process.start()
        if not ours.poll(120):
            raise RuntimeError("the streams did not open within 120 s")
        refused = ours.recv()
        if refused:
            raise RuntimeError(f"a stream was refused: {refused}")
    try:
        time.sleep(2.0)  # the streams' first events, and a few ticks with them open
        before = _loop_seconds(url)
        latencies, errors, _ = asyncio.run(_load(url, token, clients=CLIENTS, jobs=jobs, rate=rate))
        after = _loop_seconds(url)
    finally:
        if process is not None:
            process.terminate()
            process.join(10)
    latencies.sort()
    return Sample(
        streams=streams,
        p99_ms=1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        round_ms=_mean_ms(before, after, "inasched_decision_round_seconds"),
        tick_ms=_mean_ms(before, after, "inasched_scheduling_tick_seconds"),
        errors=errors,
    )


def measure(*, streams: int, rate: float, jobs: int, data_dir: Path) -> Sample:
    """One measurement on a fresh service over a fresh SQLite store in `data_dir`."""
    database = f"sqlite:///{data_dir / 'inasched.db'}"
    env = {"INASCHED_TENANT_MAX_STREAMS": str(max(1, streams))}
    with _service(database, data_dir, "esa", env) as (url, token):
        return _with_streams(url, token, streams, rate, jobs)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} [{min(values):.2f}-{max(values):.2f}]"


def _report(samples: list[Sample], streams: int) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    print(f"{'':>10} {'p99 ms':>22} {'round ms':>22} {'tick ms':>22}")
    for count in (0, streams):
        mine = [s for s in samples if s.streams == count]
        cells = [[getattr(s, k) for s in mine] for k in ("p99_ms", "round_ms", "tick_ms")]
        print(f"{count:>4} strm " + " ".join(f"{_spread(c):>22}" for c in cells))
        rows[str(count)] = {
            k: statistics.median(c)
            for k, c in zip(("p99_ms", "round_ms", "tick_ms"), cells, strict=True)
        }
    for key in ("p99_ms", "round_ms", "tick_ms"):
        ratio = rows[str(streams)][key] / rows["0"][key]
        verdict = "within" if ratio <= TARGET_RATIO else "over"
        print(f"{key}: {streams} streams / none = {ratio:.2f} ({verdict} {TARGET_RATIO:g}x)")
        rows.setdefault("ratio", {})[key] = ratio
    return rows


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__)
    parser.add_argument("--streams", type=int, default=500, help="open streams (default 500)")
    parser.add_argument("--rate", type=float, default=100.0, help="submissions/s (default 100)")
    parser.add_argument("--jobs", type=int, default=1000, help="submissions per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per case")
    parser.add_argument("--json", type=Path, help="also write the samples and medians here")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints the table (and writes JSON); returns the exit status."""
    args = _parser().parse_args(argv)
    if args.streams < 1 or args.rate <= 0 or args.jobs < 1 or args.repeats < 1:
        _parser().error("--streams, --rate, --jobs and --repeats must be positive")
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="inasched-bench-streams-") as tmp:
        for i in range(args.repeats):
            for streams in (0, args.streams):
                folder = Path(tmp) / f"{i}-{streams}"
                folder.mkdir()
                sample = measure(streams=streams, rate=args.rate, jobs=args.jobs, data_dir=folder)
                print(f"  {sample}", file=sys.stderr)
                samples.append(sample)
    rows = _report(samples, args.streams)
    if args.json:
        document = {"samples": [asdict(s) for s in samples], "medians": rows}
        args.json.write_text(json.dumps(document, indent=2))
    return 0 if all(s.errors == 0 for s in samples) else 1


if __name__ == "__main__":
    raise SystemExit(main())
