"""Event streams cannot harm the service: they hold no store connection, a tenant holds a
bounded number, and a revoked token's open stream ends. A real service over HTTP (uvicorn on
loopback) on SQLite and PostgreSQL; the bus's fan-out on its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Iterator
from contextlib import ExitStack

import httpx
import pytest

from api.coordinator import events
from api.coordinator.events import Event, EventBus, Subscription
from api.coordinator.streamwatch import StreamWatch
from api.settings import Settings
from api.store.tokens import revoke_tokens
from tests.api.conftest import Api, make_api, updated

# Not a timing figure: how long a test waits before it calls a stream that never ends a hang.
HANG_S = 20.0


@pytest.fixture
def roomy(settings: Settings) -> Iterator[Api]:
    """A service whose tenants may open many streams."""
    yield from make_api(updated(settings, tenant={"max_streams": 64}))


def _open(client: httpx.Client, token: str, stack: ExitStack) -> Iterator[str]:
    """An open stream's lines, after its first event arrived. Keep them: a dropped iterator
    closes its stream."""
    response = stack.enter_context(client.stream("GET", f"/events?token={token}"))
    assert response.status_code == 200, response.read()
    lines = response.iter_lines()
    assert next(lines) == "event: switch"
    return lines


def _ends(lines: Iterator[str]) -> None:
    """Read `lines` until the stream ends; fail if it goes on past `HANG_S`."""
    deadline = time.monotonic() + HANG_S
    for _ in lines:
        assert time.monotonic() < deadline, "the stream of a revoked token goes on"


@pytest.mark.parametrize("who", ["tenant", "admin"])
def test_a_stream_ends_when_its_token_is_revoked_over_rest(api: Api, who: str) -> None:
    token, tenant = (api.token, "alice") if who == "tenant" else (api.admin_token, "root")
    if who == "admin":  # the last admin token cannot be revoked over REST: make another
        created = api.client.post(
            "/tokens", json={"tenant": "ops", "admin": True}, headers=api.auth(api.admin_token)
        )
        assert created.status_code == 201
        revoker = created.json()["token"]
    else:
        revoker = api.admin_token
    with ExitStack() as stack:
        lines = _open(api.client, token, stack)
        revoked = api.client.delete(f"/tenants/{tenant}/tokens", headers=api.auth(revoker))
        assert revoked.status_code == 200, revoked.text
        _ends(lines)
    again = api.client.get(f"/events?token={token}")
    assert again.status_code == 401


def test_a_stream_ends_when_its_token_is_revoked_in_the_store(api: Api) -> None:
    # `inasched token revoke` writes the store directly: the service learns it by looking.
    sessions = api.sessions
    with ExitStack() as stack:
        lines = _open(api.client, api.other_token, stack)
        kept = _open(api.client, api.token, stack)
        with sessions() as session:
            assert revoke_tokens(session, tenant="bob")
            session.commit()
        _ends(lines)
        assert next(kept) is not None  # alice's stream goes on


def test_streams_hold_no_store_connection(roomy: Api) -> None:
    # More open streams than the store's pool has connections (request threads + 4).
    with ExitStack() as stack:
        tokens = (roomy.token, roomy.other_token, roomy.admin_token)
        streams = [_open(roomy.client, tokens[i % 3], stack) for i in range(48)]
        with httpx.Client(base_url=str(roomy.client.base_url), timeout=15) as other:
            listed = other.get("/jobs", headers=roomy.auth())
            assert listed.status_code == 200, listed.text
            submitted = other.post(
                "/jobs",
                json={"name": "j", "n_workers": 2, "iterations": 1, "gradient_bytes": 4096},
                headers=roomy.auth(),
            )
            assert submitted.status_code == 201, submitted.text
        assert all(next(lines) is not None for lines in streams)  # every stream is still open


def test_a_tenant_beyond_its_streams_gets_429_and_the_others_do_not(settings: Settings) -> None:
    for api in make_api(updated(settings, tenant={"max_streams": 2})):
        with ExitStack() as stack:
            streams = [_open(api.client, api.token, stack) for _ in range(2)]
            refused = api.client.get(f"/events?token={api.token}")
            assert refused.status_code == 429
            assert refused.headers["Retry-After"].isdigit()
            assert "INASCHED_TENANT_MAX_STREAMS" in refused.json()["detail"]
            streams.append(_open(api.client, api.other_token, stack))
        # Closed streams free their places.
        with ExitStack() as stack:
            assert next(_open(api.client, api.token, stack))


def _subscribe(
    bus: EventBus, tenant_id: int, *, admin: bool = False, digest: str = ""
) -> Subscription:
    return bus.subscribe(tenant_id=tenant_id, admin=admin, digest=digest)


async def _read(sub: Subscription) -> bytes | None:
    """What `sub` reads now: ``b""`` when nothing is queued for it."""
    try:
        return await asyncio.wait_for(sub.read(), 0.01)
    except TimeoutError:
        return b""


async def _flushed(subs: list[Subscription]) -> list[bytes | None]:
    """What each of `subs` reads once the bus (``flush_s=0``) has flushed."""
    await asyncio.sleep(0.05)  # the loop runs the flush, and every slice of it
    return [await _read(sub) for sub in subs]


def test_a_switch_event_is_viewed_and_encoded_once_per_tenant_however_many_streams() -> None:
    calls: list[set[int]] = []

    def view(event: Event, tenants: Collection[int]) -> dict[int, Event]:
        calls.append(set(tenants))
        return {t: Event("switch", {"tenant": t}) for t in tenants}

    async def run() -> list[bytes | None]:
        bus = EventBus(tenant_view=view, flush_s=0)
        subs = [_subscribe(bus, 1) for _ in range(3)] + [_subscribe(bus, 2) for _ in range(2)]
        subs.append(_subscribe(bus, 3, admin=True))
        bus.publish(Event("switch", {"whole": True}))
        bus.publish(Event("job", {"id": 7}, tenant_id=2, key=7))
        return await _flushed(subs)

    got = asyncio.run(run())
    assert calls == [{1, 2}]
    assert got[0] == b'event: switch\ndata: {"tenant":1}\n\n'
    # One chunk per tenant, the same bytes object for each of its streams.
    assert got[0] is got[1] is got[2]
    assert got[3] is got[4]
    job = b'event: job\ndata: {"id":7}\n\n'
    assert got[3] == b'event: switch\ndata: {"tenant":2}\n\n' + job
    assert got[5] == b'event: switch\ndata: {"whole":true}\n\n' + job


def test_an_unchanged_switch_view_is_not_sent_again() -> None:
    async def run() -> list[list[bytes | None]]:
        bus = EventBus(flush_s=0)
        sub = _subscribe(bus, 1)
        reads: list[list[bytes | None]] = []
        for counters in ({"a": 1}, {"a": 1}, {"a": 2}, {"a": 2}):
            bus.publish(Event("switch", {"counters": dict(counters)}))
            reads.append(await _flushed([sub]))
        # With no stream open the bus does not follow the view: the next stream gets it.
        bus.unsubscribe(sub)
        bus.publish(Event("switch", {"counters": {"a": 1}}))
        sub = _subscribe(bus, 1)
        bus.publish(Event("switch", {"counters": {"a": 2}}))
        reads.append(await _flushed([sub]))
        return reads

    two = b'event: switch\ndata: {"counters":{"a":2}}\n\n'
    assert asyncio.run(run()) == [
        [b'event: switch\ndata: {"counters":{"a":1}}\n\n'],
        [b""],  # nothing new within the read's timeout
        [two],
        [b""],
        [two],
    ]


def test_events_between_flushes_reach_a_stream_in_one_chunk_newest_state_only() -> None:
    async def run() -> tuple[bytes | None, bytes | None]:
        bus = EventBus(flush_s=0)
        sub = _subscribe(bus, 1)
        bus.publish(Event("job", {"id": 7, "state": "queued"}, key=7))
        bus.publish(Event("switch", {"runs": 0}))
        bus.publish(Event("job", {"id": 8, "state": "queued"}, key=8))
        bus.publish(Event("bench", {"id": 1}))
        bus.publish(Event("job", {"id": 7, "state": "admitted"}, key=7))
        bus.publish(Event("switch", {"runs": 1}))
        bus.publish(Event("bench", {"id": 2}))
        [chunk] = await _flushed([sub])
        [nothing] = await _flushed([sub])
        return chunk, nothing

    chunk, nothing = asyncio.run(run())
    assert chunk == (
        b'event: job\ndata: {"id":8,"state":"queued"}\n\n'
        b'event: bench\ndata: {"id":1}\n\n'
        b'event: job\ndata: {"id":7,"state":"admitted"}\n\n'
        b'event: switch\ndata: {"runs":1}\n\n'
        b'event: bench\ndata: {"id":2}\n\n'
    )
    assert nothing == b""


def test_a_stream_that_does_not_read_loses_its_oldest_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(events, "MAX_UNREAD_BYTES", 100)

    async def run() -> tuple[bytes | None, int]:
        bus = EventBus(flush_s=0)
        sub = _subscribe(bus, 1)
        for i in range(10):
            bus.publish(Event("job", {"id": i, "pad": "x" * 20}, key=i))
            await asyncio.sleep(0.02)  # a flush each
        return await _read(sub), sub.dropped

    chunk, dropped = asyncio.run(run())
    assert chunk is not None and 0 < len(chunk) <= 100
    assert chunk.endswith(b'{"id":9,"pad":"xxxxxxxxxxxxxxxxxxxx"}\n\n')
    assert dropped == 10 - chunk.count(b"event: job")


def test_only_a_stream_that_got_nothing_gets_a_keepalive() -> None:
    async def run() -> list[bytes | None]:
        bus = EventBus(flush_s=0, keepalive_s=0.2)
        quiet, busy = _subscribe(bus, 1), _subscribe(bus, 2)
        await asyncio.sleep(0.1)
        bus.publish(Event("job", {"id": 1}, tenant_id=2, key=1))
        await asyncio.sleep(0.05)
        first = [await _read(busy)]
        await asyncio.sleep(0.1)  # the first keepalive round
        return first + [await _read(quiet), await _read(busy)]

    assert asyncio.run(run()) == [b'event: job\ndata: {"id":1}\n\n', events.KEEPALIVE, b""]


def test_the_watch_ends_streams_whose_digest_is_no_longer_live() -> None:
    async def run() -> tuple[int, bytes | None, int]:
        bus = EventBus(max_per_tenant=2)
        gone = _subscribe(bus, 1, digest="aa")
        kept = _subscribe(bus, 1, digest="bb")
        watch = StreamWatch(bus, lambda digests: {"bb"} & set(digests))
        ended = watch.check()
        await asyncio.sleep(0)
        third = _subscribe(bus, 1, digest="cc")  # the ended stream freed its place
        del third, kept
        return ended, await _read(gone), bus.subscribers

    ended, gone_read, left = asyncio.run(run())
    assert ended == 1
    assert gone_read is None
    assert left == 2
