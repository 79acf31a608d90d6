"""The fabric: a tree of switches, each with its aggregator pool, and racks of servers under it.

A `Fabric` is one root (the spine; a single switch is a fabric too) and any depth of switches
below it. Every leaf is a ToR and holds a `Rack` of servers; no inner switch does. Each
non-root switch has one logical uplink to its parent, whose rate is the switch's downlink
capacity over its `oversubscription` (a ToR's downlink is servers x server_gbps, an inner
switch's the sum of its children's uplinks). ``lanes`` and ``gpus_per_server`` are
fabric-wide: a packet has the same lanes at every level, and a job's servers are counted
with one figure. Values are checked when made; bad input raises `TopologyError`.

The topology file is JSON, documented with every default's source in ``docs/topology.md``:
`load_fabric` reads it, `dump_fabric` writes it, `parse_fabric` checks a decoded document and
names the file, the switch and the field of each error; ``inasched topology FILE``
(``cli.topology``) prints a file's description or its error. Not ``api.coordinator.topology``:
that is the service's data-plane addresses.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p4ctl.protocol import SUPPORTED_LANES

from scheduler.errors import TopologyError
from scheduler.memory import DEFAULT_LANES, Pool

__all__ = [
    "CHIPS",
    "GPUS_PER_SERVER",
    "OVERSUBSCRIPTION",
    "SERVERS_PER_RACK",
    "SERVER_GBPS",
    "TOFINO1_AGGREGATORS",
    "TOFINO2_AGGREGATORS",
    "Fabric",
    "Rack",
    "Switch",
    "dump_fabric",
    "fabric_dict",
    "load_fabric",
    "parse_fabric",
    "parse_address",
    "two_level_fabric",
]

# 2^14 aggregators x 64 lanes x 4 B = 4 MiB: SwitchML's aggregation budget on a Tofino 1.
# ATP's ~20,000 aggregators of 62 lanes are 4.96 MB, within 20% of it (``inasched bench jct
# --sweep memory=20000`` runs ATP's figure). The JCT benchmark's memory default.
TOFINO1_AGGREGATORS = 16_384
# Assumed: no published INA system states a Tofino 2 budget. p4c's Tofino back end gives both
# chips the same SRAM per MAU stage (80 blocks of 1,024 x 128 b) and Tofino 2 20 stages to
# Tofino 1's 12, so the same program spread over 20/12 the stages holds 20/12 the aggregators.
TOFINO2_AGGREGATORS = TOFINO1_AGGREGATORS * 20 // 12
#: A chip's name, as the topology file may give it for ``aggregators``.
CHIPS: dict[str, int] = {"tofino1": TOFINO1_AGGREGATORS, "tofino2": TOFINO2_AGGREGATORS}
# Philly's 8-GPU servers (philly-traces' cluster_machine_list, e.g. "m31,8,24GB"); Philly has
# smaller ones too, so 8 is a choice, the one scheduler/data's servers_8gpu column makes.
GPUS_PER_SERVER = 8
# Mina's simulator (ClubieDong/MinaSimulator, src/fat_tree.cpp): a k = 16 fat tree, k/2 = 8
# hosts under each edge switch.
SERVERS_PER_RACK = 8
# 100 GbE server links: the SwitchML, ATP and ESA testbeds; Mina's simulator (12.5 GB/s).
SERVER_GBPS = 100.0
# A fat tree has full bisection bandwidth (Al-Fares et al., SIGCOMM'08; Mina's k = 16 tree).
OVERSUBSCRIPTION = 1.0

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _whole(value: object, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TopologyError(f"{what}: must be a whole number >= {minimum}, got {value!r}")
    return value


def _positive(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise TopologyError(f"{what}: must be a number > 0, got {value!r}")
    return float(value)


def _aggregators(value: object, what: str) -> int:
    if isinstance(value, str):
        if value.lower() not in CHIPS:
            chips = ", ".join(CHIPS)
            raise TopologyError(f"{what}: {value!r} is not a chip ({chips}) nor a number")
        return CHIPS[value.lower()]
    return _whole(value, what)


def _lanes(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in SUPPORTED_LANES:
        known = ", ".join(map(str, SUPPORTED_LANES))
        raise TopologyError(f"{what}: must be one of {known}, got {value!r}")
    return value


def parse_address(value: object, what: str) -> tuple[str, int]:
    """``"HOST:PORT"`` -> ``(host, port)``, port 0..65535 (0: any free one, where the switch
    is started here); `TopologyError` naming `what` otherwise."""
    text = value if isinstance(value, str) else ""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise TopologyError(f"{what}: must be HOST:PORT with a port in 0..65535, got {value!r}")
    return host, int(port)


def _network(value: object, what: str) -> ipaddress.IPv4Network:
    """A worker network: an IPv4 CIDR (``10.0.1.0/24``) or one address (a /32)."""
    try:
        if not isinstance(value, str):
            raise ValueError
        return ipaddress.IPv4Network(value)
    except ValueError:
        raise TopologyError(
            f"{what}: must be an IPv4 network (10.0.1.0/24, no host bits) or address, got {value!r}"
        ) from None


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise TopologyError(f"{what}: must be a name of letters, digits, _ . -, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Rack:
    """The servers under one ToR: `servers` of the fabric's GPUs each, on `server_gbps` links,
    and the `networks` (IPv4 CIDRs) their worker processes send from: a worker whose address
    is in one learns this ToR's data address when it joins."""

    servers: int = SERVERS_PER_RACK
    server_gbps: float = SERVER_GBPS
    networks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _whole(self.servers, "servers")
        _positive(self.server_gbps, "server_gbps")
        for i, net in enumerate(self.networks):
            _network(net, f"networks[{i}]")


