"""The fragment-level simulator's static worker under loss: a lost fragment's slot is not
reused before its result is in (p4/PROTOCOL.md section 3), so every run finishes."""

from __future__ import annotations

import heapq
from dataclasses import replace

import pytest

from scheduler.fragsim import _FragmentSim
from scheduler.memory import JobState
from scheduler.validate import cases

# A healthy run of these cases takes at most a few 10^5 events; a run that never ends
# (a resend dropped as stale forever) keeps resending, so the budget stops it quickly.
_BUDGET = 400_000


def _run_bounded(sim: _FragmentSim) -> int:
    """Run `sim` for at most `_BUDGET` events; the number of jobs left unfinished."""
    while sim.heap and sim.events < _BUDGET:
        t, _, action = heapq.heappop(sim.heap)
        sim.clock.advance_to(t)
        sim.events += 1
        action()
    return sum(1 for r in sim.table.records.values() if r.state != JobState.FINISHED)


@pytest.mark.parametrize("family", ["light", "memory", "mixed-widths"])
def test_static_validation_cases_with_loss_finish(family: str) -> None:
    for jobs, base in cases(family, 2):
        cfg = replace(base, spec=replace(base.spec, policy="static"), loss_rate=0.01)
        sim = _FragmentSim(jobs, cfg, cfg.rto_s)
        assert _run_bounded(sim) == 0
