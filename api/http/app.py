"""`create_app(settings)`: the FastAPI application of the service.

The job store is opened (and migrated) here, so a bad database fails before anything listens;
the switch, the PS and the scheduling loop start with the app's lifespan and stop with it.

A standby (``INASCHED_STANDBY_ENABLED``, `api.coordinator.runtime`) serves reads; every write
(POST, PUT, PATCH, DELETE) answers 503 naming the leader, with Retry-After
(`StandbyRefusesWrites`); while the store does not answer, the 503 says so instead
(`api.store.health`), as every route's does.
``GET /leader`` answers 200 on the leader and 503 on a standby: the health check by which a load
balancer in front of both sends every request to the leader; its body also says whether the
job store answers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Literal

from anyio import to_thread
from fastapi import APIRouter, FastAPI, Response
from fastapi.staticfiles import StaticFiles
from p4ctl.backend import SwitchBackend
from pydantic import BaseModel, Field
from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.coordinator.leader import Lease, current_lease
from api.coordinator.runtime import Service, open_service
from api.errors import ServiceError, StoreFailed, install_handlers
from api.http.docs import install_docs
from api.http.routes import (
    UNAUTHORIZED,
    UNAVAILABLE,
    bench,
    events,
    jobs,
    limits,
    metrics,
    policy,
    queue,
    switch,
    tokens,
    workers,
)
from api.settings import Settings
from api.store.db import DatabaseUnavailable
from scheduler.workload import model_table

__all__ = [
    "BodyLimit",
    "LeaderPublic",
    "NotLeading",
    "StandbyRefusesWrites",
    "create_app",
    "write_refusal",
]

log = logging.getLogger(__name__)
# A benchmark run carries every job row of its jobs.csv; everything else is a few hundred bytes.
LARGE_BODIES = {"/bench/runs": 32 * 1024 * 1024}


WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Seconds a client waits before it asks again: a standby tries the lock every
# INASCHED_STANDBY_POLL_S (0.5 s) and a takeover re-syncs the switch in about a second.
RETRY_AFTER_S = 2


class StorePublic(BaseModel):
    """The job store as this service's last operation on it found it (`api.store.health`)."""

    state: Literal["reachable", "full", "unreachable"]
    since: datetime | None = Field(default=None, description="when it became full or unreachable")
    detail: str | None = Field(default=None, description="what is wrong, in the driver's words")


class LeaderPublic(BaseModel):
    """Whether this service leads, the latest term the store records, and the store's state."""

    role: Literal["leader", "standby"]
    epoch: int | None = None
    leader: str | None = None
    since: datetime | None = None
    store: StorePublic


def _store_public(service: Service) -> StorePublic:
    fault, since = service.health.current, service.health.since
    if fault is None or since is None:
        return StorePublic(state="reachable")
    return StorePublic(
        state=fault.kind, since=datetime.fromtimestamp(since, UTC), detail=fault.reason
    )


def _leader_public(service: Service) -> LeaderPublic:
    try:
        lease: Lease | None = service.lease or current_lease(service.sessions)
    except (SQLAlchemyError, DatabaseUnavailable) as exc:
        service.health.fault(exc)
        lease = None  # the store is away: who leads is unknown
    role: Literal["leader", "standby"] = "leader" if service.leading else "standby"
    store = _store_public(service)
    if lease is None:
        return LeaderPublic(role=role, store=store)
    since = datetime.fromtimestamp(lease.since, UTC)
    return LeaderPublic(role=role, epoch=lease.epoch, leader=lease.holder, since=since, store=store)


class NotLeading(ServiceError):
    """503: this service is a standby; the detail names the leader."""

    status = 503

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(RETRY_AFTER_S)}


def write_refusal(service: Service) -> ServiceError:
    """Why this service, which does not lead now, takes no write: the store is away or full
    (`StoreFailed`), or another service leads (`NotLeading`, naming it)."""
    try:
        lease = current_lease(service.sessions)
    except SQLAlchemyError as exc:
        fault = service.health.fault(exc)
        if fault is None:
            raise
        return StoreFailed(fault)
    leader = (
        f"the leader is {lease.holder} (term {lease.epoch})"
        if lease is not None
        else "no service has led this store yet"
    )
    return NotLeading(
        f"this inasched service is a standby and takes no writes: {leader}; send it there, "
        f"or here again after {RETRY_AFTER_S} s (a standby takes over when the leader stops)"
    )


