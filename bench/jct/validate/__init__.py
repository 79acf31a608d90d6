"""Validation of ``--sim`` against ``--emu`` on one small workload.

    python -m bench.jct.validate --emu-out DIR [--repeats DIR2 ...] [--calibrate CDIR ...]
                                 [--rates FILE] [--out VDIR] [...]

`DIR` is an ``inasched bench jct ... --emu`` output folder; `--repeats` names more runs of the
same workload, averaged with it. The command (`cli`) measures the loopback with probe jobs
only, never the validated workload (`probe`); fits the simulator's parameters to the probes
by bisection on the simulator itself (`fit`): job set-up, per-iteration overhead, switch
packet rate, link, PS cost; with ``--calibrate`` refits the switch's rate and the PS's cost to
the average JCTs of ``--emu`` runs of another workload (`calibrate`), because probes that run
together do not show what arriving and leaving jobs cost each other (calibrating on the
validated runs is refused); then runs ``--sim`` on ``DIR/workload.csv`` and compares each
policy's average JCT (`report`). ``DIR/validation.json`` and ``validation.md`` hold the result
(passed: every gap within 15% and the same ranking); the exit status is 0 when it passed.
"""
