"""The topology file and the `Fabric`: round trip, defaults, every error names its field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.jct.params import BenchParams
from cli.topology import main
from scheduler.errors import TopologyError
from scheduler.fabric import (
    GPUS_PER_SERVER,
    OVERSUBSCRIPTION,
    SERVER_GBPS,
    SERVERS_PER_RACK,
    TOFINO1_AGGREGATORS,
    TOFINO2_AGGREGATORS,
    Fabric,
    Rack,
    Switch,
    dump_fabric,
    fabric_dict,
    load_fabric,
    parse_fabric,
    two_level_fabric,
)
from scheduler.memory import DEFAULT_LANES, Pool

EXAMPLE = Path(__file__).resolve().parents[2] / "scheduler" / "data" / "topology-2tors.json"


def _doc(**top: Any) -> dict[str, Any]:
    """A spine over two ToRs, fields only where the test gives them."""
    doc: dict[str, Any] = {
        "switches": [
            {"name": "spine"},
            {"name": "tor0", "parent": "spine", "rack": {}},
            {"name": "tor1", "parent": "spine", "rack": {}},
        ]
    }
    doc.update(top)
    return doc


def _error(doc: object) -> str:
    with pytest.raises(TopologyError) as err:
        parse_fabric(doc, "t.json")
    return str(err.value)


def test_the_example_file_is_two_tors_under_a_spine() -> None:
    fabric = load_fabric(EXAMPLE)
    assert fabric.root.name == "spine"
    assert [t.name for t in fabric.tors] == ["tor0", "tor1"]
    assert fabric == two_level_fabric(2)
    assert fabric.levels == 2 and fabric.gpus == 2 * 8 * 8


def test_the_example_file_is_as_dump_fabric_writes_it(tmp_path: Path) -> None:
    dump_fabric(two_level_fabric(2), tmp_path / "t.json")
    assert (tmp_path / "t.json").read_text() == EXAMPLE.read_text()


def test_a_file_round_trips(tmp_path: Path) -> None:
    fabric = Fabric(
        (
            Switch("core", 65536),
            Switch("agg0", TOFINO2_AGGREGATORS, "core", 2.0),
            Switch("tor0", 1024, "agg0", 3.0, Rack(4, 25.0)),
            Switch("tor1", 2048, "agg0", 1.5, Rack(2, 100.0)),
            Switch("tor2", 4096, "core", 1.0, Rack(16, 400.0)),
        ),
        lanes=256,
        gpus_per_server=4,
    )
    path = tmp_path / "fabric.json"
    dump_fabric(fabric, path)
    assert load_fabric(path) == fabric
    assert parse_fabric(json.loads(path.read_text())) == fabric
    assert fabric_dict(load_fabric(path)) == fabric_dict(fabric)


def test_defaults_are_the_sourced_figures() -> None:
    fabric = parse_fabric(_doc())
    assert (fabric.lanes, fabric.gpus_per_server) == (DEFAULT_LANES, GPUS_PER_SERVER)
    for switch in fabric.switches:
        assert switch.aggregators == TOFINO1_AGGREGATORS == BenchParams().aggregators
    for tor in fabric.tors:
        assert tor.rack == Rack(SERVERS_PER_RACK, SERVER_GBPS)
        assert tor.oversubscription == OVERSUBSCRIPTION
    assert (GPUS_PER_SERVER, SERVERS_PER_RACK, SERVER_GBPS, OVERSUBSCRIPTION) == (8, 8, 100.0, 1.0)
    assert (TOFINO1_AGGREGATORS, TOFINO2_AGGREGATORS) == (16_384, 27_306)


def test_a_chip_name_gives_its_aggregators() -> None:
    doc = _doc()
    doc["switches"][0]["aggregators"] = "tofino2"
    doc["switches"][1]["aggregators"] = "Tofino1"
    fabric = parse_fabric(doc)
    assert fabric.switch("spine").aggregators == TOFINO2_AGGREGATORS
    assert fabric.pool("tor0") == Pool(TOFINO1_AGGREGATORS, DEFAULT_LANES)


def test_link_rates_follow_the_oversubscription() -> None:
    fabric = two_level_fabric(3, servers_per_rack=4, server_gbps=100.0, oversubscription=2.0)
    assert fabric.downlink_gbps("tor0") == 400.0
    assert fabric.uplink_gbps("tor0") == 200.0
    assert fabric.downlink_gbps("spine") == 600.0
    assert fabric.uplink_gbps("spine") is None


def test_a_deeper_tree_and_the_switches_a_job_aggregates_at() -> None:
    fabric = Fabric(
        (
            Switch("core"),
            Switch("agg0", parent="core"),
            Switch("agg1", parent="core"),
            Switch("tor0", parent="agg0", rack=Rack()),
            Switch("tor1", parent="agg0", rack=Rack()),
            Switch("tor2", parent="agg1", rack=Rack()),
        )
    )
    assert fabric.levels == 3
    assert fabric.path_up("tor2") == ("tor2", "agg1", "core")
    assert fabric.tree_of(["tor1"]) == ("tor1",)
    assert fabric.tree_of(["tor0", "tor1"]) == ("tor0", "tor1", "agg0")
    assert fabric.tree_of(["tor2", "tor0"]) == ("tor2", "tor0", "agg1", "agg0", "core")
    with pytest.raises(TopologyError, match="'agg0' is not a ToR"):
        fabric.tree_of(["agg0"])


def test_one_rack_is_a_single_switch() -> None:
    fabric = two_level_fabric(1)
    assert [s.name for s in fabric.switches] == ["tor0"]
    assert fabric.describe().startswith("1 switch (tor0); 1 rack of 8 servers x 8 GPUs = 64 GPUs")


def test_describe_is_one_line_with_the_figures() -> None:
    line = load_fabric(EXAMPLE).describe()
    assert "\n" not in line
    assert line == (
        "3 switches in 2 levels under spine; 2 racks of 8 servers x 8 GPUs = 128 GPUs; "
        "aggregators 16,384 per ToR, 16,384 above; 64 lanes; server links 100 Gbps; "
        "oversubscription 1:1"
    )


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (lambda d: d.update(extra=1), "t.json.extra: not a field"),
        (lambda d: d.update(lanes=63), "t.json: lanes: must be one of 64, 128"),
        (lambda d: d.update(lanes=64.0), "t.json: lanes: must be one of"),
        (lambda d: d.update(gpus_per_server=0), "t.json: gpus_per_server: must be a whole"),
        (lambda d: d.update(switches=[]), "t.json: switches: must be a non-empty list"),
        (lambda d: d.pop("switches"), "t.json: switches: must be a non-empty list"),
        (lambda d: d["switches"].append(3), "t.json: switches[3]: must be an object"),
        (lambda d: d["switches"][1].pop("name"), "t.json: switches[1].name: missing"),
        (lambda d: d["switches"][1].update(name="tor 0"), "t.json: switches[1].name: must be"),
        (lambda d: d["switches"][1].update(name="tor1"), "switch 'tor1': name: given to two"),
        (lambda d: d["switches"][1].update(speed=1), "switches[1] (tor0).speed: not a field"),
        (
            lambda d: d["switches"][1].update(aggregators=0),
            "switches[1] (tor0).aggregators: must be a whole number >= 1, got 0",
        ),
        (lambda d: d["switches"][1].update(aggregators=1.5), "(tor0).aggregators: must be"),
        (lambda d: d["switches"][1].update(aggregators=True), "(tor0).aggregators: must be"),
        (lambda d: d["switches"][1].update(aggregators="tofino9"), "'tofino9' is not a chip"),
        (lambda d: d["switches"][1].update(parent=7), "(tor0).parent: must be a name"),
        (
            lambda d: d["switches"][1].update(parent="spin"),
            "switch 'tor0': parent: 'spin' is not a switch of the fabric (spine, tor0, tor1)",
        ),
        (
            lambda d: d["switches"][1].update(oversubscription=0),
            "(tor0).oversubscription: must be a number > 0, got 0",
        ),
        (lambda d: d["switches"][1].update(oversubscription="2"), "(tor0).oversubscription"),
        (
            lambda d: d["switches"][0].update(oversubscription=2),
            "switches[0] (spine).oversubscription: the root has no uplink",
        ),
        (lambda d: d["switches"][1].update(rack=8), "switches[1] (tor0).rack: must be an object"),
        (lambda d: d["switches"][1].update(rack={"gpus": 8}), "(tor0).rack.gpus: not a field"),
        (
            lambda d: d["switches"][1].update(rack={"servers": 0}),
            "switches[1] (tor0).rack.servers: must be a whole number >= 1, got 0",
        ),
        (lambda d: d["switches"][1].update(rack={"server_gbps": -1}), "(tor0).rack.server_gbps"),
        (lambda d: d["switches"][1].pop("rack"), "switch 'tor0': rack: a leaf switch (ToR) needs"),
        (lambda d: d["switches"][0].update(rack={}), "switch 'spine': rack: only a leaf (ToR)"),
        (lambda d: d["switches"][0].update(parent="tor0"), "exactly one switch (the root)"),
        (lambda d: d["switches"][1].pop("parent"), "exactly one switch (the root) has none; here"),
    ],
)
def test_each_bad_field_is_named(change: Any, names: str) -> None:
    doc = _doc()
    change(doc)
    assert names in _error(doc)


def test_a_cycle_is_named() -> None:
    doc = _doc()
    doc["switches"] += [
        {"name": "a", "parent": "b"},
        {"name": "b", "parent": "a"},
        {"name": "c", "parent": "a", "rack": {}},
    ]
    assert "parent: a cycle through" in _error(doc)


def test_a_document_that_is_not_an_object_is_named() -> None:
    assert _error([1, 2]).startswith("t.json: must be an object")


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("{", "not JSON: Expecting property name"),
        ('{"lanes": NaN, "switches": []}', "NaN is not a number a topology can hold"),
        ('{"lanes": 64, "lanes": 128, "switches": []}', "field 'lanes' given twice"),
        ('{"switches": [{"name": "s", "rack": {"servers": 1e999}}]}', "rack.servers"),
        ("[" * 100_000, "nested deeper than JSON decoding goes"),
    ],
)
def test_a_file_that_is_no_topology_is_named(tmp_path: Path, text: str, names: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TopologyError) as err:
        load_fabric(path)
    assert str(err.value).startswith(str(path)) and names in str(err.value)


def test_a_missing_or_binary_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="cannot read the topology file .*absent.json"):
        load_fabric(tmp_path / "absent.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe")
    with pytest.raises(TopologyError, match="cannot read the topology file"):
        load_fabric(tmp_path / "bin.json")


def test_a_fabric_made_in_code_is_checked_too() -> None:
    with pytest.raises(TopologyError, match="servers: must be a whole number"):
        Rack(0)
    with pytest.raises(TopologyError, match="switch 'x': aggregators"):
        Switch("x", 0)
    with pytest.raises(TopologyError, match="racks: must be a whole number"):
        two_level_fabric(0)
    with pytest.raises(TopologyError, match="no switch 'tor9'"):
        two_level_fabric(2).switch("tor9")


def test_the_command_prints_the_line_or_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(EXAMPLE)]) == 0
    assert capsys.readouterr().out.startswith("3 switches in 2 levels under spine")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_doc(lanes=3)))
    assert main([str(bad)]) == 2
    assert "lanes: must be one of" in capsys.readouterr().err


LOOPBACK = EXAMPLE.with_name("topology-loopback.json")


def test_a_worker_address_names_its_tor() -> None:
    fabric = load_fabric(LOOPBACK)
    assert fabric.tor_of("127.0.1.7") == fabric.switch("tor0")
    assert fabric.tor_of("127.0.2.200") == fabric.switch("tor1")
    assert fabric.tor_of("127.0.0.1") is None
    assert fabric.tor_of("localhost") is None  # names are not resolved here


def test_networks_and_addresses_round_trip(tmp_path: Path) -> None:
    doc = _doc()
    doc["switches"][0]["p4runtime"] = "127.0.0.1:9559"
    doc["switches"][1] |= {"data": "10.0.0.1:9555", "rack": {"networks": ["10.1.0.0/16"]}}
    doc["switches"][2]["rack"] = {"networks": ["10.2.0.5"]}
    fabric = parse_fabric(doc)
    assert fabric.switch("tor1").rack == Rack(networks=("10.2.0.5/32",))
    assert fabric.tor_of("10.2.0.5") == fabric.switch("tor1")
    dump_fabric(fabric, tmp_path / "t.json")
    assert load_fabric(tmp_path / "t.json") == fabric
    assert fabric_dict(fabric)["switches"][1]["data"] == "10.0.0.1:9555"


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (
            lambda d: d["switches"][1].update(rack={"networks": ["10.0.0.1/8"]}),
            "switches[1] (tor0).rack.networks[0]: must be an IPv4 network",
        ),
        (
            lambda d: d["switches"][1].update(rack={"networks": "10.0.0.0/8"}),
            "switches[1] (tor0).rack.networks: must be a list",
        ),
        (
            lambda d: (
                d["switches"][1].update(rack={"networks": ["10.0.0.0/8"]}),
                d["switches"][2].update(rack={"networks": ["10.3.0.0/16"]}),
            ),
            "switch 'tor1': rack.networks[0]: 10.3.0.0/16 overlaps 10.0.0.0/8 of 'tor0'",
        ),
        (
            lambda d: d["switches"][0].update(data="127.0.0.1"),
            "switches[0] (spine).data: must be HOST:PORT",
        ),
        (
            lambda d: d["switches"][2].update(p4runtime="h:70000"),
            "switches[2] (tor1).p4runtime: must be HOST:PORT",
        ),
        (
            lambda d: (
                d["switches"][0].update(data="127.0.0.1:9555"),
                d["switches"][2].update(p4runtime="127.0.0.1:9555"),
            ),
            "switch 'tor1': p4runtime: 127.0.0.1:9555 is also 'spine''s data",
        ),
    ],
)
def test_bad_networks_and_addresses_are_named(change: Any, names: str) -> None:
    doc = _doc()
    change(doc)
    assert names in _error(doc)
