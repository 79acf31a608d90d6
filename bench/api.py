"""Service benchmark: job submissions per second and latency with 50 concurrent clients, on
an empty store and on one holding 5,000 active (mostly queued) jobs, against SQLite and
PostgreSQL in one run; and the decision round's time against the number of active jobs.

    python -m bench.api [--quick] [--clients 50] [--jobs N] [--backlog 5000] [--repeats R]
                        [--rate 500] [--policy atp] [--round-sizes 100,1000,5000]
                        [--postgres-url URL] [--busy-cores N] [--json FILE]

Each measurement gets a fresh service process (``inasched up --switch memory``: no data plane,
so the figure is the service's own cost) on a fresh SQLite file or PostgreSQL schema. The
clients run in this process on one asyncio loop, each on its own keep-alive connection. Three
measurements per store: as fast as answered, paced to ``--rate`` (latency counted from when
each job was due), and as fast as answered over the backlog, each with its ratio to its target
(500/s; p99 50 ms at 500/s; 200/s with the backlog). The run prints the cores and load
average before it; ``--busy-cores N`` keeps N cores busy throughout (``docs/performance.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from api.store.db import open_database
from bench.api_rounds import RoundTime, fill_store, round_times
from scheduler.registry import policy_names

__all__ = ["Result", "main", "measure"]

TOKEN_LINE = re.compile(r"token: (\S+)")
TARGET_SUBMISSIONS_PER_S = 500.0
TARGET_P99_MS = 50.0
TARGET_BACKLOG_SUBMISSIONS_PER_S = 200.0
SETTLE_S = 300.0  # how long the backlog's first rounds may take before the clients start


@dataclass(frozen=True, slots=True)
class Result:
    """One measurement: `backlog` active jobs in the store when the clients started, the
    clients offering `rate` submissions/s between them or (None) each sending its next job as
    soon as the last is answered; figures are the median over `repeats` fresh services, with
    the lowest and highest rates."""

    database: str
    policy: str
    clients: int
    jobs: int
    backlog: int
    rate: float | None  # the offered submissions/s; None: each client as fast as answered
    repeats: int
    errors: int
    submissions_per_s: float
    submissions_per_s_min: float
    submissions_per_s_max: float
    p50_ms: float
    p99_ms: float
    p99_ms_max: float
    max_ms: float

    @property
    def rate_ratio(self) -> float:
        """Submissions per second over its target (>= 1 meets it): the offered rate when the
        clients are paced, else the most the service must take."""
        if self.rate is not None:
            target = self.rate
        elif self.backlog:
            target = TARGET_BACKLOG_SUBMISSIONS_PER_S
        else:
            target = TARGET_SUBMISSIONS_PER_S
        return self.submissions_per_s / target

    @property
    def p99_ratio(self) -> float | None:
        """The p99 target over the p99 (>= 1 meets it); None where there is no p99 target:
        it holds at the target rate on the empty store. Clients that send as fast as they are
        answered wait ``clients / rate`` on average (Little's law: 100 ms for 50 clients at
        500/s), so a p99 there says how long the queue is, not how fast the service is."""
        if self.backlog or self.rate is None:
            return None
        return TARGET_P99_MS / max(self.p99_ms, 1e-9)


@contextmanager
def _busy(cores: int) -> Iterator[None]:
    """`cores` processes that spin until the block ends (killed and reaped then)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _service(
    database_url: str, data_dir: Path, policy: str, env: Mapping[str, str] | None = None
) -> Iterator[tuple[str, str]]:
    """A service process on `database_url` (with `env`'s settings too); yields ``(base URL,
    tenant token)``."""
    port = _free_port()
    cmd = [sys.executable, "-m", "cli", "--log-level", "WARNING", "up", "--switch", "memory"]
    cmd += ["--port", str(port), "--data-dir", str(data_dir), "--database-url", database_url]
    cmd += ["--policy", policy]
    # Admitted backlog jobs never see a worker: keep them admitted for the whole run. The one
    # tenant's clients stand for many tenants': no submission rate holds them.
    environment = {
        **os.environ,
        "INASCHED_JOIN_TIMEOUT_S": "86400",
        "INASCHED_TENANT_SUBMIT_RATE": "1000000",
        "INASCHED_TENANT_SUBMIT_BURST": "1000000",
        **(env or {}),
    }
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment
    )
    try:
        token = None
        assert proc.stdout is not None
        for line in proc.stdout:
            found = TOKEN_LINE.search(line)
            if found:
                token = found.group(1)
                break
        if token is None:
            raise RuntimeError(f"the service did not start (exit {proc.wait()})")
        # Keep reading its output: a full pipe would block the service's next log line.
        drain = threading.Thread(target=proc.stdout.read, daemon=True)
        drain.start()
        yield f"http://127.0.0.1:{port}", token
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def _postgres_schema(base: str) -> Iterator[str]:
    """`base` with a fresh schema as its search_path; the schema is dropped afterwards."""
    import psycopg
    from sqlalchemy.engine import make_url

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = make_url(base)
    plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        query = {"options": f"-csearch_path={schema}"}
        yield url.update_query_dict(query).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


