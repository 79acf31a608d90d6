"""Engine, sessions and schema migrations of the job store.

`open_database` builds an engine, proves the database answers and applies the Alembic
migrations under ``api/store/migrations`` (``alembic upgrade head``), so a service never runs on a
schema older than its code.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["DatabaseUnavailable", "migrate", "open_database", "redacted"]

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).with_name("migrations")


class DatabaseUnavailable(RuntimeError):
    """The database cannot be reached or migrated; the message is one line a user can act on."""


def redacted(url: str) -> str:
    """`url` with any password masked, for messages."""
    return make_url(url).render_as_string(hide_password=True)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers proceed while one writer commits; busy_timeout makes concurrent
    # writers wait instead of failing with "database is locked".
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")


def _serialised_writes() -> type[sqlite3.Connection]:
    """A `sqlite3.Connection` class whose write transactions take one lock, shared by every
    connection of that class, from their first write to their commit or rollback.

    SQLite admits one writer at a time and makes the others wait in its busy handler, which
    sleeps 1, 2, 5, ... 100 ms between tries: under 50 concurrent submissions a writer slept
    tens of milliseconds while the lock was long free. Waiting on a Python lock instead hands
    the database to the next writer as soon as the last one commits.
    """
    lock = threading.Lock()

    class SerialCursor(sqlite3.Cursor):
        def execute(self, sql: str, parameters: Any = (), /) -> SerialCursor:
            owner: SerialWrites = self.connection  # type: ignore[assignment]
            owner.before(sql)
            return super().execute(sql, parameters)

        def executemany(self, sql: str, parameters: Any, /) -> SerialCursor:
            owner: SerialWrites = self.connection  # type: ignore[assignment]
            owner.before(sql)
            return super().executemany(sql, parameters)

    class SerialWrites(sqlite3.Connection):
        holds = False

        def before(self, sql: str) -> None:
            if not self.holds and sql.lstrip()[:7].upper().startswith(_WRITES):
                lock.acquire()
                self.holds = True

        def after(self) -> None:
            if self.holds:
                self.holds = False
                lock.release()

        def cursor(self, factory: Any = SerialCursor) -> Any:
            return super().cursor(factory)

        def commit(self) -> None:
            try:
                super().commit()
            finally:
                self.after()

        def rollback(self) -> None:
            try:
                super().rollback()
            finally:
                self.after()

        def close(self) -> None:
            try:
                super().close()
            finally:
                self.after()

    return SerialWrites


def create_db_engine(
    url: str, *, connect_args: dict[str, Any] | None = None, pool_size: int = 20
) -> Engine:
    """An engine for `url` with `pool_size` connections (SQLite gets WAL and a busy timeout;
    its directory is created)."""
    parsed = make_url(url)
    args = dict(connect_args or {})
    # Every request thread and the service's own threads may hold a connection at once.
    kwargs: dict[str, Any] = {"pool_pre_ping": True, "pool_size": pool_size, "max_overflow": 10}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        else:
            del kwargs["pool_size"], kwargs["max_overflow"]  # one shared in-memory connection
        args.setdefault("timeout", 30)
        args.setdefault("factory", _serialised_writes())
        # A file never drops a connection: a ping would cost every checkout a statement.
        kwargs["pool_pre_ping"] = False
    else:
        args.setdefault("connect_timeout", 5)
    engine = create_engine(url, connect_args=args, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def migrate(engine: Engine) -> None:
    """Apply every migration not yet applied (``alembic upgrade head``) on `engine`."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def open_database(
    url: str, *, connect_args: dict[str, Any] | None = None, pool_size: int = 20
) -> tuple[Engine, sessionmaker[Session]]:
    """``(engine, session_factory)`` for `url`, migrated to head.

    Raises `DatabaseUnavailable` (one line, password masked) when the database does not answer.
    """
    try:
        engine = create_db_engine(url, connect_args=connect_args, pool_size=pool_size)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        migrate(engine)
    except (SQLAlchemyError, OSError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise DatabaseUnavailable(
            f"cannot use the database {redacted(url)}: {reason} "
            "(check INASCHED_DATABASE_URL and that the server is running)"
        ) from exc
    log.info("job store at %s", redacted(url))
    return engine, sessionmaker(engine, expire_on_commit=False)
