"""Job submissions written in batches: one transaction for every submission that arrived while
the last batch was being written (group commit), on one writer thread.

A request (`Submissions.submit`, awaited on the event loop: no request thread) hands over its
token and body; the writer takes every submission waiting, checks their tokens in one read and
each size, inserts the new jobs in one Core INSERT (`api.store.crud.insert_jobs`) and commits
once, then answers each request on its own loop. Session set-up, the unit of work and the
commit are paid once a batch, and the token query is built once. What one submission does
wrong (an unknown token, a size over the limit) is answered to it alone. A batch whose commit
fails is written again one submission per transaction, so a failure stays with the
submission that caused it; unless the store is full or away (`api.store.health`): then every
submission of the batch gets that fault. Two submissions of one tenant with the same
``Idempotency-Key`` in one batch make one job: the second gets it as a retry would
(``join_token`` None).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from api.coordinator.admission import SubmitBuckets, SubmitLimits, check_submission
from api.coordinator.inputs import job_size
from api.schemas import JobCreate
from api.store.crud import create_job, insert_jobs, job_by_client_key, new_job
from api.store.health import StoreHealth
from api.store.models import Job
from api.store.tokens import Caller, live_caller, live_callers

__all__ = ["Submission", "Submissions", "Submitted", "SubmissionsClosed", "UnknownToken"]

log = logging.getLogger(__name__)

# Submissions per transaction at most: a burst is cut into batches that each answer within a
# few milliseconds.
MAX_BATCH = 256


class SubmissionsClosed(RuntimeError):
    """The service is stopping; the submission was not stored."""


class UnknownToken(Exception):
    """The submission's API token is unknown or revoked; nothing was stored."""


@dataclass(frozen=True, slots=True)
class Submission:
    """One ``POST /jobs``: the caller's API token, the body and its ``Idempotency-Key``."""

    api_token: str
    spec: JobCreate
    client_key: str | None
    max_gradient_bytes: int
    default_window: int


@dataclass(frozen=True, slots=True)
class Submitted:
    """The stored job; `join_token` None when the key named an earlier job (a retry)."""

    job: Job
    join_token: str | None
    gradient_bytes: int


_Outcome = Submitted | Exception


@dataclass(slots=True)
class _Waiting:
    submission: Submission
    loop: asyncio.AbstractEventLoop
    answer: asyncio.Future[_Outcome]


