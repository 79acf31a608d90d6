"""`Service`: the running parts behind one app (job store, switch backend, PS, scheduler loop).

`open_service` opens the job store (migrated); `Service.start` takes the store's lock and leads:
it opens the data plane (`DataPlane`: the embedded soft switch, if any, and the PS), connects to
the switch as P4Runtime primary with its term's election id, re-syncs the switch and starts the
scheduling loop; `Service.stop` undoes all of it in reverse order.

With ``standby`` set, a service that finds the lock held does not fail: it serves reads from a
coordinator that never schedules, on the switch as a P4Runtime backup (a reader), while its
`api.coordinator.leader.Campaign` waits for the lock, and then leads as above. A leader that loses
the lock (the store restarted or is away) steps down to that standby view but keeps its data
plane: the workers of running jobs go on aggregating through it, and when the store answers the
next term re-connects to the same switch with a higher election id and re-syncs it. The data
plane stops only when another service turns out to lead the store, or at `stop`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from p4ctl.backend import Endpoint, InMemorySwitch, SwitchBackend
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from api.coordinator.admission import SubmitLimits
from api.coordinator.counters import TenantSwitchViews
from api.coordinator.events import EventBus
from api.coordinator.leader import Campaign, Lease, election_id, take_lease
from api.coordinator.plane import (
    DISCARD,
    DataPlane,
    close_all,
    endpoint,
    start_embedded_switch,
    start_ps,
    switch_client,
    switch_data_of,
)
from api.coordinator.quotas import QuotaDefaults
from api.coordinator.scheduling import Coordinator
from api.coordinator.streamwatch import StreamWatch
from api.coordinator.submissions import Submissions
from api.coordinator.topology import PsRegistry, Topology
from api.settings import Settings
from api.store.crud import get_state, put_state
from api.store.db import open_database
from api.store.health import StoreHealth
from api.store.lock import StoreInUse, StoreLock, lock_store, running_instance
from api.store.models import Job
from api.store.tokens import live_digests

if TYPE_CHECKING:
    from p4ctl.softswitch import SoftSwitch

__all__ = ["Service", "open_service"]

log = logging.getLogger(__name__)
DATA_PORT_KEY = "embedded_switch_data"


@dataclass
class Service:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    events: EventBus = field(default_factory=EventBus)
    # Store faults, logged once per episode (the HTTP answers and the loops report to it).
    health: StoreHealth = field(default_factory=StoreHealth)
    backend: SwitchBackend | None = None
    coordinator_: Coordinator | None = None
    store_lock: StoreLock | None = None
    # Set while this service leads: the term it holds.
    lease: Lease | None = None
    campaign: Campaign | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)
    # What the current term (leading, or the standby's read-only view) started, newest last.
    term: list[Callable[[], None]] = field(default_factory=list)
    given_backend: SwitchBackend | None = None
    # Job submissions' writer (group commit), from `start` to `stop`.
    submissions: Submissions | None = None
    # From the first term on, until another service leads or `stop`.
    plane: DataPlane | None = None

    @property
    def started(self) -> bool:
        return self.coordinator_ is not None

    @property
    def leading(self) -> bool:
        return self.lease is not None

    @property
    def coordinator(self) -> Coordinator:
        if self.coordinator_ is None:
            raise RuntimeError("the service is not started")
        return self.coordinator_

    def start(self, backend: SwitchBackend | None = None) -> None:
        """Lock the store and lead (`lead`), with `backend` instead of the settings' switch
        when given; raises `StoreInUse` while another service holds the store, unless the
        settings say ``standby``: then serve reads and take over when the lock frees."""
        self.given_backend = backend
        owner = _owner(self.settings)
        self.submissions = Submissions(
            self.sessions,
            on_stored=self._stored,
            limits=SubmitLimits.of_settings(self.settings.tenant),
            health=self.health,
        )
        watch = StreamWatch(self.events, self._live_digests)
        watch.start()
        self.closers.append(watch.stop)
        try:
            try:
                held: StoreLock | None = lock_store(
                    self.settings.resolved_database_url, owner=owner
                )
            except StoreInUse:
                if not self.settings.standby.enabled:
                    raise
                held = None
            if held is None:
                self._stand_by()
                log.info("standing by: another service leads this store")
            else:
                self.lead(held)
            self.campaign = Campaign(
                acquire=self._acquire,
                lead=self.lead,
                step_down=self._step_down,
                poll_s=self.settings.standby.poll_s,
                healthy=self._primary,
            )
            self.campaign.start(held)
        except BaseException:
            self.stop()
            raise

    def _live_digests(self, digests: Collection[str]) -> set[str]:
        with self.sessions() as session:
            return live_digests(session, digests=digests)

    def lead(self, lock: StoreLock) -> None:
        """Start a term with `lock` held: a new epoch, the data plane (the one kept from the
        last term, or a new one), the switch as primary with the term's election id, and the
        scheduling loop (which re-syncs the switch from the store)."""
        # The standby's view serves reads until the new term is ready, then goes; it stops
        # following the store's commits first, which the new term's coordinator must see.
        if self.coordinator_ is not None and not self.leading:
            self.coordinator_.stop(record=False)
        view, self.term = self.term, [lock.release]
        self.store_lock = lock
        kept = self.plane is not None
        try:
            lease = take_lease(self.sessions, holder=_owner(self.settings))
            election = election_id(lease.epoch)
            if self.plane is None:
                self.plane = self._open_plane()
            plane = self.plane
            backend = self._control(plane, election)
            coordinator = _coordinator(self, backend, plane.topology, plane.registry)
            coordinator.start()
            self.term.append(coordinator.stop)
        except BaseException:
            self._end_term()
            self.term = view
            raise
        self.backend, self.coordinator_, self.lease = backend, coordinator, lease
        close_all(view)
        log.info(
            "leading the store: epoch %d, P4Runtime election id %s%s",
            lease.epoch,
            election,
            " (the data plane kept from the last term)" if kept else "",
        )

    def _acquire(self) -> StoreLock:
        """Take the store's lock; a service that finds another leading stops the data plane it
        kept (that one's workers are the other's now)."""
        try:
            return lock_store(self.settings.resolved_database_url, owner=_owner(self.settings))
        except StoreInUse:
            if self.plane is not None and not self.leading:
                log.warning(
                    "another service leads this store now: this one's data plane (its embedded "
                    "switch, its PS) stops"
                )
                self._end_term()
                self.plane.close()
                self.plane = None
                self._stand_by()
            raise

    def _stored(self, jobs: Sequence[Job]) -> None:
        """New jobs are in the store: a decision round for them, and their events."""
        coordinator = self.coordinator_
        if coordinator is not None and self.leading:
            coordinator.active.written(job.id for job in jobs)
            # Published before the round is asked for: the round's newer state of a job must
            # come after (of pending events of one job, the stream gets the last published).
            coordinator.publish_jobs(jobs)
            coordinator.reschedule(wait=False)

    def _stand_by(self) -> None:
        """The read-only view of a standby: a coordinator that never starts, on the switch as
        a P4Runtime backup (reads only; the embedded switch of the data plane kept from the
        last term, if any), or on an empty in-memory pool."""
        settings = self.settings
        backend: SwitchBackend = InMemorySwitch(settings.switch.aggregators, settings.switch.lanes)
        external = settings.switch.target not in ("embedded", "memory")
        address = settings.switch.target if external else self.plane and self.plane.p4runtime
        if address and self.given_backend is None:
            from p4ctl.client import SwitchClient
            from p4ctl.errors import SwitchError

            try:
                reader = SwitchClient(
                    address,
                    device_id=settings.switch.device_id if external else 0,
                    election_id=None,
                    register_thrift=settings.switch.thrift if external else None,
                )
            except SwitchError as exc:
                log.warning("standing by without a view of the switch: %s", exc)
            else:
                self.term.append(reader.close)
                backend = reader
        topology = (
            self.plane.topology
            if self.plane is not None
            else Topology(
                switch_data=endpoint(settings.switch.data) or DISCARD,
                ps=endpoint(settings.ps.address) or DISCARD,
            )
        )
        view = _coordinator(self, backend, topology, None)
        # Never started, so never recorded as stopped; its stop ends what it follows.
        self.term.append(lambda: view.stop(record=False))
        self.backend, self.coordinator_ = backend, view

    def _primary(self) -> bool:
        """Whether the leader's switch session still makes it primary (a backend that is no
        P4Runtime client always does)."""
        from p4ctl.errors import SwitchError

        try:
            return not self.leading or bool(getattr(self.backend, "is_primary", True))
        except SwitchError:
            return False  # the client is closed

    def _step_down(self) -> None:
        """End a term whose lock was lost, without recording a clean stop (another service
        may lead already), and stand by; the data plane stays (`_acquire`)."""
        self.lease = None
        coordinator = self.coordinator_
        if coordinator is not None and self.term and self.term[-1] == coordinator.stop:
            self.term[-1] = lambda: coordinator.stop(record=False)
        self._end_term()
        self._stand_by()

    def _end_term(self) -> None:
        close_all(self.term)

    def _open_plane(self) -> DataPlane:
        """The data plane as the settings say: the embedded switch on the data port it had
        before (kept in the store, so the workers of running jobs can still reach it), and
        the PS."""
        settings = self.settings
        closers: list[Callable[[], None]] = []
        try:
            p4runtime = None
            fabric = None
            if settings.switch.topology is not None and self.given_backend is None:
                from api.coordinator.fabricplane import open_fabric

                fabric = open_fabric(settings, closers)
                switch_data = fabric.root_data
            elif self.given_backend is not None or settings.switch.target == "memory":
                switch_data = endpoint(settings.switch.data) or DISCARD
            elif settings.switch.target == "embedded":
                switch = self._embedded_switch(closers)
                p4runtime, switch_data = switch.p4runtime_address, Endpoint(*switch.data_address)
            else:
                switch_data = switch_data_of(settings)
            ps, registry = start_ps(settings, switch_data, closers)
        except BaseException:
            close_all(closers)
            raise
        return DataPlane(switch_data, ps, registry, p4runtime, closers, fabric)

    def _control(self, plane: DataPlane, election: tuple[int, int]) -> SwitchBackend:
        """The term's switch backend: the given one, a new in-memory switch, or a P4Runtime
        client with `election` (closed with the term)."""
        if self.given_backend is not None:
            return self.given_backend
        if plane.fabric is not None:
            from api.coordinator.fabricplane import connect_fabric

            return connect_fabric(plane.fabric, election, self.term)
        if self.settings.switch.target == "memory":
            return InMemorySwitch(self.settings.switch.aggregators, self.settings.switch.lanes)
        client = switch_client(self.settings, election, embedded=plane.p4runtime)
        self.term.append(client.close)
        return client

    def _embedded_switch(self, closers: list[Callable[[], None]]) -> SoftSwitch:
        settings = self.settings
        with self.sessions() as s:
            kept = (get_state(s, key=DATA_PORT_KEY) or {}).get("port")
        if settings.switch.data_port == 0 and isinstance(kept, int):
            try:
                pinned = settings.model_copy(
                    update={"switch": settings.switch.model_copy(update={"data_port": kept})}
                )
                switch = start_embedded_switch(pinned, closers)
            except OSError as exc:
                log.warning(
                    "the switch's data port %d is taken (%s): the workers of running jobs "
                    "cannot reach the switch on a new one",
                    kept,
                    exc,
                )
                switch = start_embedded_switch(settings, closers)
        else:
            try:
                switch = start_embedded_switch(settings, closers)
            except OSError as exc:
                raise OSError(
                    f"the embedded switch cannot bind its data port "
                    f"{settings.switch.data_port}: {exc}; INASCHED_SWITCH_DATA_PORT picks "
                    "another (0: any free one)"
                ) from exc
        with self.sessions() as s:
            put_state(s, key=DATA_PORT_KEY, value={"port": switch.data_address[1]})
            s.commit()
        return switch

    def stop(self) -> None:
        """Stop everything started, newest first; safe to call twice."""
        if self.submissions is not None:
            self.submissions.close()
        if self.campaign is not None:
            self.campaign.stop()
        self.events.close()
        self.coordinator_ = None
        self.lease = None
        self._end_term()
        if self.plane is not None:
            self.plane.close()
            self.plane = None
        close_all(self.closers)
        self.engine.dispose()


def open_service(settings: Settings) -> Service:
    """The job store of `settings`, opened and migrated; raises `DatabaseUnavailable`, or
    `StoreInUse` (before touching the store) while another service holds it."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if not settings.standby.enabled:
        lock_store(settings.resolved_database_url, owner=_owner(settings)).release()
    # The request threads, plus the decide, tick and releaser threads and a spare.
    pool = settings.http.threads + 4
    engine, sessions = open_database(settings.resolved_database_url, pool_size=pool)
    events = EventBus(
        max_per_tenant=settings.tenant.max_streams, tenant_view=TenantSwitchViews(sessions)
    )
    health = StoreHealth()
    health.watch(sessions)
    return Service(
        settings=settings, engine=engine, sessions=sessions, events=events, health=health
    )


def _owner(settings: Settings) -> str:
    return running_instance(f"http://{settings.http.host}:{settings.http.port}")


def _coordinator(
    service: Service, backend: SwitchBackend, topology: Topology, registry: PsRegistry | None
) -> Coordinator:
    s = service.settings
    return Coordinator(
        sessions=service.sessions,
        backend=backend,
        topology=topology,
        events=service.events,
        policy=s.policy,
        seed=s.seed,
        tick_s=s.tick_s,
        heartbeat_interval_s=s.heartbeat_interval_s,
        heartbeat_timeout_s=s.heartbeat_timeout_s,
        ps_registry=registry,
        quota=QuotaDefaults(s.tenant.max_jobs, s.tenant.aggregator_share),
        join_timeout_s=s.join_timeout_s,
        verify_progress=topology.switch_data != DISCARD,
        health=service.health,
    )
