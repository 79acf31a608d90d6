"""The JCT benchmark: job completion time of the memory policies on one workload.

``inasched bench jct ARGS`` is ``python -m bench.jct ARGS`` (`bench.jct.cli`). The modules:
`cli` (one run or a sweep into an output folder); `params` (every parameter with its source);
`sim` and `emu` (the simulator and real processes on loopback); `results`, `output`, `report`
(per-job outcomes, the files of a run and its report.md); `grid` (sweeps, sweep.csv and
heatmaps); `ablation` (esa's gain over atp decomposed); `simcheck` (the fluid simulator
against the fragment-level one on a slice of the run's workload); `store` (``--service``
uploads); `validate` (``--sim`` against ``--emu``); `series` (repeated, interleaved ``--emu``
runs and esa's wins).

The package imports nothing itself, so that importing one module (say `params`) does not pull
in the plotting or the emulation.
"""
