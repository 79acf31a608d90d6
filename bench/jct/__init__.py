"""The JCT benchmark: job completion time of the memory policies on one workload.

``inasched bench jct ARGS`` is ``python -m bench.jct ARGS`` (`bench.jct.cli`). The modules:

- `cli`: the command line, one run or a sweep of runs into an output folder;
- `params`: every parameter of a run with its source (``--set``, ``--sweep``);
- `sim` and `emu`: the two back-ends, the simulator and real processes on loopback;
- `results`, `output`, `report`: per-job outcomes and summaries, the files of a run
  (summary.json, jobs.csv, plots) and its report.md;
- `grid`: sweeps over one or two parameters, sweep.csv and heatmaps;
- `ablation`: esa's gain over atp decomposed; `simcheck`: the fluid simulator against the
  fragment-level one on a slice of the run's workload; `store`: ``--service`` uploads;
- `validate`: ``--sim`` against ``--emu`` (``python -m bench.jct.validate``).
- `series`: repeated, interleaved ``--emu`` runs and esa's wins (``python -m bench.jct.series``).

The package imports nothing itself, so that importing one module (say `params`) does not pull
in the plotting or the emulation.
"""
