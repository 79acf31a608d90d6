"""`StoreLock`: one running service per job store.

Two services on one store would both re-sync its jobs onto a switch and both decide on them.
A service takes the store's lock before it touches the store, and holds it until it stops: a
file lock beside a SQLite file (``inasched.db.lock``, which names the holder), a session
advisory lock on PostgreSQL (keyed by database and schema; the holder is found in
``pg_stat_activity``). Both go away with the process that held them, even a killed one.

A host that dies, or a network that parts it from PostgreSQL, closes nothing: the lock session
turns on TCP keepalives at both ends (`KEEPALIVE`), so PostgreSQL frees the lock within about
``idle + interval * count`` seconds (8 s) of the last word from the holder, and the holder's
`StoreLock.alive` turns False within as long. A standby (`api.coordinator.leader`) takes the
lock then; the old holder is fenced off at the switch by the new leader's higher election id.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from api.store.db import DatabaseUnavailable, redacted

__all__ = ["StoreInUse", "StoreLock", "lock_store", "running_instance"]

# TCP keepalive of the lock's session, set at both ends: (idle s, probe interval s, probes).
KEEPALIVE = (5, 1, 3)
# What the other instance's stop and this one's refusal say to do.
ADVICE = (
    "stop it first, or give this one another store (--data-dir, or --database-url / "
    "INASCHED_DATABASE_URL)"
)


class StoreInUse(DatabaseUnavailable):
    """Another running service holds the store's lock; the message names it."""


def running_instance(listen: str) -> str:
    """How a service that listens at `listen` names itself to a second one."""
    return f"inasched pid {os.getpid()} on {socket.gethostname()}, serving {listen}"


class StoreLock:
    """A held store lock; `alive` says whether it is still held, `release` gives it up
    (idempotent)."""

    def __init__(
        self, release: Callable[[], None], alive: Callable[[], bool] = lambda: True
    ) -> None:
        self._release: Callable[[], None] | None = release
        self._alive = alive

    def alive(self) -> bool:
        """Whether the lock is still held (False once released, or once PostgreSQL ended its
        session: restarted, or parted from this host for longer than the keepalive)."""
        return self._release is not None and self._alive()

    def release(self) -> None:
        if self._release is not None:
            release, self._release = self._release, None
            release()


def lock_store(url: str, *, owner: str) -> StoreLock:
    """Take the lock of the store at `url` for `owner` (`running_instance`); raises
    `StoreInUse` naming the holder, or `DatabaseUnavailable`."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            return StoreLock(lambda: None)  # a private in-memory store has no other user
        return _lock_file(Path(parsed.database), owner)
    if parsed.get_backend_name() == "postgresql":
        return _lock_postgres(url, owner)
    return StoreLock(lambda: None)


def _lock_file(database: Path, owner: str) -> StoreLock:
    path = database.with_name(database.name + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode(errors="replace").strip() or "another inasched service"
        os.close(fd)
        raise StoreInUse(f"the store {database} is in use by {holder}; {ADVICE}") from None
    os.ftruncate(fd, 0)
    os.write(fd, owner.encode())

    def release() -> None:
        os.ftruncate(fd, 0)
        os.close(fd)  # closing the descriptor drops the flock

    return StoreLock(release)


def _advisory_key(database: str, schema: str) -> int:
    digest = hashlib.sha256(f"inasched store {database}.{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _lock_postgres(url: str, owner: str) -> StoreLock:
    conn, engine = _lock_connection(url)
    try:
        _take_advisory_lock(conn, url, owner)
    except BaseException:
        conn.close()
        engine.dispose()
        raise
    guard = threading.Lock()  # one statement at a time on the lock's connection

    def alive() -> bool:
        with guard:
            try:
                conn.execute(text("SELECT 1"))
                conn.commit()
            except Exception:
                return False
            return True

    def release() -> None:
        with guard:
            conn.close()  # ending the session drops its advisory lock
        engine.dispose()

    return StoreLock(release, alive)


def _lock_connection(url: str) -> tuple[Connection, Engine]:
    """A connection of its own, outside every pool, with TCP keepalives (the lock lives
    exactly as long as it does), and its engine; DatabaseUnavailable when it cannot open."""
    idle, interval, count = KEEPALIVE
    keepalive = {
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": interval,
        "keepalives_count": count,
        "tcp_user_timeout": (idle + interval * count) * 1000,
    }
    engine = create_engine(
        url, poolclass=NullPool, connect_args={"connect_timeout": 5, **keepalive}
    )
    try:
        return engine.connect(), engine
    except Exception as exc:
        engine.dispose()
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise DatabaseUnavailable(f"cannot use the database {redacted(url)}: {reason}") from exc


def _take_advisory_lock(conn: Connection, url: str, owner: str) -> None:
    """Take the store's advisory lock on `conn` with `owner` as the session's name, or raise
    StoreInUse naming who holds it."""
    idle, interval, count = KEEPALIVE
    database, schema = conn.execute(text("SELECT current_database(), current_schema()")).one()
    key = _advisory_key(database, schema)
    # Shown in pg_stat_activity, where a second service reads who holds the lock.
    conn.execute(text("SELECT set_config('application_name', :name, false)"), {"name": owner[:63]})
    # The server's side of the keepalive: it ends the session of a holder gone silent.
    for name, value in (
        ("tcp_keepalives_idle", idle),
        ("tcp_keepalives_interval", interval),
        ("tcp_keepalives_count", count),
    ):
        conn.execute(
            text("SELECT set_config(:name, :value, false)"), {"name": name, "value": str(value)}
        )
    taken = conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}).scalar()
    conn.commit()
    if not taken:
        holder = _postgres_holder(conn, key)
        raise StoreInUse(
            f"the store {redacted(url)} (schema {schema}) is in use by {holder}; {ADVICE}"
        )


def _postgres_holder(conn: Connection, key: int) -> str:
    row = conn.execute(
        text(
            "SELECT a.application_name, a.client_addr, a.pid FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.classid::bigint = :hi AND l.objid::bigint = :lo "
            "AND l.objsubid = 1"
        ),
        {"hi": (key >> 32) & 0xFFFFFFFF, "lo": key & 0xFFFFFFFF},
    ).first()
    if row is None:
        return "another inasched service"
    name, client, pid = row
    where = f" from {client}" if client else ""
    return f"{name or 'another inasched service'} (database session {pid}{where})"
