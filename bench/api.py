"""Service benchmark: job submissions per second and latency with 50 concurrent clients,
against SQLite and PostgreSQL in one run.

    python -m bench.api [--quick] [--clients 50] [--jobs N] [--policy atp]
                        [--postgres-url URL] [--json FILE]

Each database gets a fresh service process (``inasched up --switch memory``: the in-memory
switch backend, so the figure is the service's own cost: HTTP, validation, the job store and a
scheduling round per submission), on a fresh SQLite file or a fresh PostgreSQL schema. The
clients run in this process on one asyncio loop with keep-alive connections. PostgreSQL is
measured when ``--postgres-url`` or ``INASCHED_TEST_POSTGRES_URL`` names a reachable server.
"""

from __future__ import annotations

import argparse
import asyncio
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from scheduler.registry import policy_names

__all__ = ["Result", "main", "measure"]

TOKEN_LINE = re.compile(r"token: (\S+)")
ROW = "{:<11} {:<6} {:>7} {:>6} {:>6} {:>8} {:>8} {:>8}"


@dataclass(frozen=True, slots=True)
class Result:
    database: str
    policy: str
    clients: int
    jobs: int
    errors: int
    submissions_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _service(database_url: str, data_dir: Path, policy: str) -> Iterator[tuple[str, str]]:
    """A service process on `database_url`; yields ``(base URL, tenant token)``."""
    port = _free_port()
    cmd = [sys.executable, "-m", "api.cli", "--log-level", "WARNING", "up", "--switch", "memory"]
    cmd += ["--port", str(port), "--data-dir", str(data_dir), "--database-url", database_url]
    cmd += ["--policy", policy]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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


async def _load(url: str, token: str, *, clients: int, jobs: int) -> tuple[list[float], int, float]:
    """Submit `jobs` jobs from `clients` concurrent clients; ``(latencies s, errors, wall s)``."""
    latencies: list[float] = []
    errors = 0
    remaining = iter(range(jobs))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=120) as http:

        async def client() -> None:
            nonlocal errors
            for i in remaining:
                body = {"name": f"bench-{i}", "n_workers": 4, "iterations": 100,
                        "gradient_bytes": 4_000_000}  # fmt: skip
                t0 = time.perf_counter()
                try:
                    response = await http.post("/jobs", json=body)
                except httpx.TransportError:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - t0)
                errors += response.status_code != 201

        await http.get("/healthz")
        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - start
    return latencies, errors, wall


def measure(
    database: str, database_url: str, *, policy: str, clients: int, jobs: int, data_dir: Path
) -> Result:
    """One measurement on a fresh service over `database_url`."""
    with _service(database_url, data_dir, policy) as (url, token):
        latencies, errors, wall = asyncio.run(_load(url, token, clients=clients, jobs=jobs))
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return Result(
        database=database,
        policy=policy,
        clients=clients,
        jobs=jobs,
        errors=errors,
        submissions_per_s=jobs / wall,
        p50_ms=statistics.median(ordered) * 1e3,
        p99_ms=p99 * 1e3,
        max_ms=ordered[-1] * 1e3,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints a table (and writes JSON); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.api", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer jobs (about a minute)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--jobs", type=int, help="submissions per database (default 2000)")
    parser.add_argument("--policy", default="atp", choices=policy_names())
    parser.add_argument("--postgres-url", default=os.environ.get("INASCHED_TEST_POSTGRES_URL"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    jobs = args.jobs or (500 if args.quick else 2000)
    results = []
    with tempfile.TemporaryDirectory(prefix="inasched-bench-api-") as tmp:
        sqlite_url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        results.append(
            measure(
                "sqlite",
                sqlite_url,
                policy=args.policy,
                clients=args.clients,
                jobs=jobs,
                data_dir=Path(tmp),
            )  # fmt: skip
        )
        if args.postgres_url:
            with _postgres_schema(args.postgres_url) as pg_url:
                results.append(
                    measure(
                        "postgresql",
                        pg_url,
                        policy=args.policy,
                        clients=args.clients,
                        jobs=jobs,
                        data_dir=Path(tmp),
                    )  # fmt: skip
                )
        else:
            print("PostgreSQL skipped: give --postgres-url or set INASCHED_TEST_POSTGRES_URL")
    header = ("database", "policy", "clients", "jobs", "errors", "subm/s", "p50 ms", "p99 ms")
    print(ROW.format(*header))
    for r in results:
        cells = (r.database, r.policy, r.clients, r.jobs, r.errors)
        figures = (f"{r.submissions_per_s:.1f}", f"{r.p50_ms:.1f}", f"{r.p99_ms:.1f}")
        print(ROW.format(*cells, *figures))
    if len(results) == 2:
        ratio = results[1].submissions_per_s / results[0].submissions_per_s
        print(f"postgresql / sqlite submissions per second: {ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0 if all(r.errors == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
