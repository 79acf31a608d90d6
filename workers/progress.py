"""What ``inasched worker`` tells its user while it trains: one line when it starts (job,
switch address, gradient size, iterations), then one line of progress at most every
`interval_s` and always at the last iteration (iterations done, goodput, share of the
gradient aggregated in the switch).

Goodput counts the gradient bytes allreduced per second of the run since the start line,
compute time included, so it is what the job gets, not what the network could carry. The
share in the switch is the switch's part of the bytes aggregated so far; the rest was
aggregated at the job's parameter server (collisions, evictions, resends).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from workers.client import ClientStats
from workers.rendezvous import WorkerJoin

__all__ = ["PROGRESS_INTERVAL_S", "ProgressLines", "size_text"]

# Often enough to see a worker is alive, rarely enough that many workers in one terminal
# (under torchrun) stay readable.
PROGRESS_INTERVAL_S = 10.0


def size_text(n_bytes: float) -> str:
    """``"97.5 MB"``: decimal units, as the dashboard shows sizes."""
    value = float(n_bytes)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


class ProgressLines:
    """The start line and the progress lines of one worker, each handed to `report`."""

    def __init__(
        self,
        report: Callable[[str], None],
        *,
        interval_s: float = PROGRESS_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._report = report
        self._interval_s = interval_s
        self._clock = clock
        self._prefix = ""
        self._iterations = 0
        self._gradient_bytes = 0
        self._started = 0.0
        self._last_line = 0.0

    def start(
        self, join: WorkerJoin, *, iterations: int, gradient_bytes: int, model: str | None
    ) -> None:
        """``job 4 worker 0: 100 iterations of a 4.1 KB gradient (ResNet-50) through the
        switch at 127.0.0.1:9000, policy esa; progress every 10 s``"""
        self._prefix = f"job {join.job_id} worker {join.worker_id}"
        self._iterations = iterations
        self._gradient_bytes = gradient_bytes
        self._started = self._last_line = self._clock()
        of_model = f" ({model})" if model else ""
        host, port = join.switch
        self._report(
            f"{self._prefix}: {iterations} iterations of a {size_text(gradient_bytes)} gradient"
            f"{of_model} through the switch at {host}:{port}, policy {join.policy.name.lower()};"
            f" progress every {self._interval_s:g} s"
        )

    def iteration(self, done: int, stats: ClientStats) -> None:
        """After iteration `done` (1-based): a line if `interval_s` has passed since the last
        one, or if it was the last iteration.

        ``job 4 worker 0: 37 of 100 iterations, goodput 12.3 MB/s, 98.0% aggregated in the
        switch``
        """
        now = self._clock()
        if done < self._iterations and now - self._last_line < self._interval_s:
            return
        self._last_line = now
        elapsed = max(now - self._started, 1e-9)
        goodput = done * self._gradient_bytes / elapsed
        aggregated = stats.bytes_switch + stats.bytes_ps
        share = f"{100 * stats.bytes_switch / aggregated:.1f}%" if aggregated else "–"
        self._report(
            f"{self._prefix}: {done} of {self._iterations} iterations,"
            f" goodput {size_text(goodput)}/s, {share} aggregated in the switch"
        )
