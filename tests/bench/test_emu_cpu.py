"""``bench.emu_cpu``: its per-thread CPU reading against the thread's own clock, and one tiny
run."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.emu_cpu import ROLES, main, thread_cpu

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_thread_cpu_reads_what_a_busy_thread_spent() -> None:
    spent: list[float] = []
    ready, release = threading.Event(), threading.Event()

    def burn() -> None:
        while time.thread_time() < 0.3:
            pass
        spent.append(time.thread_time())
        ready.set()
        release.wait()

    t = threading.Thread(target=burn, name="burner")
    t.start()
    try:
        assert ready.wait(timeout=60)
        seen = {name: cpu for name, cpu in thread_cpu().values()}
    finally:
        release.set()
        t.join()
    # /proc counts in clock ticks (10 ms), the thread's clock in nanoseconds.
    assert seen["burner"] == pytest.approx(spent[0], abs=0.03)
    assert "MainThread" in seen


@pytest.mark.slow
def test_one_policy_writes_its_row(tmp_path: Path) -> None:
    out = tmp_path / "emu_cpu.json"
    main(["--policies", "static", "--iterations", "2", "--grad-bytes", "4096", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [r["policy"] for r in rows] == ["static"]
    for row in rows:
        assert set(ROLES) <= set(row)
