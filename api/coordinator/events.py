"""`EventBus`: fans service events out to server-sent-event streams, computing each once.

Publishers are plain threads (request handlers, the scheduling loop); subscribers are asyncio
streams that only read what the bus queued for them. An event is put on the wire once per
publish, as bytes, once per audience (a tenant's streams, or the admins'): a ``switch`` event
is turned into each subscribed tenant's view (`TenantView`) in the publisher's thread, and a
switch view equal to the last one published is not sent again. What is published within
`FLUSH_S` reaches a stream as one chunk in one write, so a burst of job events costs each
stream one wake-up and one write, not one per event; a newer event of the same thing (the
switch view, one job) replaces the one still pending.

A stream's unread bytes are bounded: a slow browser loses its oldest chunks instead of growing
the service's memory. A tenant may hold at most `max_per_tenant` streams (`TooManyStreams`).
`end_streams` ends the streams of revoked tokens (by digest; `api.coordinator.streamwatch`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FLUSH_S",
    "FLUSH_SLICE",
    "KEEPALIVE",
    "KEEPALIVE_S",
    "MAX_UNREAD_BYTES",
    "Event",
    "EventBus",
    "Subscription",
    "TenantView",
    "TooManyStreams",
    "format_sse",
]

# Events published within this long of the first reach a stream in one write: a stream is
# written about once per scheduling tick at most, where 500 streams written on every job
# event would take the service's CPU from scheduling.
FLUSH_S = 0.5
# Streams woken (and so written) per turn of the loop at a flush.
FLUSH_SLICE = 50
# A stream that has not read this much loses its oldest chunks.
MAX_UNREAD_BYTES = 1 << 20
# Proxies close idle connections after about a minute: a stream that got nothing for this long
# gets a comment line.
KEEPALIVE_S = 15.0
KEEPALIVE = b": keepalive\n\n"

# Who reads the same bytes: a tenant's streams (its id), or every admin's (None).
Audience = int | None


@dataclass(frozen=True, slots=True)
class Event:
    """One event: `kind` is the SSE event name (switch, job, bench); `tenant_id` limits who
    sees it (None: everyone); `key` names what it is the state of (a job's id): of pending
    events of one kind and key only the newest is sent (every ``switch`` event has one key)."""

    kind: str
    data: dict[str, Any]
    tenant_id: int | None = None
    key: int | None = None


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
    `digest` is its token's (`api.security.hash_token`), so that a revocation ends it. Its
    chunks are touched only on `loop`."""

    loop: asyncio.AbstractEventLoop
    tenant_id: int
    admin: bool = False
    digest: str = ""
    # Chunks dropped unread because the stream fell `MAX_UNREAD_BYTES` behind.
    dropped: int = 0
    _chunks: deque[bytes] = field(default_factory=deque)
    _unread: int = 0
    _ended: bool = False
    # Nothing offered since the last keepalive round.
    _quiet: bool = True
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def audience(self) -> Audience:
        return None if self.admin else self.tenant_id

    async def read(self) -> bytes | None:
        """Everything queued since the last read, as one chunk (waits for some); None once the
        stream has ended."""
        if not self._chunks and not self._ended:
            self._wake.clear()
            await self._wake.wait()
        if self._ended:
            return None
        chunk = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._unread = 0
        return chunk

    def _offer(self, chunk: bytes) -> None:
        self._quiet = False
        self._chunks.append(chunk)
        self._unread += len(chunk)
        while self._unread > MAX_UNREAD_BYTES and len(self._chunks) > 1:
            self._unread -= len(self._chunks.popleft())
            self.dropped += 1
        self._wake.set()

    def _end(self) -> None:
        self._ended = True
        self._wake.set()


def format_sse(event: Event) -> bytes:
    """The wire form: ``event: <kind>`` then one ``data:`` line of JSON, then a blank line."""
    data = json.dumps(event.data, separators=(",", ":"))
    return f"event: {event.kind}\ndata: {data}\n\n".encode()


def _uncount(counts: Counter[Any], key: object) -> None:
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]


def _pending_key(event: Event) -> object:
    """What `event` is the state of; a pending event with the same is replaced by it."""
    if event.kind == "switch":
        return "switch"
    return (event.kind, event.key) if event.key is not None else object()


def _offer_slices(
    loop: asyncio.AbstractEventLoop, offers: list[tuple[Subscription, bytes]], start: int
) -> None:
    """Wake `FLUSH_SLICE` streams, and the next slice on the loop's next turn: the loop polls
    its sockets between slices, so a request does not wait for every stream's write."""
    end = start + FLUSH_SLICE
    for sub, chunk in offers[start:end]:
        sub._offer(chunk)
    if end < len(offers):
        loop.call_soon(_offer_slices, loop, offers, end)


def _end_all(subs: Collection[Subscription]) -> None:
    for sub in subs:
        sub._end()