class StandbyRefusesWrites:
    """On a standby, answer every write with 503 and Retry-After, saying why (`write_refusal`)."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in WRITES or self.service.leading:
            await self.app(scope, receive, send)
            return
        refusal = await to_thread.run_sync(write_refusal, self.service)
        body = json.dumps(refusal.body()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            *((k.lower().encode(), v.encode()) for k, v in refusal.headers().items()),
        ]
        await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413, whether declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int, overrides: dict[str, int]) -> None:
        self.app = app
        self.limit = limit
        self.overrides = overrides

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.overrides.get(scope["path"], self.limit)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(send, limit)
            return
        seen = 0
        started = over = False

        async def counted() -> Message:
            nonlocal seen, over
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                over = True
                raise _TooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if over:
                # FastAPI answers a body it failed to read with 400; the reason was its size.
                if not started and message["type"] == "http.response.start":
                    started = True
                    await self._refuse(send, limit)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await self._refuse(send, limit)

    @staticmethod
    async def _refuse(send: Send, limit: int) -> None:
        body = f'{{"detail":"request body larger than {limit} bytes"}}'.encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _dashboard_dir() -> str | None:
    try:
        import dashboards

        static_dir = getattr(dashboards, "static_dir", None)
        if static_dir is None:
            return None
        path = static_dir()
    except (ImportError, OSError):
        return None
    return str(path) if path.is_dir() else None


def _spec_follows_settings(app: FastAPI, settings: Settings) -> None:
    """Have the OpenAPI spec promise only what this service accepts: a job's gradient is at
    most its ``max_gradient_bytes`` (the schemas carry the setting's ceiling), so the model
    names are those of the table within it."""
    plain = app.openapi
    limit = settings.max_gradient_bytes

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = plain()
            fields = spec["components"]["schemas"]["JobCreate"]["properties"]
            for option in fields["gradient_bytes"]["anyOf"]:
                if option.get("type") == "integer":
                    option["maximum"] = min(option.get("maximum", limit), limit)
            fitting = sorted(name for name, (size, _) in model_table().items() if size <= limit)
            options = fields["model"]["anyOf"]
            named = next(o for o in options if "enum" in o)
            if fitting:
                named["enum"] = fitting
            else:
                options.remove(named)
        return app.openapi_schema or plain()

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(settings: Settings, *, backend: SwitchBackend | None = None) -> FastAPI:
    """The service app for `settings`. With `backend`, that switch backend is used instead of
    the one the settings name. Raises `api.store.db.DatabaseUnavailable` when the store is away."""
    service = open_service(settings)
    app = FastAPI(
        title="inasched",
        version="0.1.0",
        summary="Schedules a switch's in-network aggregation memory among training jobs",
        lifespan=_lifespan(service, settings.http.threads, backend),
        docs_url=None,  # api.http.docs serves /docs and /redoc offline instead of from a CDN
        redoc_url=None,
        # The service's own Prometheus metrics are on /metrics; FastAPI's OpenTelemetry hooks
        # looked up the global providers on every request (8% of a submission's CPU).
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    install_docs(app)
    _spec_follows_settings(app, settings)
    app.state.service = service
    install_handlers(app, service.health)
    for module in (jobs, queue, workers, switch, policy, events, bench, tokens, limits):
        # Every one of them reads the store, if only to check the caller's token.
        app.include_router(module.router, responses={**UNAUTHORIZED, **UNAVAILABLE})
    app.include_router(metrics.router)  # open, or 401 for a wrong scrape token (documented)
    app.include_router(_service_router(service))
    static = _dashboard_dir()
    if static is not None:
        app.mount("/", StaticFiles(directory=static, html=True), name="dashboard")
    app.add_middleware(StandbyRefusesWrites, service=service)
    app.add_middleware(BodyLimit, limit=settings.http.max_body_bytes, overrides=LARGE_BODIES)
    return app


def _lifespan(
    service: Service, threads: int, backend: SwitchBackend | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start `service` (unless the CLI did) with `threads` request threads; stop it after."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Handlers are synchronous; a few threads serve the requests in arrival order, where
        # dozens would fight over the GIL and leave some requests waiting for seconds.
        to_thread.current_default_thread_limiter().total_tokens = threads
        if not service.started:  # the CLI starts it first, to report a failure in one line
            service.start(backend)
        try:
            yield
        finally:
            service.stop()

    return lifespan


def _service_router(service: Service) -> APIRouter:
    """``/healthz`` and ``/leader``: the service's own state, for probes and load balancers."""
    router = APIRouter(tags=["service"])

    @router.get("/healthz", summary="liveness")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get(
        "/leader",
        summary="leader or standby (503)",
        responses={503: {"model": LeaderPublic, "description": "a standby"}},
    )
    def leader(response: Response) -> LeaderPublic:
        """``{"role": "leader" | "standby", "epoch", "leader", "since", "store"}``: this
        service's role and the latest term the store records (its epoch is the leader's
        P4Runtime election id). A standby answers 503, so a load balancer's health check on
        this path sends requests to the leader only. ``store`` is ``{"state": "reachable" |
        "full" | "unreachable", "since", "detail"}``: the job store as the service's last
        operation on it found it (a leader's scheduling tick uses it every ``tick_s``)."""
        view = _leader_public(service)
        if view.role == "standby":
            response.status_code = 503
        return view

    return router
