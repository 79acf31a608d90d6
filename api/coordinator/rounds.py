"""What makes a decision round cost in proportion to what changed, not to the jobs in the store.

`ActiveJobs` keeps the rows a round sees (every live job, and ended jobs still holding a switch
job id) in memory and re-reads only the jobs whose rows were committed since the last round:
a listener on the service's session factory collects the ids of the `Job` rows each
transaction flushed and hands them over once it commits. `ActiveJobs.to_apply` drops the
waits that change nothing and picks the few jobs the other decisions write, so that a queued
job whose reason did not change is neither applied nor loaded as an ORM object
(`api.coordinator.jobstore.SqlJobStore` answers for the others' unchanged jobs from their rows).
Each tenant's queued and holding jobs are kept here too: `hold_back` works per tenant on them,
and `quota_waits` leaves out waits already applied for the same reason to unchanged rows. A
queue reason is forgotten as its job leaves the queue (`take_unqueued`). `JobWaiters` lets an
async request wait for a job to change (a worker joining a queued job) without holding a
thread. The figures this gives are in ``docs/performance.md`` (``python -m bench.api``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any

from sqlalchemy import Row, event, or_, select
from sqlalchemy.orm import Session, sessionmaker

from api.coordinator.jobviews import VIEW_COLUMNS, QueueReasons, job_view
from api.coordinator.quotas import TenantQuota
from api.store.crud import in_chunks
from api.store.models import Job
from scheduler.applier import SwitchIds
from scheduler.memory import JobState
from scheduler.snapshot import Admit, Decision, JobView, Queue

__all__ = ["ACTIVE", "HOLDING", "ROUND_COLUMNS", "TERMINAL", "ActiveJobs", "JobWaiters"]

# A round's view of a job, and the reason stored on its row (to skip rewriting it).
ROUND_COLUMNS = (*VIEW_COLUMNS, Job.reason)
_PENDING = "inasched_flushed_jobs"
ACTIVE = tuple(s for s in JobState if not s.terminal)
TERMINAL = tuple(s for s in JobState if s.terminal)
HOLDING = tuple(s for s in JobState if s.holds_memory)


class ActiveJobs:
    """The jobs a decision round sees, kept up to date from the commits of `sessions`: their
    rows (`ROUND_COLUMNS`), `JobView`s, tenants, which are queued or ended, and each tenant's
    queued and holding (admitted or running) jobs.

    The first `refresh` (and the one after `reload`) selects them all; later ones select only
    the jobs committed since, so a round costs no query per unchanged job and builds no view
    for it. Only flushes of `sessions` are seen: whatever writes the store some other way must
    say what it wrote (`written`) or `reload` (the coordinator reloads every `FULL_READ_S` in
    case)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.rows: dict[int, Row[Any]] = {}
        self.views: dict[int, JobView] = {}
        self.tenant_of: dict[int, int] = {}
        self.ended: set[int] = set()  # ended, still holding a switch job id
        self.queued_of: dict[int, set[int]] = {}  # by tenant
        self.holding: Counter[int] = Counter()  # admitted or running jobs, by tenant
        # Left the queue since the last `take_unqueued` (their queue reasons can go).
        self._unqueued: set[int] = set()
        # By tenant: the reason its jobs held back by its job limit wait for (`quota_waits`),
        # and those of them whose rows say so since the last round.
        self._held: dict[int, tuple[str, set[int]]] = {}
        self._lock = threading.Lock()
        self._committed: set[int] = set()
        self._full = True
        self._hooks = (
            ("after_flush", self._flushed),
            ("after_commit", self._commit),
            ("after_rollback", self._rollback),
        )
        for name, hook in self._hooks:
            event.listen(sessions, name, hook)

    def close(self) -> None:
        """Stop listening to the session factory."""
        for name, hook in self._hooks:
            if event.contains(self.sessions, name, hook):
                event.remove(self.sessions, name, hook)

    def _flushed(self, session: Session, _context: object) -> None:
        ids = {o.id for o in (*session.new, *session.dirty, *session.deleted) if isinstance(o, Job)}
        if ids:
            session.info.setdefault(_PENDING, set()).update(ids)

    def _commit(self, session: Session) -> None:
        ids = session.info.pop(_PENDING, None)
        if ids:
            with self._lock:
                self._committed |= ids

    def _rollback(self, session: Session) -> None:
        session.info.pop(_PENDING, None)

    def written(self, job_ids: Iterable[int]) -> None:
        """Jobs committed without a flush of `sessions` (`api.store.crud.insert_jobs`): the next
        `refresh` reads them."""
        with self._lock:
            self._committed.update(job_ids)

    def reasons_written(self, rows: Iterable[Row[Any]]) -> None:
        """Hold `rows` (of `ROUND_COLUMNS`), which a round wrote and returned
        (`api.coordinator.jobstore.SqlJobStore.write_reasons`) and then committed: nobody reads
        them again.
        A row written by somebody else meanwhile is read again all the same: its commit said so.
        A job held back by its tenant's job limit that now waits, as its row says, for the
        reason `quota_waits` gave it stays among those waits applied (its row changed only by
        that wait), so the next round does not give it the same wait again."""
        for row in rows:
            why, applied = self._held.get(row.tenant_id, ("", set()))
            keep_applied = row.reason == why and row.id in applied
            self._forget(row.id)  # drops it from `applied`
            self._keep(row)
            if keep_applied:
                applied.add(row.id)

    def reload(self) -> None:
        """Have the next `refresh` select every row again."""
        with self._lock:
            self._full = True

    def refresh(self, s: Session) -> None:
        """Bring everything up to what is committed now, reading only what changed since the
        last call."""
        with self._lock:
            changed, self._committed = self._committed, set()
            full, self._full = self._full, False
        if full:
            rows = s.execute(
                select(*ROUND_COLUMNS).where(
                    or_(Job.state.in_(ACTIVE), Job.switch_job_id.is_not(None))
                )
            ).all()
            before, views, queued = self.rows, self.views, self.queued
            self.rows, self.views, self.tenant_of = {}, {}, {}
            self.ended, self.queued_of, self.holding, self._held = set(), {}, Counter(), {}
            for r in rows:
                self._keep(r, views.get(r.id) if before.get(r.id) == r else None)
            self._unqueued |= queued - self.queued
            return
        for chunk in in_chunks(changed):
            found = s.execute(select(*ROUND_COLUMNS).where(Job.id.in_(chunk))).all()
            for job_id in chunk:
                self._forget(job_id)
            for r in found:
                if r.state in ACTIVE or r.switch_job_id is not None:
                    self._keep(r)

    def _keep(self, row: Any, view: JobView | None = None) -> None:
        """Hold `row` (of `ROUND_COLUMNS`) and its `view` (built when None)."""
        job_id, tenant = row.id, row.tenant_id
        self.rows[job_id] = row
        self.views[job_id] = view or job_view(row)
        self.tenant_of[job_id] = tenant
        if row.state == JobState.QUEUED:
            self.queued_of.setdefault(tenant, set()).add(job_id)
            self._unqueued.discard(job_id)
        elif row.state in HOLDING:
            self.holding[tenant] += 1
        elif row.state in TERMINAL:
            self.ended.add(job_id)

    def _forget(self, job_id: int) -> None:
        row = self.rows.pop(job_id, None)
        if row is None:
            return
        tenant = self.tenant_of.pop(job_id)
        del self.views[job_id]
        if row.state == JobState.QUEUED:
            self._unqueued.add(job_id)
            queued = self.queued_of[tenant]
            queued.remove(job_id)
            if not queued:
                del self.queued_of[tenant]
            if (held := self._held.get(tenant)) is not None:
                held[1].discard(job_id)  # its row changed: it is looked at again
        elif row.state in HOLDING:
            self.holding[tenant] -= 1
            if not self.holding[tenant]:
                del self.holding[tenant]
        self.ended.discard(job_id)

    @property
    def queued(self) -> set[int]:
        """Every queued job (a copy)."""
        return set().union(*self.queued_of.values())

    def take_unqueued(self) -> set[int]:
        """The jobs that left the queue since the last call (or left the store)."""
        out, self._unqueued = self._unqueued, set()
        return out

    def quota_waits(self, held_back: Mapping[int, tuple[str, Sequence[int]]]) -> list[TenantQuota]:
        """The `TenantQuota` waits of `held_back` (`api.coordinator.quotas.hold_back`) that may
        change
        something: a job that waited, after the last round, for the same reason it is given
        now, and whose row has not changed since, is left out, so that a backlog held back
        by its tenant's job limit costs nothing a round. The coordinator has `refresh` read
        every row again after a round that failed, which forgets what was applied."""
        waits: list[TenantQuota] = []
        held: dict[int, tuple[str, set[int]]] = {}
        for tenant, (why, job_ids) in held_back.items():
            before = self._held.get(tenant)
            done = before[1] if before is not None and before[0] == why else set()
            waits += [TenantQuota(job_id, why) for job_id in job_ids if job_id not in done]
            held[tenant] = (why, set(job_ids))
        self._held = held
        return waits

    def to_apply(
        self, decisions: Sequence[Decision], ids: SwitchIds, reasons: QueueReasons
    ) -> tuple[list[Decision], set[int]]:
        """``(decisions, jobs to load)``: `decisions` without those that change nothing, and
        the jobs the rest will write, to load in one query.

        A queued job told again why it waits, as its row says, changes nothing; so does an
        admission while every switch job id is taken, of a job whose row says it waits for
        one (their reasons are recorded in `reasons` here). The `ended` jobs the round
        releases are loaded, and every kept decision's job but the waits of queued jobs and
        the admissions beyond the free ids: only their reasons change
        (`api.coordinator.jobstore.SqlJobStore.write_reasons`), unless the switch refuses an
        admission
        before them."""
        free = ids.size - len(ids.owners)
        # Ids are freed only under the round's lock: a table full now stays full.
        full = free <= 0
        no_ids = reasons.no_switch_job_id_message(ids.size)
        load = set(self.ended)
        kept: list[Decision] = []
        for d in decisions:
            row = self.rows.get(d.job_id)
            queued, waits = False, None  # why it waits, as its row says (None: not yet)
            if row is not None and row.state == JobState.QUEUED:
                queued, waits = True, row.reason
            if isinstance(d, Queue):
                if waits == reasons.queued(d.job_id, d).message:
                    continue
                if queued:  # only its reason changes, written without loading the job
                    kept.append(d)
                    continue
            elif isinstance(d, Admit):
                free -= 1
                if free < 0 and queued:  # beyond the free ids: it will wait for one
                    if full and waits == no_ids:  # as its row says
                        reasons.no_switch_job_id(d.job_id, ids.size)
                        continue
                    # Applied (an earlier one may be refused), not loaded: the store loads
                    # it if it is admitted after all, and writes its reason if not.
                    kept.append(d)
                    continue
            kept.append(d)
            load.add(d.job_id)
        return kept, load

    def ordered_views(
        self, starved: Mapping[int, float], *, leave_out: AbstractSet[int] = frozenset()
    ) -> list[JobView]:
        """Every `JobView` but those of `leave_out`, by job id, with the seconds each job
        starved (the aging input)."""
        views = self.views
        out = [views[job_id] for job_id in sorted(views.keys() - leave_out)]
        if starved:
            out = [
                v if (st := starved.get(v.job_id, 0.0)) == v.starved_s else replace(v, starved_s=st)
                for v in out
            ]
        return out


class JobWaiters:
    """Async waits for a change of a job, woken from any thread by `wake`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[int, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}

    @contextmanager
    def watch(self, job_id: int) -> Iterator[Callable[[float], Awaitable[None]]]:
        """Watch `job_id` from the running loop; yields an awaitable ``wait(timeout_s)`` that
        returns once the job changed after the watch began, or after `timeout_s`. Watching
        before checking the job means a change between the check and the wait is not missed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            self._waiting.setdefault(job_id, []).append(entry)

        async def wait(timeout_s: float) -> None:
            with suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(future), max(0.0, timeout_s))

        try:
            yield wait
        finally:
            with self._lock:
                entries = self._waiting.get(job_id, [])
                if entry in entries:
                    entries.remove(entry)
                if not entries:
                    self._waiting.pop(job_id, None)

    def wake(self, job_ids: Iterable[int]) -> None:
        """Wake every wait on `job_ids` (a no-op for jobs nobody waits on)."""
        with self._lock:
            if not self._waiting:
                return
            woken = [e for job_id in job_ids for e in self._waiting.pop(job_id, [])]
        for loop, future in woken:
            with suppress(RuntimeError):  # that loop has closed: its request is gone
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