class EventBus:
    """Thread-safe publish; `subscribe` must be called from the subscriber's event loop.
    `max_per_tenant` 0 means no limit; without `tenant_view` a tenant sees switch events whole
    (an in-process bus of a test or a benchmark). `flush_s`, `keepalive_s`: see `FLUSH_S`,
    `KEEPALIVE_S`."""

    def __init__(
        self,
        *,
        max_per_tenant: int = 0,
        tenant_view: TenantView | None = None,
        flush_s: float = FLUSH_S,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.max_per_tenant = max_per_tenant
        self.tenant_view = tenant_view
        self.flush_s = flush_s
        self.keepalive_s = keepalive_s
        self._keeping_alive: set[asyncio.AbstractEventLoop] = set()
        self._lock = threading.Lock()
        self._subs: set[Subscription] = set()
        self._per_tenant: Counter[int] = Counter()
        # The open streams' audiences and loops, counted, so that a publish need not look
        # at every stream.
        self._audiences: Counter[Audience] = Counter()
        self._loops: Counter[asyncio.AbstractEventLoop] = Counter()
        # Per loop, what its streams read at its next flush: each event's bytes by audience,
        # by what the event is of (`_pending_key`), oldest first.
        self._pending: dict[asyncio.AbstractEventLoop, dict[object, dict[Audience, bytes]]] = {}
        self._last_switch: dict[str, Any] | None = None

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
            self._audiences[sub.audience] += 1
            self._loops[sub.loop] += 1
            arm = sub.loop not in self._keeping_alive
            self._keeping_alive.add(sub.loop)
        if arm:
            sub.loop.call_later(self.keepalive_s, self._keepalive, sub.loop)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._drop(sub)

    def _drop(self, sub: Subscription) -> bool:
        if sub not in self._subs:
            return False
        self._subs.discard(sub)
        _uncount(self._per_tenant, sub.tenant_id)
        _uncount(self._audiences, sub.audience)
        _uncount(self._loops, sub.loop)
        if not self._subs:  # what the next stream saw first is not known here
            self._last_switch = None
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
        """Queue `event` for every subscriber allowed to see it, for the next flush; never
        blocks on a stream. The bytes are built once per audience, in the caller's thread; a
        ``switch`` event equal to the last one published is dropped."""
        with self._lock:
            if not self._subs:
                return
            if event.kind == "switch":
                if event.data == self._last_switch:
                    return
                self._last_switch = event.data
            audiences, loops = list(self._audiences), list(self._loops)
        texts = self._texts(event, audiences)
        if not texts:
            return
        arm: list[asyncio.AbstractEventLoop] = []
        with self._lock:
            key = _pending_key(event)
            for loop in loops:
                pending = self._pending.get(loop)
                if pending is None:
                    pending = self._pending[loop] = {}
                    arm.append(loop)
                pending.pop(key, None)  # a newer state replaces the one not yet sent
                pending[key] = texts
        for loop in arm:
            try:
                loop.call_soon_threadsafe(loop.call_later, self.flush_s, self._flush, loop)
            except RuntimeError:
                self._forget_loop(loop)  # closed: its streams are gone without unsubscribing

    def first_switch(self, event: Event, *, tenant_id: int, admin: bool) -> bytes:
        """The wire bytes of a ``switch`` event as one new stream sees it (its first event)."""
        if admin or self.tenant_view is None:
            return format_sse(event)
        return format_sse(self.tenant_view(event, (tenant_id,))[tenant_id])

    def _texts(self, event: Event, audiences: Collection[Audience]) -> dict[Audience, bytes]:
        """`event`'s bytes for each of `audiences` that may see it."""
        seeing = [a for a in audiences if a is None or event.tenant_id in (None, a)]
        if not seeing:
            return {}
        tenants = [a for a in seeing if a is not None]
        if event.kind == "switch" and self.tenant_view is not None and tenants:
            texts: dict[Audience, bytes] = {
                t: format_sse(e) for t, e in self.tenant_view(event, tenants).items()
            }
            if None in seeing:
                texts[None] = format_sse(event)
            return texts
        whole = format_sse(event)
        return dict.fromkeys(seeing, whole)

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`: hand each of its streams what was published for it since the last
        flush, as one chunk per audience."""
        with self._lock:
            pending = self._pending.pop(loop, None)
            subs = [sub for sub in self._subs if sub.loop is loop]
        if pending is None:
            return
        chunks: dict[Audience, bytes] = {}
        for audience in {sub.audience for sub in subs}:
            parts = [texts[audience] for texts in pending.values() if audience in texts]
            if parts:
                chunks[audience] = parts[0] if len(parts) == 1 else b"".join(parts)
        offers = [(sub, chunks[sub.audience]) for sub in subs if sub.audience in chunks]
        _offer_slices(loop, offers, 0)

    def _keepalive(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`, every `keepalive_s` while it has streams: a comment to each stream that
        was offered nothing since the last time (one timer a loop, not one a stream)."""
        with self._lock:
            subs = [sub for sub in self._subs if sub.loop is loop]
            if not subs:
                self._keeping_alive.discard(loop)
                return
        for sub in subs:
            if sub._quiet:
                sub._offer(KEEPALIVE)
            sub._quiet = True
        loop.call_later(self.keepalive_s, self._keepalive, loop)

    def end_streams(self, digests: Collection[str]) -> int:
        """End the streams whose token digest is among `digests`; returns how many ended."""
        wanted = set(digests)
        with self._lock:
            ended = [sub for sub in self._subs if sub.digest in wanted]
            for sub in ended:
                self._drop(sub)
        self._end(ended)
        return len(ended)

    def close(self) -> None:
        """End every stream."""
        with self._lock:
            subs = list(self._subs)
            self._subs.clear()
            for counts in (self._per_tenant, self._audiences, self._loops):
                counts.clear()
            self._pending.clear()
            self._keeping_alive.clear()
            self._last_switch = None
        self._end(subs)

    def _end(self, subs: Collection[Subscription]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[Subscription]] = {}
        for sub in subs:
            by_loop.setdefault(sub.loop, []).append(sub)
        for loop, batch in by_loop.items():
            with suppress(RuntimeError):  # a closed loop: its streams are gone already
                loop.call_soon_threadsafe(_end_all, batch)

    def _forget_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._pending.pop(loop, None)
            self._keeping_alive.discard(loop)
            for sub in [sub for sub in self._subs if sub.loop is loop]:
                self._drop(sub)
