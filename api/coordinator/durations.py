"""`Durations`: how long a loop's passes take (the decision rounds, the scheduling ticks that
watch the workers), for ``/metrics`` as Prometheus summaries (``_sum`` and ``_count``).

One thread records (the loop's own), any thread reads; a read may see a pass's count without
its time for an instant, which a rate over a scrape interval does not notice."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Durations"]


@dataclass
class Durations:
    count: int = 0
    total_s: float = 0.0
    max_s: float = 0.0

    def record(self, seconds: float) -> None:
        self.count += 1
        self.total_s += seconds
        self.max_s = max(self.max_s, seconds)
