"""Leader and standby: which of the services on one store schedules, and how another takes over.

The service that holds the store's lock (`api.store.lock`) leads: it schedules, and it is the
switch's P4Runtime primary. Each time a service takes the lock it bumps the store's lease row
(`take_lease`, in one transaction under the lock), and its election id is that epoch
(`election_id`), so every new leader's id is higher than any earlier one's: the switch takes it
as primary at once and refuses the writes of an old leader that has not yet noticed it lost
its lock (PERMISSION_DENIED).

`Campaign` is the thread that waits: a standby tries the lock every `poll_s` and leads once it
has it; a leader checks every `poll_s` that it still holds the lock, and steps down when it
does not (a store that went away is said once per outage, not once per try). A leader whose
term is broken (`healthy` False: the switch restarted) steps down too and campaigns again at
once, so the next term connects and re-syncs the switch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.store.crud import get_state, put_state
from api.store.db import DatabaseUnavailable
from api.store.lock import StoreInUse, StoreLock

__all__ = ["LEASE_KEY", "Campaign", "Lease", "current_lease", "election_id", "take_lease"]

log = logging.getLogger(__name__)

LEASE_KEY = "leader"


@dataclass(frozen=True, slots=True)
class Lease:
    """A leadership term: its `epoch` (1, 2, ...), who holds it, and since when (epoch s)."""

    epoch: int
    holder: str
    since: float


def election_id(epoch: int) -> tuple[int, int]:
    """The P4Runtime election id ``(high, low)`` of a leader of `epoch`.

    The epoch is the high word: tools and tests that open a P4Runtime session with a small
    election id (p4runtime-shell's ``(0, 1)``, a reader's ``(0, 9)``) stay below every leader, so
    they can never take primacy from a running service."""
    return epoch, 0


def current_lease(sessions: sessionmaker[Session]) -> Lease | None:
    """The latest leadership term recorded in the store, or None before the first."""
    with sessions() as s:
        value = get_state(s, key=LEASE_KEY)
    if not value:
        return None
    return Lease(int(value["epoch"]), str(value["holder"]), float(value["since"]))


def take_lease(
    sessions: sessionmaker[Session], *, holder: str, clock: Callable[[], float] = time.time
) -> Lease:
    """Start a new term for `holder`, who holds the store's lock: the epoch after the last."""
    with sessions() as s:
        last = get_state(s, key=LEASE_KEY) or {}
        lease = Lease(int(last.get("epoch", 0)) + 1, holder, clock())
        put_state(
            s, key=LEASE_KEY, value={"epoch": lease.epoch, "holder": holder, "since": lease.since}
        )
        s.commit()
    return lease


class Campaign:
    """One thread: wait for the store's lock, lead, step down when the lock is lost, wait again.

    `acquire` takes the lock or raises `StoreInUse` (or `DatabaseUnavailable`); `lead(lock)`
    starts a term (raising leaves the lock released and the campaign waiting again);
    `step_down()` ends the term of a lock that was lost. `stop` ends the thread (a term in
    progress is left to the caller to end)."""

    def __init__(
        self,
        *,
        acquire: Callable[[], StoreLock],
        lead: Callable[[StoreLock], None],
        step_down: Callable[[], None],
        poll_s: float,
        healthy: Callable[[], bool] = lambda: True,
    ) -> None:
        self._acquire = acquire
        self._lead = lead
        self._step_down = step_down
        self._healthy = healthy
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._store_away = False

    def start(self, held: StoreLock | None) -> None:
        """Run, leading already with `held` or standing by when None."""
        self._thread = threading.Thread(
            target=self._run, args=(held,), name="inasched-leader", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # A takeover in progress (switch connection, re-sync) finishes first.
            self._thread.join(timeout=60)

    def _run(self, held: StoreLock | None) -> None:
        lock = held
        while not self._stop.is_set():
            if lock is None:
                lock = self._try_lead()
                if lock is None:
                    self._stop.wait(self.poll_s)
                continue
            if self._stop.wait(self.poll_s):
                return
            if not lock.alive():
                log.error(
                    "this service lost the store's lock (the database restarted, or ended "
                    "the lock's session): stepping down to standby; its data plane keeps "
                    "forwarding, and it leads again when the store answers"
                )
                try:
                    self._step_down()
                except Exception:
                    log.exception("error while stepping down")
                lock.release()
                lock = None
            elif not self._healthy():
                log.error(
                    "this service is no longer the switch's primary (the switch restarted, or "
                    "its session ended): stepping down to campaign again"
                )
                try:
                    self._step_down()
                except Exception:
                    log.exception("error while stepping down")
                lock.release()
                lock = self._try_lead()

    def _try_lead(self) -> StoreLock | None:
        try:
            lock = self._acquire()
        except StoreInUse:
            return None
        except (DatabaseUnavailable, SQLAlchemyError) as exc:
            if not self._store_away:  # once per outage, not once per poll
                log.warning("standing by: the store is away (%s)", exc)
            self._store_away = True
            return None
        self._store_away = False
        return self._lead_with(lock)

    def _lead_with(self, lock: StoreLock) -> StoreLock | None:
        """Lead with `lock`; None (the lock released) when that failed or the campaign ends."""
        if self._stop.is_set():
            lock.release()
            return None
        try:
            self._lead(lock)
        except Exception as exc:
            # E.g. the switch is away: the next poll tries again, with a new term.
            log.error("could not take over (%s); standing by again", exc)
            lock.release()
            return None
        return lock
