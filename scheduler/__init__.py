"""inasched's scheduler: memory policies, priority functions, and two simulators.

The service builds one `Scheduler`, hands it a frozen snapshot of every live job on each job
event (``decide``) and gets typed decisions back: ``Admit``, ``Queue`` (an expected "no room",
not an error), ``Reject``, ``SetPriority`` and ``Reclaim`` (idempotent). The one
`DecisionApplier` (`scheduler.applier`) applies them in order to a `JobStore` and a ``p4ctl``
`SwitchBackend`; the service and both simulators use it. Policies are pure and read no clock:
the service passes wall time, the simulators virtual time. Lifecycle changes go through
`check_transition`, which raises `IllegalTransition`; every deliberate error derives from
`SchedulerError`. Policy and priority names are listed in `scheduler.registry`.

``simulate`` is the aggregate (fluid) model, whole workloads in seconds of CPU;
``simulate_fragments`` is the packet-level reference that drives ``p4ctl.rule.process``. Both
return a `RunResult`; ``simulate_fabric`` runs the fluid model on a fabric of switches
(``docs/fabric.md``). ``docs/scheduler.md`` shows the calls and states both models.
"""

from scheduler.applier import DecisionApplier, JobStore
from scheduler.clock import Clock, VirtualClock, WallClock
from scheduler.config import RunResult, SimConfig, UtilSample
from scheduler.errors import (
    IllegalTransition,
    MemoryConflict,
    PsUnavailable,
    SchedulerError,
    UnknownName,
    WorkloadError,
)
from scheduler.fabricsim import simulate_fabric
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
from scheduler.scheduler import Scheduler, too_wide
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
    "PsUnavailable",
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
    "simulate_fabric",
    "simulate_fragments",
    "too_wide",
    "write_workload",
]
