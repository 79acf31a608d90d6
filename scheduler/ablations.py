"""Ablations of ``esa``: each keeps one of its two switch mechanisms and drops the other, so
that a benchmark can say where esa's gain over ``atp`` comes from.

- ``esa-nopreempt``: early release (the result is multicast the moment its sum completes and
  the aggregator is free at once, a copy going to the PS), but no preemption: no priorities
  are set, so every job stays at level 0 and the first claim keeps an aggregator. The switch's
  ``esa`` rule with equal levels is exactly that.
- ``esa-norelease``: preemption by priority, as esa, but a complete sum goes to the PS and its
  aggregator is freed only when the PS result passes back, as under atp. The switch program
  has no such rule (its ``atp`` rule never preempts), so only the simulators run it: the fluid
  model from the policy's traits, the fragment-level one by taking the ``esa`` rule for the
  fragments that land on another job's partial sum (`scheduler.fragsim`).

Going from atp to esa-nopreempt adds release; from esa-nopreempt to esa adds preemption; the
benchmark's report puts the steps side by side (`bench.jct.report`).
"""

from __future__ import annotations

from typing import ClassVar

from scheduler.atp import AtpPolicy
from scheduler.esa import EsaPolicy

__all__ = ["EsaNoPreemptPolicy", "EsaNoReleasePolicy"]


class EsaNoPreemptPolicy(AtpPolicy):
    """esa without preemption: atp's decisions (`Admit` with a hash seed, `Reclaim`; no
    `SetPriority`), on a switch that frees an aggregator when its sum completes."""

    name: ClassVar[str] = "esa-nopreempt"
    early_release: ClassVar[bool] = True


class EsaNoReleasePolicy(EsaPolicy):
    """esa without early release: esa's decisions (priorities included), on a switch that
    holds a complete sum's aggregator until the PS result passes back."""

    name: ClassVar[str] = "esa-norelease"
    early_release: ClassVar[bool] = False