@dataclass(frozen=True, slots=True)
class Switch:
    """One switch: its pool of `aggregators`, its `parent` (None at the root), the
    `oversubscription` of its uplink (downlink over uplink capacity; 1 at the root, which has
    no uplink), its `rack` if it is a ToR (a leaf), and where a running switch answers: its
    UDP `data` and `p4runtime` addresses (``HOST:PORT``; None: started here on loopback)."""

    name: str
    aggregators: int = TOFINO1_AGGREGATORS
    parent: str | None = None
    oversubscription: float = OVERSUBSCRIPTION
    rack: Rack | None = None
    data: str | None = None
    p4runtime: str | None = None

    def __post_init__(self) -> None:
        _name(self.name, "name")
        _whole(self.aggregators, f"switch {self.name!r}: aggregators")
        if self.parent is not None:
            _name(self.parent, f"switch {self.name!r}: parent")
        _positive(self.oversubscription, f"switch {self.name!r}: oversubscription")
        for key in ("data", "p4runtime"):
            if getattr(self, key) is not None:
                parse_address(getattr(self, key), f"switch {self.name!r}: {key}")


@dataclass(frozen=True, slots=True)
class Fabric:
    """The switches (file order) and the fabric-wide `lanes` and `gpus_per_server`.

    Checked when made: unique names, one root, every parent a switch of the fabric, no cycle,
    a rack on every leaf and on no other switch, the root's oversubscription 1."""

    switches: tuple[Switch, ...]
    lanes: int = DEFAULT_LANES
    gpus_per_server: int = GPUS_PER_SERVER
    _by_name: dict[str, Switch] = field(init=False, repr=False, compare=False)
    _children: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _lanes(self.lanes, "lanes")
        _whole(self.gpus_per_server, "gpus_per_server")
        if not self.switches:
            raise TopologyError("switches: a fabric needs at least one switch")
        by_name: dict[str, Switch] = {}
        for switch in self.switches:
            if switch.name in by_name:
                raise TopologyError(f"switch {switch.name!r}: name: given to two switches")
            by_name[switch.name] = switch
        children: dict[str, list[str]] = {name: [] for name in by_name}
        for switch in self.switches:
            if switch.parent is None:
                continue
            if switch.parent not in by_name:
                known = ", ".join(by_name)
                raise TopologyError(
                    f"switch {switch.name!r}: parent: {switch.parent!r} is not a switch of "
                    f"the fabric ({known})"
                )
            children[switch.parent].append(switch.name)
        roots = [s.name for s in self.switches if s.parent is None]
        if len(roots) != 1:
            what = "none" if not roots else ", ".join(roots)
            raise TopologyError(f"parent: exactly one switch (the root) has none; here {what}")
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_children", {k: tuple(v) for k, v in children.items()})
        for switch in self.switches:
            self._check_place(switch)
        self._check_networks()

    def _check_networks(self) -> None:
        """No worker network under two ToRs (one that holds another is the same network
        twice: a worker in both would have two ToRs); no address given to two switches."""
        seen: list[tuple[ipaddress.IPv4Network, str]] = []
        for tor in self.tors:
            assert tor.rack is not None
            for i, text in enumerate(tor.rack.networks):
                net = _network(text, f"switch {tor.name!r}: rack.networks[{i}]")
                other = next(((n, t) for n, t in seen if n.overlaps(net)), None)
                if other is not None:
                    raise TopologyError(
                        f"switch {tor.name!r}: rack.networks[{i}]: {text} overlaps {other[0]} "
                        f"of {other[1]!r}: a worker's address must name one ToR"
                    )
                seen.append((net, tor.name))
        taken: dict[tuple[str, int], str] = {}
        for switch in self.switches:
            for key in ("data", "p4runtime"):
                text = getattr(switch, key)
                if text is None or parse_address(text, key)[1] == 0:
                    continue
                where = parse_address(text, key)
                if where in taken:
                    raise TopologyError(
                        f"switch {switch.name!r}: {key}: {text} is also {taken[where]}"
                    )
                taken[where] = f"{switch.name!r}'s {key}"

    def _check_place(self, switch: Switch) -> None:
        seen = {switch.name}
        up = switch.parent
        while up is not None:
            if up in seen:
                raise TopologyError(f"switch {switch.name!r}: parent: a cycle through {up!r}")
            seen.add(up)
            up = self._by_name[up].parent
        leaf = not self._children[switch.name]
        if leaf and switch.rack is None:
            raise TopologyError(f"switch {switch.name!r}: rack: a leaf switch (ToR) needs one")
        if not leaf and switch.rack is not None:
            below = ", ".join(self._children[switch.name])
            raise TopologyError(
                f"switch {switch.name!r}: rack: only a leaf (ToR) holds servers; it has "
                f"switches below ({below})"
            )
        if switch.parent is None and switch.oversubscription != OVERSUBSCRIPTION:
            raise TopologyError(
                f"switch {switch.name!r}: oversubscription: the root has no uplink to "
                f"oversubscribe, got {switch.oversubscription!r}"
            )

    def switch(self, name: str) -> Switch:
        """The switch called `name`; raises `TopologyError` naming the fabric's switches."""
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(self._by_name)
            raise TopologyError(f"no switch {name!r} in the fabric ({known})") from None

    @property
    def root(self) -> Switch:
        """The switch with no parent (the spine, or the only switch)."""
        return next(s for s in self.switches if s.parent is None)

    @property
    def tors(self) -> tuple[Switch, ...]:
        """The leaves, each with its rack, in file order: the racks a job is placed on."""
        return tuple(s for s in self.switches if not self._children[s.name])

    def tor_of(self, host: str) -> Switch | None:
        """The ToR whose rack's networks hold the IPv4 address `host` (the longest prefix
        that does), or None: a name, or an address under no ToR."""
        try:
            address = ipaddress.IPv4Address(host)
        except ValueError:
            return None
        best: tuple[int, Switch] | None = None
        for tor in self.tors:
            assert tor.rack is not None
            for text in tor.rack.networks:
                net = ipaddress.IPv4Network(text)
                if address in net and (best is None or net.prefixlen > best[0]):
                    best = (net.prefixlen, tor)
        return None if best is None else best[1]

    def children(self, name: str) -> tuple[str, ...]:
        """The switches whose parent is `name`, in file order."""
        self.switch(name)
        return self._children[name]

    def path_up(self, name: str) -> tuple[str, ...]:
        """`name` and every switch above it, up to the root."""
        path = [self.switch(name).name]
        while (parent := self._by_name[path[-1]].parent) is not None:
            path.append(parent)
        return tuple(path)

    @property
    def levels(self) -> int:
        """Switches on the longest path from a ToR to the root (1 for a single switch)."""
        return max(len(self.path_up(t.name)) for t in self.tors)

    @property
    def servers(self) -> int:
        """Servers in all racks."""
        return sum(t.rack.servers for t in self.tors if t.rack is not None)

    @property
    def gpus(self) -> int:
        """GPUs in all racks."""
        return self.servers * self.gpus_per_server

    def pool(self, name: str) -> Pool:
        """Switch `name`'s aggregator pool, in the memory model's terms."""
        return Pool(self.switch(name).aggregators, self.lanes)

    def downlink_gbps(self, name: str) -> float:
        """What can arrive at `name` from below at once: a ToR's servers' links, an inner
        switch's children's uplinks."""
        switch = self.switch(name)
        if switch.rack is not None:
            return switch.rack.servers * switch.rack.server_gbps
        return sum(self._uplink(child) for child in self._children[name])

    def uplink_gbps(self, name: str) -> float | None:
        """The rate of `name`'s link to its parent (None at the root)."""
        return None if self.switch(name).parent is None else self._uplink(name)

    def _uplink(self, name: str) -> float:
        return self.downlink_gbps(name) / self._by_name[name].oversubscription

    def tree_of(self, tors: Iterable[str]) -> tuple[str, ...]:
        """The switches a job with servers under `tors` aggregates at: those ToRs and every
        switch above them up to their lowest common ancestor, lowest level first (a job in
        one rack: its ToR alone)."""
        paths = [self.path_up(t) for t in dict.fromkeys(tors)]
        if not paths:
            raise TopologyError("tree_of: a job needs at least one ToR")
        for tor in paths:
            if self._children[tor[0]]:
                raise TopologyError(f"tree_of: {tor[0]!r} is not a ToR (it has switches below)")
        common = set(paths[0]).intersection(*paths[1:])
        top = next(s for s in paths[0] if s in common)
        below = [path[: path.index(top) + 1] for path in paths]
        tree: dict[str, None] = {}
        for depth in range(max(len(p) for p in below)):
            for path in below:
                if depth < len(path):
                    tree.setdefault(path[depth])
        return tuple(tree)

    def describe(self) -> str:
        """One line for a report: switches and levels, racks, GPUs, memory, links."""
        tors = self.tors
        racks = [t.rack for t in tors if t.rack is not None]
        inner = [s for s in self.switches if s.rack is None]
        above = f", {_span([s.aggregators for s in inner])} above" if inner else ""
        links = [s.oversubscription for s in self.switches if s.parent is not None]
        over = f"; oversubscription {_span(links)}:1" if links else ""
        n = len(self.switches)
        switches = (
            f"1 switch ({self.root.name})"
            if n == 1
            else f"{n} switches in {self.levels} levels under {self.root.name}"
        )
        return (
            f"{switches}; {len(tors)} rack{'s' * (len(tors) > 1)} of "
            f"{_span([r.servers for r in racks])} servers x {self.gpus_per_server} GPUs = "
            f"{self.gpus:,} GPUs; aggregators {_span([t.aggregators for t in tors])} per ToR"
            f"{above}; {self.lanes} lanes; server links {_span([r.server_gbps for r in racks])} "
            f"Gbps{over}"
        )


