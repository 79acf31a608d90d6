"""`EventBus`: fans service events out to server-sent-event streams, computing each once.

Publishers are plain threads (request handlers, the scheduling loop); subscribers are asyncio
streams that only read what the bus queued for them: an event is put on the wire once per
publish, and a ``switch`` event is turned into each subscribed tenant's view once per tenant
(`TenantView`), however many streams are open. A stream holds no store connection.

Each subscriber has a bounded queue: a slow browser loses its oldest events instead of growing
the service's memory. A tenant may hold at most `max_per_tenant` streams (`TooManyStreams`).
`end_streams` ends the streams of revoked tokens (by digest): the service checks the digests
of the open streams against the store every `STREAM_CHECK_S` (`StreamWatch`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "STREAM_CHECK_S",
    "Event",
    "EventBus",
    "StreamWatch",
    "Subscription",
    "TenantView",
    "TooManyStreams",
    "format_sse",
]

log = logging.getLogger(__name__)

# A revoked token's open stream ends within this long (plus one store read).
STREAM_CHECK_S = 1.0


@dataclass(frozen=True, slots=True)
class Event:
    """One event: `kind` is the SSE event name (switch, job, bench); `tenant_id` limits who
    sees it (None: everyone)."""

    kind: str
    data: dict[str, Any]
    tenant_id: int | None = None


# A ``switch`` event as each of the tenants sees it (their own jobs named, the others' not).
TenantView = Callable[[Event, Collection[int]], Mapping[int, Event]]


class TooManyStreams(Exception):
    """The tenant holds as many event streams as it may."""

    def __init__(self, tenant_id: int, limit: int) -> None:
        super().__init__(f"tenant {tenant_id} holds {limit} event streams already")
        self.limit = limit


@dataclass(eq=False)
class Subscription:
    """One stream: it gets events for everyone and for its tenant (an admin's: every event).
    `digest` is its token's (`api.security.hash_token`), so that a revocation ends it."""

    loop: asyncio.AbstractEventLoop
    tenant_id: int
    admin: bool = False
    digest: str = ""
    queue: asyncio.Queue[str | None] = field(default_factory=lambda: asyncio.Queue(256))


def format_sse(event: Event) -> str:
    """The wire form: ``event: <kind>`` then one ``data:`` line of JSON, then a blank line."""
    return f"event: {event.kind}\ndata: {json.dumps(event.data, separators=(',', ':'))}\n\n"


def _offer_all(batch: list[tuple[Subscription, str | None]]) -> None:
    for sub, text in batch:
        if sub.queue.full():
            sub.queue.get_nowait()
        sub.queue.put_nowait(text)


class EventBus:
    """Thread-safe publish; `subscribe` must be called from the subscriber's event loop.
    `max_per_tenant` 0 means no limit; without `tenant_view` a tenant sees switch events whole
    (an in-process bus of a test or a benchmark)."""

    def __init__(self, *, max_per_tenant: int = 0, tenant_view: TenantView | None = None) -> None:
        self.max_per_tenant = max_per_tenant
        self.tenant_view = tenant_view
        self._lock = threading.Lock()
        self._subs: set[Subscription] = set()
        self._per_tenant: Counter[int] = Counter()

    def subscribe(self, *, tenant_id: int, admin: bool = False, digest: str = "") -> Subscription:
        """A new stream's subscription; `TooManyStreams` when its tenant holds its limit."""
        sub = Subscription(
            loop=asyncio.get_running_loop(), tenant_id=tenant_id, admin=admin, digest=digest
        )
        with self._lock:
            if self.max_per_tenant and self._per_tenant[tenant_id] >= self.max_per_tenant:
                raise TooManyStreams(tenant_id, self.max_per_tenant)
            self._subs.add(sub)
            self._per_tenant[tenant_id] += 1
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._drop(sub)

    def _drop(self, sub: Subscription) -> bool:
        if sub not in self._subs:
            return False
        self._subs.discard(sub)
        self._per_tenant[sub.tenant_id] -= 1
        if self._per_tenant[sub.tenant_id] <= 0:
            del self._per_tenant[sub.tenant_id]
        return True

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subs)

    def digests(self) -> set[str]:
        """The token digests of the open streams."""
        with self._lock:
            return {sub.digest for sub in self._subs if sub.digest}

    def publish(self, event: Event) -> None:
        """Queue `event` for every subscriber allowed to see it; never blocks. The wire text is
        built once, and once per subscribed tenant for a ``switch`` event."""
        with self._lock:
            subs = list(self._subs)
        if not subs:
            return
        whole = format_sse(event)
        deliveries = [
            (sub, text)
            for sub, text in zip(subs, self._texts(event, whole, subs), strict=True)
            if text is not None
        ]
        self._deliver(deliveries)

    def first_switch(self, event: Event, *, tenant_id: int, admin: bool) -> str:
        """The wire text of a ``switch`` event as one new stream sees it (its first event)."""
        if admin or self.tenant_view is None:
            return format_sse(event)
        return format_sse(self.tenant_view(event, (tenant_id,))[tenant_id])

    def _texts(self, event: Event, whole: str, subs: list[Subscription]) -> list[str | None]:
        views: dict[int, str] = {}
        if event.kind == "switch" and self.tenant_view is not None:
            tenants = {sub.tenant_id for sub in subs if not sub.admin}
            if tenants:
                views = {t: format_sse(e) for t, e in self.tenant_view(event, tenants).items()}
        texts: list[str | None] = []
        for sub in subs:
            if sub.admin:
                texts.append(whole)
            elif event.tenant_id not in (None, sub.tenant_id):
                texts.append(None)
            else:
                texts.append(views.get(sub.tenant_id, whole))
        return texts

    def end_streams(self, digests: Collection[str]) -> int:
        """End the streams whose token digest is among `digests`; returns how many ended."""
        wanted = set(digests)
        with self._lock:
            ended = [sub for sub in self._subs if sub.digest in wanted]
            for sub in ended:
                self._drop(sub)
        self._deliver([(sub, None) for sub in ended])
        return len(ended)

    def close(self) -> None:
        """End every stream (each gets a None sentinel)."""
        with self._lock:
            subs = list(self._subs)
            self._subs.clear()
            self._per_tenant.clear()
        self._deliver([(sub, None) for sub in subs])

    def _deliver(self, deliveries: Sequence[tuple[Subscription, str | None]]) -> None:
        # One wake-up of each subscribers' loop per event, not one per subscriber.
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Subscription, str | None]]] = {}
        for sub, text in deliveries:
            by_loop.setdefault(sub.loop, []).append((sub, text))
        for loop, batch in by_loop.items():
            try:
                loop.call_soon_threadsafe(_offer_all, batch)
            except RuntimeError:
                # The subscribers' loop is closed: their streams are gone without unsubscribing.
                for sub, _ in batch:
                    self.unsubscribe(sub)


class StreamWatch:
    """Ends the streams of revoked tokens: every `period_s`, while streams are open, one store
    read (`live`) tells which of their digests are still live tokens. A store that cannot be
    read ends no stream (the check resumes when it answers)."""

    def __init__(
        self,
        bus: EventBus,
        live: Callable[[Collection[str]], Collection[str]],
        *,
        period_s: float = STREAM_CHECK_S,
    ) -> None:
        self.bus, self.live, self.period_s = bus, live, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def check(self) -> int:
        """One check; returns how many streams it ended."""
        digests = self.bus.digests()
        if not digests:
            return 0
        revoked = digests - set(self.live(digests))
        ended = self.bus.end_streams(revoked) if revoked else 0
        if ended:
            log.info("ended %d event stream(s) of revoked tokens", ended)
        return ended

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self.period_s):
            try:
                self.check()
            except Exception as exc:  # the store is away: keep the streams, say so once
                if not failing:
                    log.warning("cannot check the event streams' tokens: %s", exc)
                failing = True
            else:
                failing = False
