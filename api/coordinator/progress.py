"""`ProgressCheck`: the progress a job's workers report, held to what the switch counted.

Priorities (srtf, las) rank jobs by their progress, which workers report with nothing but
their join token. A report is believed only as far as the switch's own per-job counters go:
every worker's packet of every fragment of an iteration passes the switch, where it is
aggregated or bypassed to the PS (``p4ctl.rule.COUNTERS``), so a job whose workers finished
`n` iterations has at least ``n x workers x fragments per iteration`` such packets counted.
Progress beyond that is capped before the policy sees it, logged, and counted on ``/metrics``
(``inasched_unsupported_progress_total``).

Counters are read once per tick, so an honest report can run ahead of the last read: a claim
is judged only against a read taken after it (the claim as it stood at the previous read), so
honest jobs are never flagged; their priority uses the lower, counted figure until the next
read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from api.coordinator.inputs import fragments_per_iteration
from scheduler.snapshot import JobView

__all__ = ["Claim", "ProgressCheck", "supported_iterations"]

log = logging.getLogger(__name__)

# Packets of a job's workers that the switch took into an aggregation (in its registers, or
# bypassed to the PS); resent and dropped packets are not progress.
SWITCHED = ("job_aggregated", "job_bypassed")


@dataclass(frozen=True, slots=True)
class Claim:
    """A job holding a switch job id, as its workers' reports stand: `iterations_done`, and
    what its counters are read against (its size, fan-in, and the id's counters at admission).
    """

    job_id: int
    switch_job_id: int
    iterations_done: int
    n_workers: int
    gradient_bytes: int
    counter_base: Mapping[str, int]


def supported_iterations(claim: Claim, raw: Mapping[str, int], *, lanes: int) -> int:
    """Iterations the switch's counters `raw` (of the claim's switch job id) account for."""
    fragments = fragments_per_iteration(claim.gradient_bytes, lanes)
    per_iteration = max(1, fragments * claim.n_workers)
    seen = sum(max(0, raw.get(n, 0) - int(claim.counter_base.get(n, 0))) for n in SWITCHED)
    return seen // per_iteration


class ProgressCheck:
    """What the switch supports of each job's progress, from the last counter read."""

    def __init__(self, *, lanes: int) -> None:
        self.lanes = lanes
        self.supported: dict[int, int] = {}
        self.unsupported_total = 0
        self._claimed: dict[int, int] = {}
        self._flagged: dict[int, int] = {}

    def observe(self, claims: Iterable[Claim], counters: Mapping[int, Mapping[str, int]]) -> bool:
        """A counter read `counters` was just taken, and `claims` are the reports now. Flags
        each job whose claim at the previous read exceeds what this read supports. True when
        the progress a policy should see changed (a decision round is due)."""
        supported: dict[int, int] = {}
        claimed: dict[int, int] = {}
        for claim in claims:
            can = supported_iterations(
                claim, counters.get(claim.switch_job_id, {}), lanes=self.lanes
            )
            supported[claim.job_id] = can
            claimed[claim.job_id] = claim.iterations_done
            before = self._claimed.get(claim.job_id, 0)
            if before > can and before > self._flagged.get(claim.job_id, 0):
                self._flagged[claim.job_id] = before
                self.unsupported_total += 1
                log.warning(
                    "job %d: its workers report %d iterations done, the switch counted "
                    "packets for %d; its priority uses %d",
                    claim.job_id,
                    before,
                    can,
                    can,
                )
        seen = {job: min(claimed[job], can) for job, can in supported.items()}
        before_seen = {job: min(self._claimed[job], can) for job, can in self.supported.items()}
        self.supported, self._claimed = supported, claimed
        self._flagged = {k: v for k, v in self._flagged.items() if k in claimed}
        return seen != before_seen

    def cap(self, view: JobView) -> JobView:
        """`view` with its progress no higher than the switch supports (unchanged for a job
        the last read did not cover)."""
        can = self.supported.get(view.job_id)
        if can is None or view.iterations_done <= can:
            return view
        return replace(view, iterations_done=can)