def _span(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    fmt = "{:,g}" if any(isinstance(v, float) for v in values) else "{:,}"
    return fmt.format(low) if low == high else f"{fmt.format(low)}-{fmt.format(high)}"


def two_level_fabric(
    racks: int,
    *,
    servers_per_rack: int = SERVERS_PER_RACK,
    gpus_per_server: int = GPUS_PER_SERVER,
    tor_aggregators: int = TOFINO1_AGGREGATORS,
    spine_aggregators: int = TOFINO1_AGGREGATORS,
    server_gbps: float = SERVER_GBPS,
    oversubscription: float = OVERSUBSCRIPTION,
    lanes: int = DEFAULT_LANES,
) -> Fabric:
    """`racks` ToRs (``tor0`` ...) under one ``spine``; one rack is a single ToR, no spine.
    The sweeps' fabric: every field a keyword, each default the sourced one."""
    _whole(racks, "racks")
    rack = Rack(servers_per_rack, server_gbps)
    if racks == 1:
        return Fabric((Switch("tor0", tor_aggregators, rack=rack),), lanes, gpus_per_server)
    tors = tuple(
        Switch(f"tor{i}", tor_aggregators, "spine", oversubscription, rack) for i in range(racks)
    )
    return Fabric((Switch("spine", spine_aggregators), *tors), lanes, gpus_per_server)


_TOP = ("lanes", "gpus_per_server", "switches")
_SWITCH = ("name", "aggregators", "parent", "oversubscription", "rack", "data", "p4runtime")
_RACK = ("servers", "server_gbps", "networks")


def _object(value: object, what: str, keys: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise TopologyError(f"{what}: must be an object ({', '.join(keys)}), got {value!r}")
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise TopologyError(f"{what}.{unknown[0]}: not a field; the fields are {', '.join(keys)}")
    return value


def _switch(value: object, what: str) -> Switch:
    if isinstance(value, dict) and "name" not in value:
        raise TopologyError(f"{what}.name: missing; every switch has a name")
    if isinstance(value, dict):
        what = f"{what} ({_name(value['name'], f'{what}.name')})"
    raw = _object(value, what, _SWITCH)
    name = raw["name"]
    parent = raw.get("parent")
    if parent is not None:
        _name(parent, f"{what}.parent")
    rack = None
    if raw.get("rack") is not None:
        rack_raw = _object(raw["rack"], f"{what}.rack", _RACK)
        networks = rack_raw.get("networks", [])
        if not isinstance(networks, list):
            raise TopologyError(
                f"{what}.rack.networks: must be a list of IPv4 networks, got {networks!r}"
            )
        rack = Rack(
            _whole(rack_raw.get("servers", SERVERS_PER_RACK), f"{what}.rack.servers"),
            _positive(rack_raw.get("server_gbps", SERVER_GBPS), f"{what}.rack.server_gbps"),
            tuple(str(_network(n, f"{what}.rack.networks[{i}]")) for i, n in enumerate(networks)),
        )
    for key in ("data", "p4runtime"):
        if raw.get(key) is not None:
            parse_address(raw[key], f"{what}.{key}")
    if parent is None and "oversubscription" in raw:
        raise TopologyError(
            f"{what}.oversubscription: the root has no uplink to oversubscribe; leave it out"
        )
    return Switch(
        name,
        _aggregators(raw.get("aggregators", TOFINO1_AGGREGATORS), f"{what}.aggregators"),
        parent,
        _positive(raw.get("oversubscription", OVERSUBSCRIPTION), f"{what}.oversubscription"),
        rack,
        raw.get("data"),
        raw.get("p4runtime"),
    )


def parse_fabric(doc: object, where: str = "topology") -> Fabric:
    """The `Fabric` a decoded topology document describes; every `TopologyError` starts with
    `where` and names the field (``switches[1] (tor0).rack.servers``)."""
    top = _object(doc, where, _TOP)
    lanes = _lanes(top.get("lanes", DEFAULT_LANES), f"{where}: lanes")
    gpus = _whole(top.get("gpus_per_server", GPUS_PER_SERVER), f"{where}: gpus_per_server")
    raw = top.get("switches")
    if not isinstance(raw, list) or not raw:
        raise TopologyError(f"{where}: switches: must be a non-empty list of switches, got {raw!r}")
    switches = tuple(_switch(item, f"{where}: switches[{i}]") for i, item in enumerate(raw))
    try:
        return Fabric(switches, lanes, gpus)
    except TopologyError as exc:
        raise TopologyError(f"{where}: {exc}") from None


def _no_constant(word: str) -> float:
    raise ValueError(f"{word} is not a number a topology can hold")


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    repeated = next((k for k in keys if keys.count(k) > 1), None)
    if repeated is not None:
        raise ValueError(f"field {repeated!r} given twice in one object")
    return dict(pairs)


def load_fabric(path: Path | str) -> Fabric:
    """The fabric of the topology file at `path`; raises `TopologyError` naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError(f"cannot read the topology file {path}: {exc}") from None
    try:
        doc = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_repeats)
    except json.JSONDecodeError as exc:
        raise TopologyError(
            f"{path}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:
        raise TopologyError(f"{path}: {exc}") from None
    except RecursionError:
        raise TopologyError(
            f"{path}: not a topology: nested deeper than JSON decoding goes"
        ) from None
    return parse_fabric(doc, str(path))


def fabric_dict(fabric: Fabric) -> dict[str, Any]:
    """The topology document of `fabric`, every field stated (`parse_fabric` reads it back)."""
    switches: list[dict[str, Any]] = []
    for s in fabric.switches:
        entry: dict[str, Any] = {"name": s.name, "aggregators": s.aggregators}
        if s.parent is not None:
            entry |= {"parent": s.parent, "oversubscription": s.oversubscription}
        if s.rack is not None:
            entry["rack"] = {"servers": s.rack.servers, "server_gbps": s.rack.server_gbps}
            if s.rack.networks:
                entry["rack"]["networks"] = list(s.rack.networks)
        entry |= {k: getattr(s, k) for k in ("data", "p4runtime") if getattr(s, k) is not None}
        switches.append(entry)
    return {"lanes": fabric.lanes, "gpus_per_server": fabric.gpus_per_server, "switches": switches}


def dump_fabric(fabric: Fabric, path: Path | str) -> None:
    """Write `fabric` as a topology file (`fabric_dict`, one switch per line)."""
    doc = fabric_dict(fabric)
    lines = ",\n".join(f"    {json.dumps(s)}" for s in doc["switches"])
    head = f'"lanes": {doc["lanes"]}, "gpus_per_server": {doc["gpus_per_server"]}'
    Path(path).write_text(f'{{\n  {head},\n  "switches": [\n{lines}\n  ]\n}}\n', "utf-8")