class Submissions:
    """The writer thread and its queue; `on_stored` gets each batch's new jobs after commit
    (written without the ORM's unit of work: its listeners do not see them)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        on_stored: Callable[[Sequence[Job]], None],
        limits: SubmitLimits | None = None,
        max_batch: int = MAX_BATCH,
        health: StoreHealth | None = None,
    ) -> None:
        self.sessions = sessions
        # Priority ceilings and submission rates (None: none); the buckets are this thread's.
        self.limits = limits
        self.buckets = SubmitBuckets()
        self.health = health or StoreHealth()
        self.on_stored = on_stored
        self.max_batch = max_batch
        self.batches = 0  # transactions that stored submissions, for tests and logs
        self._waiting: list[_Waiting] = []
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="inasched-submissions", daemon=True)
        self._thread.start()

    async def submit(self, submission: Submission) -> Submitted:
        """Store `submission` with the others waiting; raises `UnknownToken`, the input errors
        of `api.coordinator.inputs.job_size`, or `SubmissionsClosed`."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[_Outcome] = loop.create_future()
        with self._cv:
            if self._closed:
                raise SubmissionsClosed("the service is stopping; submit again once it is up")
            self._waiting.append(_Waiting(submission, loop, answer))
            self._cv.notify()
        outcome = await answer
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def close(self) -> None:
        """Write what is waiting, then stop; later submissions get `SubmissionsClosed`."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._waiting) or self._closed)
                batch = self._waiting[: self.max_batch]
                del self._waiting[: self.max_batch]
                if not batch and self._closed:
                    return
            outcomes = self._write(batch)
            for waiting, outcome in zip(batch, outcomes, strict=True):
                waiting.loop.call_soon_threadsafe(_answer, waiting.answer, outcome)

    def _write(self, batch: list[_Waiting]) -> list[_Outcome]:
        try:
            outcomes, stored = self._write_together(batch)
        except Exception as exc:
            if self.health.fault(exc) is not None:
                # The store is full or away: written alone, each would fail the same way.
                return [exc] * len(batch)
            log.warning("a batch of %d submissions failed; writing them one by one", len(batch))
            outcomes, stored = [], []
            for waiting in batch:
                try:
                    outcome, new = self._write_alone(waiting.submission)
                except Exception as exc:
                    if self.health.fault(exc) is None:
                        log.exception("storing a submission failed")
                    outcome, new = exc, []
                outcomes.append(outcome)
                stored += new
        if stored:
            try:
                self.on_stored(stored)
            except Exception:
                log.exception("after storing %d jobs", len(stored))
        return outcomes

    def _write_together(self, batch: list[_Waiting]) -> tuple[list[_Outcome], list[Job]]:
        outcomes: list[_Outcome] = []
        stored: list[Job] = []
        keyed: dict[tuple[int, str], Job] = {}
        # The tokens are read together first, and the new jobs go to the store in one INSERT
        # (`insert_jobs`: not through the ORM's unit of work, which cost more than the rest).
        with self.sessions() as session:
            callers = live_callers(session, tokens=[w.submission.api_token for w in batch])
            for waiting in batch:
                sub = waiting.submission
                try:
                    tenant_id, gradient_bytes = self._admissible(callers.get(sub.api_token), sub)
                except Exception as exc:
                    outcomes.append(exc)
                    continue
                key = None if sub.client_key is None else (tenant_id, sub.client_key)
                earlier = keyed.get(key) if key else None
                if key and earlier is None:
                    earlier = job_by_client_key(session, tenant_id=tenant_id, client_key=key[1])
                if earlier is not None:
                    outcomes.append(Submitted(earlier, None, gradient_bytes))
                    continue
                job, token = new_job(
                    tenant_id=tenant_id,
                    spec=sub.spec,
                    gradient_bytes=gradient_bytes,
                    window=sub.spec.window or sub.default_window,
                    client_key=sub.client_key,
                )
                if key:
                    keyed[key] = job
                stored.append(job)
                outcomes.append(Submitted(job, token, gradient_bytes))
            if stored:
                insert_jobs(session, stored)
            session.commit()
        if stored:
            self.batches += 1
        return outcomes, stored

    def _write_alone(self, sub: Submission) -> tuple[_Outcome, list[Job]]:
        with self.sessions() as session:
            try:
                tenant_id, gradient_bytes = self._admissible(
                    live_caller(session, token=sub.api_token), sub
                )
            except Exception as exc:
                return exc, []
            job, token = create_job(
                session,
                tenant_id=tenant_id,
                spec=sub.spec,
                gradient_bytes=gradient_bytes,
                window=sub.spec.window or sub.default_window,
                client_key=sub.client_key,
            )
        return Submitted(job, token, gradient_bytes), [] if token is None else [job]

    def _admissible(self, caller: Caller | None, sub: Submission) -> tuple[int, int]:
        """``(tenant id, gradient bytes)`` of `sub` sent by `caller` (None: its token is not a
        live one); raises `UnknownToken`, an input error, or the tenant's submission limits'
        `Forbidden`/`TooMany` (`api.coordinator.admission`)."""
        if caller is None:
            raise UnknownToken("unknown API token, or a revoked one")
        gradient_bytes = job_size(sub.spec, limit=sub.max_gradient_bytes)
        if self.limits is not None and not caller.admin:
            check_submission(
                tenant=caller.tenant.name,
                tenant_id=caller.tenant.id,
                priority_class=sub.spec.priority_class,
                limits=self.limits.of(caller.own),
                buckets=self.buckets,
            )
        return caller.tenant.id, gradient_bytes


def _answer(answer: asyncio.Future[_Outcome], outcome: _Outcome) -> None:
    # The request may be gone (its client hung up); its job is stored all the same.
    if not answer.done():
        answer.set_result(outcome)