class _Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads ``Content-Length``
    answers: a client that costs the benchmark tens of microseconds per request, where httpx
    cost it about 6 ms (so the clients, not the service, set the pace)."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.head = f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """``(status, body)``; raises `OSError` or `asyncio.IncompleteReadError`."""
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        request = (
            f"POST {path} HTTP/1.1\r\n{self.head}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.writer.write(request)
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.close()
            raise
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        answer = await self.reader.readexactly(length)
        return status, answer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _load(
    url: str, token: str, *, clients: int, jobs: int, rate: float | None = None
) -> tuple[list[float], int, float]:
    """Submit `jobs` jobs from `clients` concurrent clients; ``(latencies s, errors, wall s)``.

    Without `rate` each client sends its next job as soon as the last one is answered (the
    most the service takes). With `rate`, job ``n`` is due ``n / rate`` seconds after the start
    and goes to client ``n % clients``; its latency is counted from when it was due, so a
    client held up by a slow answer counts the wait too (no coordinated omission)."""
    latencies: list[float] = []
    errors = 0
    parsed = httpx.URL(url)
    host, port = parsed.host, parsed.port or 80
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def client(first: int) -> None:
        nonlocal errors
        conn = _Connection(host, port, token)
        try:
            for i in range(first, jobs, clients):
                body = json.dumps(
                    {
                        "name": f"bench-{i}",
                        "n_workers": 4,
                        "iterations": 100,
                        "gradient_bytes": 4_000_000,
                    }  # fmt: skip
                ).encode()
                if rate is None:
                    t0 = loop.time()
                else:
                    t0 = start + i / rate
                    await asyncio.sleep(max(0.0, t0 - loop.time()))
                try:
                    status, _ = await conn.post("/jobs", body)
                except (OSError, asyncio.IncompleteReadError):
                    errors += 1
                    conn.close()
                    continue
                latencies.append(loop.time() - t0)
                errors += status != 201
        finally:
            conn.close()

    await asyncio.gather(*(client(first) for first in range(clients)))
    wall = loop.time() - start
    return latencies, errors, wall


def _fill_backlog(database_url: str, jobs: int) -> None:
    """Fill the store with `jobs` queued jobs of a ``backlog`` tenant."""
    engine, sessions = open_database(database_url, pool_size=2)
    try:
        fill_store(sessions, tenant="backlog", jobs=jobs)
    finally:
        engine.dispose()


def _queued_reasons_known(database_url: str) -> bool:
    """True once no queued job waits for its first decision round (its reason is stored)."""
    from sqlalchemy import func, select

    from api.store.models import Job
    from scheduler.memory import JobState

    engine, sessions = open_database(database_url, pool_size=1)
    try:
        with sessions() as s:
            undecided = s.scalar(
                select(func.count())
                .select_from(Job)
                .where(Job.state == JobState.QUEUED, Job.reason.is_(None))
            )
    finally:
        engine.dispose()
    return not undecided


def _wait_for_backlog(database_url: str) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not _queued_reasons_known(database_url):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the backlog was not decided within {SETTLE_S:g} s")
        time.sleep(0.5)


def _once(
    database_url: str,
    *,
    policy: str,
    clients: int,
    jobs: int,
    backlog: int,
    rate: float | None,
    data_dir: Path,
) -> tuple[list[float], int, float]:
    if backlog:
        _fill_backlog(database_url, backlog)
    with _service(database_url, data_dir, policy) as (url, token):
        if backlog:
            _wait_for_backlog(database_url)
        # The clients' own garbage collections (one of 60 ms was logged in a paced run) would
        # count as the service's latency; what they allocate in a few seconds is small.
        gc.disable()
        try:
            return asyncio.run(_load(url, token, clients=clients, jobs=jobs, rate=rate))
        finally:
            gc.enable()


def measure(
    database: str,
    fresh_url: Callable[[], AbstractContextManager[str]],
    *,
    policy: str,
    clients: int,
    jobs: int,
    backlog: int = 0,
    rate: float | None = None,
    repeats: int = 1,
    data_dir: Path,
) -> Result:
    """`repeats` measurements, each on a fresh service over a fresh store from `fresh_url`
    (holding `backlog` active jobs when the clients start), the clients offering `rate`
    submissions/s (None: as many as the service answers)."""
    rates: list[float] = []
    p50s: list[float] = []
    p99s: list[float] = []
    worst = 0.0
    errors = 0
    for _ in range(repeats):
        with fresh_url() as url:
            latencies, failed, wall = _once(
                url,
                policy=policy,
                clients=clients,
                jobs=jobs,
                backlog=backlog,
                rate=rate,
                data_dir=data_dir,
            )
        ordered = sorted(latencies) or [0.0]
        rates.append(jobs / wall)
        p50s.append(statistics.median(ordered) * 1e3)
        p99s.append(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3)
        worst = max(worst, ordered[-1] * 1e3)
        errors += failed
    return Result(
        database=database,
        policy=policy,
        clients=clients,
        jobs=jobs,
        backlog=backlog,
        rate=rate,
        repeats=repeats,
        errors=errors,
        submissions_per_s=statistics.median(rates),
        submissions_per_s_min=min(rates),
        submissions_per_s_max=max(rates),
        p50_ms=statistics.median(p50s),
        p99_ms=statistics.median(p99s),
        p99_ms_max=max(p99s),
        max_ms=worst,
    )


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected sizes like 100,1000,5000") from None
    if not sizes or any(n < 1 for n in sizes) or list(sizes) != sorted(set(sizes)):
        raise argparse.ArgumentTypeError(f"{text!r}: expected increasing positive sizes")
    return sizes


def _whole(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r}: expected at least {low}")
        return value

    return parse


def _print_results(results: list[Result]) -> None:
    row = "{:<11} {:>7} {:>7} {:>7} {:>6} {:>6} {:>8} {:>15} {:>7} {:>7} {:>7} {:>8}"
    print(
        row.format(
            "database",
            "backlog",
            "offered",
            "clients",
            "jobs",
            "errors",
            "subm/s",
            "(min-max)",
            "p50 ms",
            "p99 ms",
            "x rate",
            "x p99",
        )  # fmt: skip
    )
    for r in results:
        spread = f"({r.submissions_per_s_min:.0f}-{r.submissions_per_s_max:.0f})"
        p99 = "-" if r.p99_ratio is None else f"{r.p99_ratio:.2f}"
        print(
            row.format(
                r.database,
                r.backlog,
                "max" if r.rate is None else f"{r.rate:g}/s",
                r.clients,
                r.jobs,
                r.errors,
                f"{r.submissions_per_s:.1f}",
                spread,
                f"{r.p50_ms:.1f}",
                f"{r.p99_ms:.1f}",
                f"{r.rate_ratio:.2f}",
                p99,
            )  # fmt: skip
        )
    print(
        f"offered max: each client sends its next job once answered; x rate: subm/s over "
        f"{TARGET_SUBMISSIONS_PER_S:g}/s (empty store) or {TARGET_BACKLOG_SUBMISSIONS_PER_S:g}/s "
        f"(backlog). offered N/s: the clients pace their jobs to N/s between them, latency "
        f"counted from when a job was due; x rate: subm/s over N; x p99: {TARGET_P99_MS:g} ms "
        "over p99. >= 1 meets the target"
    )


def _print_rounds(rounds: list[RoundTime]) -> None:
    row = "{:<11} {:>7} {:>7} {:>7} {:>11} {:>9} {:>13}"
    print("decision round after one submission, by active jobs:")
    print(
        row.format("database", "active", "queued", "rounds", "median ms", "max ms", "full read ms")
    )
    for r in rounds:
        print(
            row.format(
                r.database,
                r.active,
                r.queued,
                r.rounds,
                f"{r.median_ms:.1f}",
                f"{r.max_ms:.1f}",
                f"{r.full_read_ms:.1f}",
            )  # fmt: skip
        )
    print(
        "full read: a round with nothing new to admit, after reading every active row again "
        "(what every round read before)"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints tables (and writes JSON); returns the exit status."""
    args = _parser().parse_args(argv)
    machine = {
        "cores": os.cpu_count(),
        "load_before": round(os.getloadavg()[0], 2),
        "busy_cores": args.busy_cores,
    }
    with (
        tempfile.TemporaryDirectory(prefix="inasched-bench-api-") as tmp,
        _busy(args.busy_cores),
    ):
        results, round_rows = _measure_stores(args, Path(tmp))
    print(
        f"machine: {machine['cores']} cores, load average {machine['load_before']:.2f} before "
        f"the run, {machine['busy_cores']} kept busy by spinning processes during it"
    )
    _print_results(results)
    _print_rounds(round_rows)
    if args.json:
        body = {
            "machine": machine,
            "submissions": [
                {**asdict(r), "rate_ratio": r.rate_ratio, "p99_ratio": r.p99_ratio} for r in results
            ],
            "rounds": [asdict(r) for r in round_rows],
        }
        args.json.write_text(json.dumps(body, indent=2) + "\n")
    return 0 if all(r.errors == 0 for r in results) else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.api", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer jobs and repeats (1-2 min)")
    parser.add_argument("--clients", type=_whole(1), default=50)
    parser.add_argument("--jobs", type=_whole(1), help="submissions per measurement")
    parser.add_argument(
        "--backlog", type=_whole(1), default=5000, help="active jobs in the store (5000)"
    )
    parser.add_argument("--repeats", type=_whole(1), help="fresh services per measurement")
    parser.add_argument(
        "--rate",
        type=_whole(1),
        default=int(TARGET_SUBMISSIONS_PER_S),
        help="submissions/s the paced clients offer, for the p99 target (500)",
    )
    parser.add_argument("--round-sizes", type=_sizes, default=(100, 1000, 5000))
    parser.add_argument("--rounds", type=_whole(1), help="timed rounds per size")
    parser.add_argument("--policy", default="atp", choices=policy_names())
    parser.add_argument("--postgres-url", default=os.environ.get("INASCHED_TEST_POSTGRES_URL"))
    parser.add_argument(
        "--busy-cores",
        type=_whole(0),
        default=0,
        help="cores kept busy by spinning processes during the run (0)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser


def _stores(
    postgres_url: str | None, tmp: Path
) -> list[tuple[str, Callable[[], AbstractContextManager[str]]]]:
    """``(database, fresh)`` per store measured: `fresh` gives the URL of a fresh SQLite file
    in `tmp` or a fresh PostgreSQL schema each time it is entered."""
    counter = iter(range(10**6))

    @contextmanager
    def sqlite_url() -> Iterator[str]:
        yield f"sqlite:///{tmp / f'bench-{next(counter)}.db'}"

    stores: list[tuple[str, Callable[[], AbstractContextManager[str]]]] = [("sqlite", sqlite_url)]
    if postgres_url:
        base = postgres_url
        stores.append(("postgresql", lambda: _postgres_schema(base)))
    else:
        print("PostgreSQL skipped: give --postgres-url or set INASCHED_TEST_POSTGRES_URL")
    return stores


def _measure_stores(args: argparse.Namespace, tmp: Path) -> tuple[list[Result], list[RoundTime]]:
    """Per store: the three submission measurements (as fast as answered, paced to
    ``--rate``, over the backlog), then the decision rounds' times."""
    jobs = args.jobs or (2000 if args.quick else 5000)
    repeats = args.repeats or (1 if args.quick else 3)
    rounds = args.rounds or (10 if args.quick else 30)
    results: list[Result] = []
    round_rows: list[RoundTime] = []
    for database, fresh in _stores(args.postgres_url, tmp):
        for backlog, rate in ((0, None), (0, args.rate), (args.backlog, None)):
            results.append(
                measure(
                    database,
                    fresh,
                    policy=args.policy,
                    clients=args.clients,
                    jobs=jobs,
                    backlog=backlog,
                    rate=rate,
                    repeats=repeats,
                    data_dir=tmp,
                )  # fmt: skip
            )
        with fresh() as url:
            round_rows += round_times(
                database, url, policy=args.policy, sizes=args.round_sizes, rounds=rounds
            )
    return results, round_rows


if __name__ == "__main__":
    raise SystemExit(main())
