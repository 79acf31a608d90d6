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

from api.coordinator.events import Event, EventBus, StreamWatch, Subscription
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


def test_a_switch_event_is_viewed_once_per_tenant_however_many_streams() -> None:
    calls: list[set[int]] = []

    def view(event: Event, tenants: Collection[int]) -> dict[int, Event]:
        calls.append(set(tenants))
        return {t: Event("switch", {"tenant": t}) for t in tenants}

    async def run() -> list[list[str | None]]:
        bus = EventBus(tenant_view=view)
        subs = [_subscribe(bus, 1) for _ in range(3)] + [_subscribe(bus, 2) for _ in range(2)]
        subs.append(_subscribe(bus, 3, admin=True))
        bus.publish(Event("switch", {"whole": True}))
        bus.publish(Event("job", {"id": 7}, tenant_id=2))
        await asyncio.sleep(0)
        return [[s.queue.get_nowait() for _ in range(s.queue.qsize())] for s in subs]

    got = asyncio.run(run())
    assert calls == [{1, 2}]
    assert got[0] == got[1] == got[2] == ['event: switch\ndata: {"tenant":1}\n\n']
    job = 'event: job\ndata: {"id":7}\n\n'
    assert got[3] == got[4] == ['event: switch\ndata: {"tenant":2}\n\n', job]
    assert got[5] == ['event: switch\ndata: {"whole":true}\n\n', job]


def test_the_watch_ends_streams_whose_digest_is_no_longer_live() -> None:
    async def run() -> tuple[int, list[str | None], int]:
        bus = EventBus(max_per_tenant=2)
        gone = _subscribe(bus, 1, digest="aa")
        kept = _subscribe(bus, 1, digest="bb")
        watch = StreamWatch(bus, lambda digests: {"bb"} & set(digests))
        ended = watch.check()
        await asyncio.sleep(0)
        third = _subscribe(bus, 1, digest="cc")  # the ended stream freed its place
        del third, kept
        return ended, [gone.queue.get_nowait()], bus.subscribers

    ended, gone_queue, left = asyncio.run(run())
    assert ended == 1
    assert gone_queue == [None]
    assert left == 2
