"""A policy change while static jobs run: hashed jobs admitted afterwards hash only into the
shared pool below every partition in use, never into a static job's partition."""

from __future__ import annotations

from tests.api.conftest import Api


def _put_policy(api: Api, policy: str) -> None:
    response = api.client.put("/policy", json={"policy": policy}, headers=api.auth(api.admin_token))
    assert response.status_code == 200, response.text


def test_hashed_jobs_after_a_policy_change_stay_below_static_partitions(api: Api) -> None:
    _put_policy(api, "static")
    first, second = api.submit(window=8), api.submit(window=8)
    assert first["state"] == second["state"] == "admitted"
    _put_policy(api, "atp")
    waiting = api.submit(n_workers=1)
    # The first partition starts at aggregator 0: no shared pool exists below it yet.
    assert waiting["state"] == "queued"
    api.client.post(f"/jobs/{first['id']}/cancel", headers=api.auth())
    job = api.client.get(f"/jobs/{waiting['id']}", headers=api.auth()).json()
    assert job["state"] == "admitted" and job["policy"] == "atp"
    joined = api.client.post(
        f"/jobs/{waiting['id']}/workers",
        json={"data_host": "127.0.0.1", "data_port": 40002},
        headers=api.auth(str(waiting["join_token"])),
    ).json()
    # The second static job holds aggregators 16..31 (8 slots of two copies).
    assert joined["placement"]["kind"] == "hashed" and joined["placement"]["pool"] == 16
