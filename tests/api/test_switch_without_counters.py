"""The service on a switch that serves no counter reads (``inasched switch --refuse-counters``):
it schedules, says on ``/switch`` and once in its log that the counters cannot be read, and does
not hold the progress workers report to counters it does not have (nothing counted is not the
same as nothing known). BMv2's PI serves counter reads; this is the target that would not."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest
from p4ctl.p4rt_service import COUNTER_READS_REFUSED
from p4ctl.softswitch import SoftSwitch

from api.http.app import create_app
from api.settings import Settings
from api.store.crud import create_tenant_token
from tests.api.conftest import LiveServer, wait_for

AGGREGATORS, LANES = 256, 64


def test_service_on_a_switch_without_counter_reads_says_so_and_caps_no_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with SoftSwitch(aggregators=AGGREGATORS, lanes=LANES, serve_counters=False) as switch:
        settings = Settings(
            data_dir=tmp_path,
            tick_s=0.05,
            switch={
                "target": switch.p4runtime_address,
                "data": "{}:{}".format(*switch.data_address),
                "aggregators": AGGREGATORS,
                "lanes": LANES,
            },
            policy={"policy": "esa", "priority": "srtf"},
        )
        app = create_app(settings)
        with app.state.service.sessions() as session:
            token = create_tenant_token(session, tenant="alice")
        auth = {"Authorization": f"Bearer {token}"}
        with (
            caplog.at_level(logging.WARNING),
            LiveServer(app) as url,
            httpx.Client(base_url=url, timeout=60) as client,
        ):
            body = {"name": "uncounted", "n_workers": 1, "iterations": 100, "gradient_bytes": 4096}
            job = client.post("/jobs", json=body, headers=auth).json()
            worker = {"Authorization": f"Bearer {job['join_token']}"}
            joined = client.post(
                f"/jobs/{job['id']}/workers",
                json={"data_host": "127.0.0.1", "data_port": 29011},
                headers=worker,
            )
            assert joined.status_code == 201, joined.text
            # 40 iterations of 16 packets each, of which the switch could count none.
            report = client.post(
                f"/jobs/{job['id']}/workers/0/progress",
                json={"iterations_done": 40, "bytes_switch": 40 * 4096},
                headers=worker,
            )
            assert report.status_code == 200, report.text

            def said() -> str:
                return str(client.get("/switch", headers=auth).json()["counters_unavailable"])

            wait_for(lambda: COUNTER_READS_REFUSED in said(), "/switch to say why")
            assert "the progress workers report is not verified" in said()
            wait_for(
                lambda: (
                    client.get(f"/jobs/{job['id']}", headers=auth).json()["iterations_done"] == 40
                ),
                "the report to be taken",
            )
            # Ticks of 0.05 s: a check against empty counters would have flagged it by now.
            time.sleep(0.5)
            metrics = client.get("/metrics").text
            assert "inasched_unsupported_progress_total 0" in metrics
    warned = [r.getMessage() for r in caplog.records if "serves no counter reads" in r.getMessage()]
    assert len(warned) == 1, warned
