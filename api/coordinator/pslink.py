"""`PsLink`: the service's calls to its parameter server, and the PS's outages as episodes.

A job is admitted only once its PS took it (`register`, before the switch installs it): when
the PS cannot be reached or refuses, the job stays queued with the reason. An outage is an
episode: it starts at the first call that fails and ends at the first that succeeds, with one
log line at each end however many jobs and rounds it held back. Meanwhile a call fails at once
with the episode's reason, and one call per retry period (`RETRY_S`, doubling up to
`RETRY_MAX_S`) goes to the PS: `due` says when, and the coordinator runs a decision round then.
A job restored onto the switch after a restart keeps running while its PS is away; its
registration is owed (`restore`) and made again at each retry until the PS takes it. A drop
(`remove`) never raises: a PS that missed it keeps a registration that the next admission of
the same switch job id replaces (``fresh``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from p4ctl.backend import Endpoint

from api.coordinator.topology import PsRegistry
from api.outage import Outage
from scheduler.errors import PsUnavailable
from workers.ps_control import ControlError, RemotePs

__all__ = ["RETRY_MAX_S", "RETRY_S", "PsLink"]

log = logging.getLogger(__name__)

# A PS restarting comes back within seconds; a black-holed one costs a call's timeout per try,
# under the scheduling lock, so tries grow apart up to RETRY_MAX_S.
RETRY_S = 1.0
RETRY_MAX_S = 10.0
# A job's reason column holds 512 characters; the PS's words are cut to leave room around them.
_MAX_ERROR = 400


@dataclass(frozen=True, slots=True)
class _Registration:
    """A job's registration with its PS (switch job id, fan-in, window, policy name)."""

    job_id: int
    fan_in: int
    window: int
    policy: str


class PsLink:
    """The jobs' registrations with `registry` (the PS) for the switch at `switch`."""

    def __init__(
        self,
        registry: PsRegistry,
        *,
        switch: Endpoint,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.switch = (switch.host, switch.port)
        self.clock = clock
        if isinstance(registry, RemotePs):
            host, port = registry.address
            self.where = f"the PS's control channel at {host}:{port}"
        else:
            self.where = "the PS in this process"
        self._lock = threading.Lock()
        self._away: str | None = None  # the episode's last error; None while the PS takes calls
        self._outage = Outage(clock)
        self._retry_s = RETRY_S
        self._next_try = 0.0
        self._try = False  # the next call goes to the PS (a retry is due)
        self._owed: dict[int, _Registration] = {}  # restored jobs the PS has not taken yet
        self._jobs: dict[int, _Registration] = {}  # what each job was registered with
        # On a fabric: a job's switch (the top of its tree) and the switches below it.
        self._routes: dict[int, tuple[tuple[str, int], tuple[tuple[str, int], ...]]] = {}

    @property
    def away(self) -> str | None:
        """Why the PS does not take calls now (the last error), or None."""
        return self._away

    def away_s(self) -> float:
        """Seconds since the PS stopped taking calls; 0 while it takes them."""
        with self._lock:
            return self._outage.away_s()

    def register(self, job_id: int, fan_in: int, *, window: int, policy: str) -> None:
        """Have the PS serve a job newly admitted under switch job id `job_id` (whatever it
        kept under that id goes); raises `PsUnavailable` with the reason."""
        self._call(_Registration(job_id, fan_in, window, policy), fresh=True)

    def restore(self, job_id: int, fan_in: int, *, window: int, policy: str) -> None:
        """Register a job restored after a restart again (the PS keeps what it holds for it);
        never raises: a registration the PS did not take is owed and made at each retry."""
        registration = _Registration(job_id, fan_in, window, policy)
        try:
            self._call(registration, fresh=False)
        except PsUnavailable:
            with self._lock:
                self._owed[job_id] = registration

    def route(self, job_id: int, *, switch: Endpoint, children: tuple[Endpoint, ...]) -> None:
        """On a fabric, once a job's tree is known: its PS answers the top of the tree
        (`switch`) and takes packets from the switches below it too (`children`, the ToRs of
        a job across racks; ``p4/PROTOCOL.md`` 7.2). Never raises: owed while the PS is away."""
        with self._lock:
            self._routes[job_id] = (
                (switch.host, switch.port),
                tuple((c.host, c.port) for c in children),
            )
            registration = self._jobs.get(job_id)
        if registration is not None:
            try:
                self._call(registration, fresh=False)
            except PsUnavailable:
                with self._lock:
                    self._owed[job_id] = registration

    def remove(self, job_id: int) -> None:
        """Have the PS forget switch job `job_id`; never raises (see the module docstring)."""
        with self._lock:
            self._owed.pop(job_id, None)
            self._jobs.pop(job_id, None)
            self._routes.pop(job_id, None)
        try:
            self._call(None, job_id=job_id)
        except PsUnavailable as exc:
            log.debug("the PS did not forget switch job %d: %s", job_id, exc)

    def due(self) -> bool:
        """True once per retry period while the PS is away: the next call goes to the PS. The
        registrations owed are made first; the caller runs a decision round for the rest."""
        with self._lock:
            if self._away is None or self.clock() < self._next_try:
                return False
            self._try = True
            owed = list(self._owed.values())
        for registration in owed:
            try:
                self._call(registration, fresh=False)
            except PsUnavailable:
                break
            with self._lock:
                if self._owed.get(registration.job_id) == registration:
                    del self._owed[registration.job_id]
        return True

    def _call(
        self, registration: _Registration | None, *, fresh: bool = False, job_id: int = -1
    ) -> None:
        """Register `registration` (None: remove `job_id`) with the PS, or fail at once while
        it is away and no retry is due."""
        with self._lock:
            if self._away is not None and not self._try:
                raise PsUnavailable(self._away)
            self._try = False
            if registration is not None:
                self._jobs[registration.job_id] = registration
                switch, children = self._routes.get(registration.job_id, (self.switch, ()))
        try:
            if registration is None:
                self.registry.remove_job(job_id)
            else:
                self.registry.register_job(
                    registration.job_id,
                    registration.fan_in,
                    switch=switch,
                    window=registration.window,
                    policy=registration.policy,
                    fresh=fresh,
                    children=children,
                )
        except (ControlError, ValueError, OSError) as exc:
            error = str(exc)[:_MAX_ERROR]
            self._failed_with(error)
            raise PsUnavailable(error) from exc
        self._took()

    def _failed_with(self, error: str) -> None:
        with self._lock:
            began = self._outage.fail()
            self._retry_s = RETRY_S if began else min(2 * self._retry_s, RETRY_MAX_S)
            self._away = error
            self._next_try = self.clock() + self._retry_s
        if began:
            log.warning(
                "%s does not take jobs: %s. Jobs wait queued, with this reason, until it does "
                "(tried again every %g-%g s)",
                self.where,
                error,
                RETRY_S,
                RETRY_MAX_S,
            )

    def _took(self) -> None:
        with self._lock:
            ended = self._outage.end()
            if ended is None:
                return
            away_s, failed = ended
            self._away, self._try = None, False
        log.warning(
            "%s takes jobs again, after %.0f s away (%d calls failed meanwhile)",
            self.where,
            away_s,
            failed,
        )
