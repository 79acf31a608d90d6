"""inasched's scheduler: memory policies, priority functions, and two simulators.

For the REST service
--------------------
Build one `Scheduler` from a `PolicySpec` and call ``decide`` on every job event::

    sched = Scheduler(PolicySpec("esa", "srtf", levels=16, aging_s=60.0),
                      Pool(aggregators=8192, lanes=64), seed=0)
    snap = sched.snapshot(now=clock.now(), jobs=[JobView(...), ...])  # every live job, plus
    decisions = sched.decide(snap)  # terminal ones still holding memory

and hand them to the one `DecisionApplier` (``scheduler.applier``), which applies them in order
to a `JobStore` and a ``p4ctl`` `SwitchBackend`; the service and both simulators use it:

- ``Admit(job_id, partition, hash_seed, shared_pool)``: job -> admitted; store the partition
  (static) or hash seed and shared pool (atp/esa, aggregators ``0 .. shared_pool - 1``, below
  every partition in use); reserve it (`MemoryMap.reserve` / ``reserve_shared``).
- ``Queue(job_id, reason)``: stays queued (expected "no room"; not an error).
- ``Reject(job_id, reason)``: job -> failed; show `reason` to the user.
- ``SetPriority(job_id, level)``: the job's ``job_table`` priority := ``level`` (higher wins).
- ``Reclaim(job_id, partition)``: free the job's memory and its switch job id; idempotent.

The applier keeps each admitted job's `Placement` (switch job id, switch rule, partition or
hash seed and shared pool): what a joining worker is told and the switch is given. Lifecycle
changes go through ``check_transition(job_id, old, new)`` (``DecisionApplier.transition``),
which raises `IllegalTransition` (map to HTTP 409). Every deliberate error derives from
`SchedulerError`. Policy and priority names are listed in `scheduler.registry`
(`policy_names`, `priority_names`). Policies are pure and read no clock: the service passes
wall time, the simulators virtual time.

Simulation
----------
``simulate(load_workload("philly"), SimConfig(PolicySpec("esa")))`` is the aggregate model
(whole workloads in seconds of CPU); ``simulate_fragments`` is the packet-level reference
that drives ``p4ctl.rule.process``. Both return a `RunResult`. Workload names:
``philly``, ``synthetic-N``, or a path to a workload CSV (format in `scheduler.workload`).
"""

from scheduler.applier import DecisionApplier, JobStore
from scheduler.clock import Clock, VirtualClock, WallClock
from scheduler.config import RunResult, SimConfig, UtilSample
from scheduler.errors import (
    IllegalTransition,
    MemoryConflict,
    SchedulerError,
    UnknownName,
    WorkloadError,
)
from scheduler.fragsim import simulate_fragments
from scheduler.jobs import JobResult
from scheduler.memory import JobState, MemoryMap, Partition, Pool, check_transition
from scheduler.policy import Policy
from scheduler.priority import PRIORITIES, levels, register_priority
from scheduler.registry import (
    POLICIES,
    make_policy,
    policy_class,
    policy_names,
    priority_names,
    register_policy,
)
from scheduler.scheduler import Scheduler
from scheduler.simulator import simulate
from scheduler.snapshot import (
    Admit,
    Decision,
    JobView,
    Queue,
    Reclaim,
    Reject,
    SetPriority,
    Snapshot,
    hash_seed,
)
from scheduler.spec import PolicySpec
from scheduler.workload import JobSpec, load_workload, read_workload, write_workload

__all__ = [
    "Admit",
    "Clock",
    "Decision",
    "DecisionApplier",
    "IllegalTransition",
    "JobResult",
    "JobSpec",
    "JobState",
    "JobStore",
    "JobView",
    "MemoryConflict",
    "MemoryMap",
    "POLICIES",
    "PRIORITIES",
    "Partition",
    "Policy",
    "PolicySpec",
    "Pool",
    "Queue",
    "Reclaim",
    "Reject",
    "RunResult",
    "Scheduler",
    "SchedulerError",
    "SetPriority",
    "SimConfig",
    "Snapshot",
    "UnknownName",
    "UtilSample",
    "VirtualClock",
    "WallClock",
    "WorkloadError",
    "check_transition",
    "hash_seed",
    "levels",
    "load_workload",
    "make_policy",
    "policy_class",
    "policy_names",
    "priority_names",
    "read_workload",
    "register_policy",
    "register_priority",
    "simulate",
    "simulate_fragments",
    "write_workload",
]
