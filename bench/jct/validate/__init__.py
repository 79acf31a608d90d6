"""Validation of ``--sim`` against ``--emu`` on one small workload.

    python -m bench.jct.validate --emu-out DIR [--repeats DIR2 ...] [--probe-bytes 65536]
                                 [--repeat 2] [--concurrency C] [--rates FILE] [--skew]
                                 [--calibrate CDIR ...] [--out VDIR]

`DIR` is the output folder of an ``inasched bench jct ... --emu`` run (it holds the scaled
``workload.csv`` and ``summary.json``); `--repeats` names more runs of the same workload,
whose average JCTs are averaged with DIR's (the loopback's run-to-run spread is 5-15% per
policy on 2 cores, as large as the differences between the policies). The command (`cli`)

1. measures the loopback (`probe`), on the same machine, with the same service, soft switch,
   PS and worker processes as the emulation (`bench.jct.emu`), using probe jobs only (never the
   validated workload): `c` probe jobs of 2 workers (``--concurrency``, default
   `PROBE_JOBS`) that compute for ``--probe-compute`` seconds per iteration (default
   ``workload``: the validated workload's mean, so that the probes load the 2 cores as its
   jobs do; 0: no compute), submitted together (staggered when they compute), run for `K1`
   and `K2` iterations. The difference of the two JCTs divided by ``K2 - K1`` is the
   per-iteration time, free of the per-job fixed cost (service round trips, join), which is
   the rest. Under ``static`` every fragment is aggregated in the switch; under ``esa`` too,
   and its complete sum is copied to the PS; under ``atp`` every fragment's result comes
   from the PS; a one-fragment static probe gives what an iteration costs besides its
   fragments (the worker's blocking progress report); one static probe alone whether a lone
   job is held back by its link, and the fixed cost of a job that joins alone.
2. fits the simulator's parameters to those probes (`fit`), by bisection on the simulator
   itself (so the fit uses exactly its model of a fragment's path): ``job_setup_s`` is the
   lone probe's fixed cost (joins submitted together queue at the service),
   ``iteration_overhead_s`` the one-fragment probe's time less the simulator's own compute
   and allreduce of one fragment, ``switch_pps`` the packet rate that gives the static
   probes their measured time (``link_gbps`` the lone one's), ``ps_switch_cost`` what a
   packet the PS receives costs the shared CPU, from the esa probe, and ``ps_gbps`` the atp
   probe's (1000 when the shared CPU already explains it); ``ps_processes=1`` (the service
   embeds one PS process), and the emulation's pool, window and lanes. The fit alternates
   until the rates settle.
   With ``--calibrate CDIR ...`` (--emu runs of another workload, say the same one with
   another ``--seed``), ``switch_pps`` and ``ps_switch_cost`` are then refitted to the
   calibration runs' average JCTs (`calibrate`): probes that run the whole time together do
   not show what jobs that arrive, queue and leave cost each other (fitted to probes alone,
   the simulator ran 13-27% fast on the 2026-12-03 runs). The validated workload's own JCTs
   are never fitted to; calibrating on its own runs is refused.
3. runs ``bench.jct --sim`` on ``DIR/workload.csv`` with those parameters into ``DIR/sim``
   and compares each policy's average JCT (`report`): gap = (sim - emu) / emu in %, and
   whether the policies rank the same. ``DIR/validation.json`` and ``DIR/validation.md``
   hold the result (``passed``: every gap within 15% and the same ranking); the same section
   is appended to ``DIR/report.md``. The exit status is 0 when it passed, 1 when it did not. With
   ``--out VDIR`` the rates, ``sim`` and the validation files go to VDIR instead and DIR is
   left as it is, so that fits (say, probes of 2 and of 4 jobs) can be kept side by side.
"""
