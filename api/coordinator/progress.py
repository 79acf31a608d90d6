"""`ProgressCheck`: the progress a job's workers report, held to what the switch counted.

Priorities (srtf, las) rank jobs by the progress workers report with nothing but their join
token. A report is believed only as far as the switch's per-job counters go: every worker's
packet of every fragment passes the switch, aggregated or bypassed (``p4ctl.rule.COUNTERS``),
so `n` iterations done means at least ``n x workers x fragments per iteration`` packets.
Progress beyond that is capped before the policy sees it, logged, and counted on ``/metrics``
(``inasched_unsupported_progress_total``). A claim is judged only against a counter read taken
after it, so honest jobs are never flagged.

The counters bound a job's declared length too: one whose packets pass what its declared
iterations take (by more than `OVERRUN_SLACK`) over-ran its declaration (`Overrun`, counted in
``inasched_jobs_overran_declaration_total``); srtf then ranks it by the counted work.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from api.coordinator.inputs import fragments_per_iteration
from scheduler.snapshot import JobView

__all__ = ["Claim", "Observation", "Overrun", "ProgressCheck", "supported_iterations"]

log = logging.getLogger(__name__)

# Packets of a job's workers that the switch took into an aggregation (in its registers, or
# bypassed to the PS); resent and dropped packets are not progress.
SWITCHED = ("job_aggregated", "job_bypassed")
# How far past its declaration an honest job's packets can go: each allreduce pads to whole
# fragments (DDP's buckets each do, so an iteration can take a few more fragments than its
# gradient), and a training loop may allreduce a few scalars besides its gradient.
OVERRUN_SLACK = 0.125


@dataclass(frozen=True, slots=True)
class Claim:
    """A job holding a switch job id, as its workers' reports stand: `iterations_done`, and
    what its counters are read against (its size, fan-in, and the id's counters at admission);
    its declared `iterations`, and whether it `overran` them at an earlier read (its row says).
    """

    job_id: int
    switch_job_id: int
    iterations_done: int
    n_workers: int
    gradient_bytes: int
    counter_base: Mapping[str, int]
    iterations: int
    overran: bool = False


@dataclass(frozen=True, slots=True)
class Overrun:
    """A job whose workers' packets, as the switch counted them, account for `counted`
    iterations, more than the `declared` ones (of `packets_per_iteration` each)."""

    job_id: int
    declared: int
    counted: int
    packets_per_iteration: int


@dataclass(frozen=True, slots=True)
class Observation:
    """What one counter read changed: whether the progress a policy sees moved (`changed`: a
    decision round is due), and the jobs that over-ran their declarations at this read."""

    changed: bool
    overran: tuple[Overrun, ...] = ()


def packets_per_iteration(claim: Claim, *, lanes: int) -> int:
    """Packets an iteration of the claim's job takes through the switch: one per fragment of
    each worker's gradient."""
    return max(1, fragments_per_iteration(claim.gradient_bytes, lanes) * claim.n_workers)


def supported_iterations(claim: Claim, raw: Mapping[str, int], *, lanes: int) -> int:
    """Iterations the switch's counters `raw` (of the claim's switch job id) account for."""
    return switched_packets(claim, raw) // packets_per_iteration(claim, lanes=lanes)


def switched_packets(claim: Claim, raw: Mapping[str, int]) -> int:
    """Packets of the claim's job that the switch's counters `raw` (of its switch job id)
    took into an aggregation since the job got the id."""
    return sum(max(0, raw.get(n, 0) - int(claim.counter_base.get(n, 0))) for n in SWITCHED)


class ProgressCheck:
    """What the switch supports of each job's progress, from the last counter read."""

    def __init__(self, *, lanes: int) -> None:
        self.lanes = lanes
        self.supported: dict[int, int] = {}
        self.unsupported_total = 0
        self.overran_total = 0
        self._claimed: dict[int, int] = {}
        self._flagged: dict[int, int] = {}
        self._overran: set[int] = set()

    def observe(
        self, claims: Iterable[Claim], counters: Mapping[int, Mapping[str, int]]
    ) -> Observation:
        """A counter read `counters` was just taken, and `claims` are the reports now. Flags
        each job whose claim at the previous read exceeds what this read supports, and each
        job whose counted work passed its declared iterations for the first time."""
        supported: dict[int, int] = {}
        claimed: dict[int, int] = {}
        claims = list(claims)
        overran = [self._overrun(claim, counters) for claim in claims]
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
        seen = self._seen(claimed, supported)
        before_seen = self._seen(self._claimed, self.supported)
        self.supported, self._claimed = supported, claimed
        self._flagged = {k: v for k, v in self._flagged.items() if k in claimed}
        self._overran &= claimed.keys()
        new = tuple(o for o in overran if o is not None)
        return Observation(changed=seen != before_seen or bool(new), overran=new)

    def forget(self) -> None:
        """No counter read to hold claims to (the switch serves none): the policy sees the
        progress workers report, unchecked, until a read succeeds."""
        self.supported, self._claimed, self._flagged = {}, {}, {}

    def _overrun(self, claim: Claim, counters: Mapping[int, Mapping[str, int]]) -> Overrun | None:
        """The claim's job if this read is the first to show it over-ran its declaration."""
        if claim.overran:
            self._overran.add(claim.job_id)
            return None
        if claim.job_id in self._overran:
            return None
        packets = switched_packets(claim, counters.get(claim.switch_job_id, {}))
        per_iteration = packets_per_iteration(claim, lanes=self.lanes)
        if packets <= claim.iterations * per_iteration * (1 + OVERRUN_SLACK):
            return None
        counted = packets // per_iteration
        self._overran.add(claim.job_id)
        self.overran_total += 1
        log.warning(
            "job %d over-ran its declaration: it declared %d iterations (%d packets each), the "
            "switch counted packets for %d; srtf ranks it by attained service from now on",
            claim.job_id,
            claim.iterations,
            per_iteration,
            counted,
        )
        return Overrun(claim.job_id, claim.iterations, counted, per_iteration)

    def _seen(self, claimed: Mapping[int, int], supported: Mapping[int, int]) -> dict[int, int]:
        """The progress a policy sees of each job: the counted work of one that over-ran its
        declaration, the claim held to the counters of any other."""
        return {
            job: can if job in self._overran else min(claimed[job], can)
            for job, can in supported.items()
        }

    def cap(self, view: JobView) -> JobView:
        """`view` with its progress no higher than the switch supports, and for a job that
        over-ran its declaration the work the switch counted (unchanged for a job the last read
        did not cover)."""
        can = self.supported.get(view.job_id)
        if can is None or view.iterations_done == can:
            return view
        if view.overran_declaration or view.iterations_done > can:
            return replace(view, iterations_done=can)
        return view
