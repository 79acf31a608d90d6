"""The registry of names: every memory policy and priority function by the name users give.

The in-tree registry (as Kubernetes' scheduler framework keeps one): this module imports the
built-in policies and lists them, so no policy registers itself and nothing imports back into
here. The REST schemas, the CLI choices and the service settings take their names from
`policy_names` and `priority_names`. `ABLATIONS` are esa with one mechanism switched off
(`scheduler.ablations`): policies like the others for the simulators and the benchmarks
(`make_policy` builds them), not offered by the service, whose switch cannot run
``esa-norelease``. `FABRIC_POLICIES` decide at which switches of a fabric each job
aggregates (`scheduler.tiered`), with their ablations; the fabric simulator
(`scheduler.fabricsim`) runs them, and every switch policy too (as `PerSwitch`).
"""

from __future__ import annotations

from scheduler.ablations import EsaNoPreemptPolicy, EsaNoReleasePolicy
from scheduler.atp import AtpPolicy
from scheduler.errors import UnknownName
from scheduler.esa import EsaPolicy
from scheduler.policy import Policy, PolicyParams
from scheduler.priority import PRIORITIES, get_priority
from scheduler.static import StaticPolicy
from scheduler.tiered import (
    FabricPolicy,
    PerSwitch,
    TieredLocalPolicy,
    TieredNoSpillPolicy,
    TieredPolicy,
)

__all__ = [
    "ABLATIONS",
    "FABRIC_POLICIES",
    "POLICIES",
    "ablation_names",
    "fabric_policy_names",
    "get_priority",
    "make_fabric_policy",
    "make_policy",
    "policy_class",
    "policy_names",
    "priority_names",
    "register_policy",
]

#: Policy name -> class; ``cls(spec)`` builds one for a `PolicySpec`.
POLICIES: dict[str, type[Policy]] = {
    StaticPolicy.name: StaticPolicy,
    AtpPolicy.name: AtpPolicy,
    EsaPolicy.name: EsaPolicy,
}

#: Ablations of esa, by name; built like the policies, run by the simulators only.
ABLATIONS: dict[str, type[Policy]] = {
    EsaNoReleasePolicy.name: EsaNoReleasePolicy,
    EsaNoPreemptPolicy.name: EsaNoPreemptPolicy,
}


#: Fabric policies (and their ablations), by name; run by the fabric simulator only.
FABRIC_POLICIES: dict[str, type[FabricPolicy]] = {
    TieredPolicy.name: TieredPolicy,
    TieredNoSpillPolicy.name: TieredNoSpillPolicy,
    TieredLocalPolicy.name: TieredLocalPolicy,
}


def register_policy(name: str, cls: type[Policy]) -> None:
    """Add (or replace) policy `name`, for a policy defined outside this package."""
    POLICIES[name] = cls


def policy_class(name: str) -> type[Policy]:
    """The policy (or ablation) class registered as `name`, whose class attributes say how
    its switch rule behaves; raises `UnknownName`."""
    cls = POLICIES.get(name) or ABLATIONS.get(name)
    if cls is None:
        known = ", ".join(sorted((*POLICIES, *ABLATIONS)))
        raise UnknownName(f"unknown policy {name!r}; known: {known}")
    return cls


def make_policy(spec: PolicyParams) -> Policy:
    """A new policy (or ablation) as `spec` says."""
    return policy_class(spec.policy)(spec)


def make_fabric_policy(name: str, spec: PolicyParams) -> FabricPolicy:
    """Fabric policy `name` with `spec`'s priority function, levels and aging, or switch
    policy (or ablation) `name` on every switch as `PerSwitch`; raises `UnknownName`."""
    cls = FABRIC_POLICIES.get(name)
    if cls is not None:
        return cls(spec)
    if name not in POLICIES and name not in ABLATIONS:
        known = ", ".join(sorted((*POLICIES, *ABLATIONS, *FABRIC_POLICIES)))
        raise UnknownName(f"unknown policy {name!r}; known: {known}")
    return PerSwitch(spec, name)


def fabric_policy_names() -> tuple[str, ...]:
    """Registered fabric policies, in registration order (``tiered``, its ablations)."""
    return tuple(FABRIC_POLICIES)


def policy_names() -> tuple[str, ...]:
    """Registered policy names, in registration order (``static``, ``atp``, ``esa``, ...)."""
    return tuple(POLICIES)


def ablation_names() -> tuple[str, ...]:
    """Registered ablations, in registration order (``esa-norelease``, ``esa-nopreempt``)."""
    return tuple(ABLATIONS)


def priority_names() -> tuple[str, ...]:
    """Registered priority function names, sorted (``fifo``, ``las``, ``srtf``, ``static``)."""
    return tuple(sorted(PRIORITIES))
