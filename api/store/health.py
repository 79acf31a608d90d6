"""`StoreHealth`: what is wrong with the job store, said once per episode.

`store_fault` reads a database error as a `StoreFault` a client can act on: the store is full
(SQLite's ``SQLITE_FULL``, PostgreSQL's class 53 "insufficient resources"), or unreachable (a
refused or dropped connection, a server shutting down or starting up, a file that cannot be
opened or read); any other error is None, a bug that stays a 500 with its traceback.

An episode starts at the first fault and ends at the first commit that succeeds afterwards
(for "full", the first commit that wrote something): `StoreHealth` logs one line when it
starts and one when it ends, however many requests and rounds failed in between, and counts
the faults (`faults`, and `by_kind`), by which the reaper knows that heartbeats may have gone
unrecorded; `since` (wall clock) and `away_s` say when the open episode began, for ``GET
/leader`` and ``/metrics``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from api.outage import Outage
from api.store.db import DatabaseUnavailable

__all__ = ["KINDS", "StoreFault", "StoreHealth", "store_fault"]

log = logging.getLogger(__name__)

# Seconds a client waits before it asks again: a full disk needs an operator, an unreachable
# store is usually a restart of a few seconds.
RETRY_AFTER_S = {"full": 30, "unreachable": 5}
KINDS = tuple(RETRY_AFTER_S)
# SQLite's primary result codes (sqlite3.h) that say the file cannot take or give data.
_SQLITE_FULL = 13
_SQLITE_UNREACHABLE = {10, 14}  # SQLITE_IOERR, SQLITE_CANTOPEN


@dataclass(frozen=True, slots=True)
class StoreFault:
    """What is wrong with the store: `kind` "full" or "unreachable", and the driver's words."""

    kind: Literal["full", "unreachable"]
    reason: str

    @property
    def retry_after_s(self) -> int:
        return RETRY_AFTER_S[self.kind]

    @property
    def detail(self) -> str:
        """The answer's text: what is wrong, and what to do."""
        if self.kind == "full":
            return (
                f"store full: the job store cannot write ({self.reason}); nothing was changed. "
                "An operator must free space where the store keeps its data; ask again later"
            )
        return (
            f"store unreachable: the job store does not answer ({self.reason}); running jobs "
            f"keep training. Ask again in {self.retry_after_s} s"
        )


def store_fault(exc: BaseException) -> StoreFault | None:
    """The `StoreFault` that `exc` (raised by the store) shows, or None for any other error."""
    orig: Any = exc.orig if isinstance(exc, DBAPIError) else exc
    reason = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", 0) & 0xFF
        if code == _SQLITE_FULL:
            return StoreFault("full", reason)
        if code in _SQLITE_UNREACHABLE:
            return StoreFault("unreachable", reason)
        return None
    if isinstance(orig, psycopg.Error):
        state = orig.sqlstate or ""
        if state.startswith("53"):
            return StoreFault("full", reason)
        if isinstance(orig, psycopg.OperationalError) and state[:2] in ("", "08", "57"):
            return StoreFault("unreachable", reason)
        return None
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return StoreFault("unreachable", reason)
    if isinstance(exc, DatabaseUnavailable):
        return StoreFault("unreachable", reason)
    return None


class StoreHealth:
    """The episodes of store faults of one service (module docstring); thread-safe."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._outage = Outage(clock)
        self.current: StoreFault | None = None
        self.faults = 0  # every fault seen, episode or not
        self.by_kind = dict.fromkeys(KINDS, 0)
        self.episodes = 0

    @property
    def since(self) -> float | None:
        """Wall clock (time.time) of the open episode's start; None while the store answers."""
        return self._outage.since

    def fault(self, exc: BaseException) -> StoreFault | None:
        """Record `exc` if it is a store fault (`store_fault`); returns the fault, or None."""
        found = store_fault(exc)
        if found is None:
            return None
        with self._lock:
            self.faults += 1
            self.by_kind[found.kind] += 1
            other_kind = self.current is not None and self.current.kind != found.kind
            if self._outage.fail(new=other_kind):
                self.current = found
                self.episodes += 1
                log.error("%s", found.detail.split(". ")[0])
        return found

    def committed(self, *, wrote: bool) -> None:
        """A commit succeeded (`wrote`: with writes in it): a fault episode it disproves ends."""
        current = self.current
        if current is None or (current.kind == "full" and not wrote):
            return
        with self._lock:
            ended = self._outage.end()
            if ended is None or self.current is None:
                return
            lasted, refused = ended
            log.warning(
                "the job store answers again after %.0f s (store %s; %d operations refused)",
                lasted,
                self.current.kind,
                refused,
            )
            self.current = None

    def away_s(self) -> float:
        """Seconds since the open episode began; 0 while the store answers."""
        with self._lock:
            return self._outage.away_s()

    def watch(self, sessions: sessionmaker[Session]) -> None:
        """End episodes on the commits of `sessions` (writes seen by flushes and statements)."""

        def flushed(session: Session, _: Any) -> None:
            if session.new or session.dirty or session.deleted:
                session.info["wrote"] = True

        def executed(state: Any) -> Any:
            if state.is_insert:
                state.session.info["wrote"] = True
            if not (state.is_update or state.is_delete):
                return None
            result = state.invoke_statement()
            # An UPDATE that matched no row writes no page: it proves nothing about space.
            if getattr(result, "rowcount", 1) != 0:
                state.session.info["wrote"] = True
            return result

        def committed(session: Session) -> None:
            self.committed(wrote=bool(session.info.pop("wrote", False)))

        def rolled_back(session: Session, _: Any) -> None:
            session.info.pop("wrote", None)

        event.listen(sessions, "after_flush", flushed)
        event.listen(sessions, "do_orm_execute", executed)
        event.listen(sessions, "after_commit", committed)
        event.listen(sessions, "after_soft_rollback", rolled_back)
