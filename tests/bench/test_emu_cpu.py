"""``bench.emu_cpu``'s per-thread CPU reading against the thread's own clock."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from bench.emu_cpu import thread_cpu

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
