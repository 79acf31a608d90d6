"""The P4 sources against the contracts they implement, without p4c.

The declarations of ``p4/*.p4`` and ``p4/include/*.p4`` are parsed (tables with keys, widths,
actions and sizes; actions with parameters; registers; counters), turned into a P4Info and
compared with the committed ``p4/build/inasched.p4info.txtpb`` by the same function `make p4`
uses on p4c's output. Header fields, sizing constants and protocol constants are compared with
`p4ctl.protocol`, `p4ctl.p4info` and `p4ctl.rule` in both directions.
"""

from __future__ import annotations

import itertools
import logging
import re
from dataclasses import dataclass, fields
from pathlib import Path
from types import SimpleNamespace

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4ctl import build, p4info
from p4ctl.protocol import (
    HEADER_FIELDS,
    MAX_JOBS,
    MAX_WORKERS,
    PS_WORKER_ID,
    VERSION,
    AggState,
    DropReason,
    Flag,
    Kind,
    Packet,
    Policy,
)
from p4ctl.rule import JobConfig, Outcome, Registers, process
from p4ctl.switch_engine import JOB_COLUMNS

P4_DIR = build.P4_DIR
INCLUDE_DIR = P4_DIR / "include"

# v1model's standard_metadata fields that tables may match on.
STANDARD_METADATA_WIDTHS = {"egress_port": 9, "ingress_port": 9}


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def _sources() -> dict[Path, str]:
    files = [*sorted(P4_DIR.glob("*.p4")), *sorted(INCLUDE_DIR.glob("*.p4"))]
    return {path: _strip_comments(path.read_text()) for path in files}


@pytest.fixture(scope="module")
def source() -> str:
    return "\n".join(_sources().values())


@pytest.fixture(scope="module")
def sizing() -> dict[str, int]:
    return build.read_sizing()


def _value(token: str, sizing: dict[str, int]) -> int:
    return sizing[token] if token in sizing else int(token, 0)


def _block(text: str, start: int) -> str:
    """The text between the brace at or after `start` and its match."""
    open_at = text.index("{", start)
    depth = 0
    for pos in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[pos], 0)
        if depth == 0:
            return text[open_at + 1 : pos]
    raise AssertionError("unbalanced braces")


def _headers(text: str) -> dict[str, list[tuple[str, str, int]]]:
    """header type -> [(field, 'bit' | 'int', width)]."""
    found = {}
    for match in re.finditer(r"\bheader\s+(\w+)\s*\{", text):
        body = _block(text, match.start())
        fields = re.findall(r"\b(bit|int)<(\d+)>\s+(\w+)\s*;", body)
        found[match.group(1)] = [(name, kind, int(width)) for kind, width, name in fields]
    return found


def _key_width(expr: str, text: str, headers: dict[str, list[tuple[str, str, int]]]) -> int:
    parts = expr.split(".")
    if parts[0] == "standard_metadata":
        return STANDARD_METADATA_WIDTHS[parts[1]]
    assert parts[0] == "hdr", f"key {expr} is not a header or standard_metadata field"
    members = dict(
        (name, kind) for kind, name in re.findall(r"(\w+)\s+(\w+)\s*;", _struct(text, "headers_t"))
    )
    fields = {name: width for name, _, width in headers[members[parts[1]]]}
    return fields[parts[2]]


def _struct(text: str, name: str) -> str:
    return _block(text, re.search(rf"\bstruct\s+{name}\s*\{{", text).start())


ANNOTATION = r'@name\("\.(?P<name>\w+)"\)\s*@id\((?P<id>\w+)\)\s*'
# An action declaration with the annotations in front of it.
ACTION = re.compile(
    r"(?P<annotations>(?:@\w+(?:\([^)]*\))?\s*)*)"
    r"\baction\s+(?P<local>\w+)\s*\((?P<params>[^)]*)\)"
)
PKGINFO = re.compile(r"@pkginfo\((?P<fields>[^)]*)\)\s*V1Switch\s*\(")


@dataclass(frozen=True)
class DeclaredAction:
    """An action as declared: its local name, and its P4Info name and id if annotated."""

    local: str
    name: str | None
    id: int | None
    hidden: bool
    params: list[tuple[str, int]]


def declared_actions(text: str) -> list[DeclaredAction]:
    """Every action `text` declares, top-level or in a control, in source order; `local` is
    qualified by the control type it is declared in (``OnPartial.flush``)."""
    controls = []
    for c in re.finditer(r"\bcontrol\s+(\w+)\s*\(", text):
        start = text.index("{", c.end())
        controls.append((c[1], start, start + len(_block(text, start))))
    found = []
    for m in ACTION.finditer(text):
        annotations = m["annotations"]
        name = re.search(r'@name\("\.(\w+)"\)', annotations)
        id_ = re.search(r"@id\((\w+)\)", annotations)
        inside = [c for c, start, end in controls if start < m.start("local") < end]
        found.append(
            DeclaredAction(
                local=".".join([*inside[-1:], m["local"]]),
                name=name[1] if name else None,
                id=int(id_[1], 0) if id_ else None,
                hidden=re.search(r"@hidden\b", annotations) is not None,
                params=[(p, int(w)) for w, p in re.findall(r"bit<(\d+)>\s+(\w+)", m["params"])],
            )
        )
    return found


def p4info_from_source(text: str, sizing: dict[str, int]) -> p4info_pb2.P4Info:
    """The P4Info the declarations in `text` describe (what p4c would emit for them).

    p4c's rule for actions: every action the program declares that is not ``@hidden`` is in
    the P4Info, whether a table uses it or not; one without ``@name`` keeps its local name
    here (p4c would qualify it by its control, and it is in the committed P4Info either way).
    """
    info = p4info_pb2.P4Info()
    pkginfo = PKGINFO.search(text)
    if pkginfo:
        fields = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', pkginfo["fields"]))
        info.pkg_info.name = fields.get("name", "")
        info.pkg_info.version = fields.get("version", "")
    if re.search(r"\bV1Switch\s*\(", text):
        info.pkg_info.arch = "v1model"
    headers = _headers(text)
    local_action_ids: dict[str, int] = {}
    for declared in declared_actions(text):
        if declared.hidden:
            continue
        action = info.actions.add()
        action.preamble.id = declared.id or 0
        action.preamble.name = action.preamble.alias = declared.name or declared.local
        for pid, (pname, width) in enumerate(declared.params, start=1):
            action.params.add(id=pid, name=pname, bitwidth=width)
        local_action_ids[declared.local.rsplit(".", 1)[-1]] = action.preamble.id

    for m in re.finditer(ANNOTATION + r"table\s+(?P<local>\w+)", text):
        body = _block(text, m.end())
        table = info.tables.add()
        table.preamble.id = int(m["id"], 0)
        table.preamble.name = table.preamble.alias = m["name"]
        keys = re.findall(r'([\w.]+)\s*:\s*exact\s*@name\("(\w+)"\)\s*;', _block(body, 0))
        for fid, (expr, kname) in enumerate(keys, start=1):
            table.match_fields.add(
                id=fid,
                name=kname,
                bitwidth=_key_width(expr, text, headers),
                match_type=p4info_pb2.MatchField.EXACT,
            )
        actions_at = re.search(r"\bactions\s*=", body).end()
        for local in re.findall(r"(\w+)\s*;", _block(body, actions_at)):
            table.action_refs.add(id=local_action_ids[local])
        table.size = _value(re.search(r"\bsize\s*=\s*(\w+)\s*;", body)[1], sizing)

    pattern = ANNOTATION + r"register<bit<(?P<width>\d+)>>\((?P<size>\w+)\)\s+\w+\s*;"
    for m in re.finditer(pattern, text):
        register = info.registers.add()
        register.preamble.id = int(m["id"], 0)
        register.preamble.name = register.preamble.alias = m["name"]
        register.type_spec.bitstring.bit.bitwidth = int(m["width"])
        register.size = _value(m["size"], sizing)

    units = {"packets_and_bytes": p4info_pb2.CounterSpec.BOTH}
    pattern = ANNOTATION + r"counter\((?P<size>\w+),\s*CounterType\.(?P<unit>\w+)\)\s+\w+\s*;"
    for m in re.finditer(pattern, text):
        counter = info.counters.add()
        counter.preamble.id = int(m["id"], 0)
        counter.preamble.name = counter.preamble.alias = m["name"]
        counter.spec.unit = units[m["unit"]]
        counter.size = _value(m["size"], sizing)
    return info


def _committed() -> p4info_pb2.P4Info:
    return text_format.Parse(p4info.COMMITTED_P4INFO.read_text(), p4info_pb2.P4Info())


# ---------------------------------------------------------------------------- layout


def test_every_include_file_is_included_from_the_top_level_file() -> None:
    top = (P4_DIR / "inasched.p4").read_text()
    included = set(re.findall(r'^#include\s+"include/([\w.]+)"', top, flags=re.MULTILINE))
    present = {path.name for path in INCLUDE_DIR.glob("*")}
    assert present - included == set(), "files in p4/include that inasched.p4 does not include"
    assert included - present == set(), "inasched.p4 includes files that do not exist"


def test_each_include_file_declares_at_most_one_control() -> None:
    for path, text in _sources().items():
        if path.parent == INCLUDE_DIR:
            controls = re.findall(r"^\s*control\s+(\w+)", text, flags=re.MULTILINE)
            assert len(controls) <= 1, f"{path.name} declares {controls}"


def test_the_p4_directory_is_not_a_python_package() -> None:
    # The p4runtime distribution owns the import name `p4`.
    assert not (P4_DIR / "__init__.py").exists()


# ---------------------------------------------------------------------------- P4Info


def test_declarations_match_the_committed_p4info(source: str, sizing: dict[str, int]) -> None:
    assert build.compare_p4info(p4info_from_source(source, sizing), _committed()) == []


def test_p4info_actions_are_the_declared_actions_that_are_not_hidden(source: str) -> None:
    # p4c's rule: every declared action that is not @hidden is in the P4Info, each under its
    # @name; the committed P4Info has no other.
    shown = [a for a in declared_actions(source) if not a.hidden]
    assert [a.local for a in shown if a.name is None or a.id is None] == [], "no @name/@id"
    committed = {a.preamble.name: a.preamble.id for a in _committed().actions}
    assert {a.name: a.id for a in shown} == committed


def test_actions_no_table_uses_are_hidden(source: str) -> None:
    in_tables = {
        local
        for m in re.finditer(r"\bactions\s*=", source)
        for local in re.findall(r"(\w+)\s*;", _block(source, m.end()))
    }
    unused = [a.local for a in declared_actions(source) if a.local.split(".")[-1] not in in_tables]
    assert unused, "the rule's output actions are called directly"
    for action in declared_actions(source):
        if action.local in unused:
            assert action.hidden, f"{action.local}: no table uses it, so p4c would list it"


def test_an_action_that_loses_hidden_joins_the_p4info_p4c_emits(
    source: str, sizing: dict[str, int]
) -> None:
    shown = source.replace("@hidden\naction out_sum(", "action out_sum(")
    assert shown != source
    assert build.compare_p4info(p4info_from_source(shown, sizing), _committed()) == [
        "action out_sum: in the emitted P4Info, not the committed one"
    ]


def test_pkginfo_on_main_gives_the_committed_pkg_info(source: str, sizing: dict[str, int]) -> None:
    assert p4info_from_source(source, sizing).pkg_info == _committed().pkg_info
    bare = PKGINFO.sub("V1Switch(", source)
    (problem,) = build.compare_p4info(p4info_from_source(bare, sizing), _committed())
    assert problem.startswith("pkg_info: emitted {'name': '', 'version': ''")


def test_every_table_register_and_counter_carries_its_p4info_name_and_id(source: str) -> None:
    for kind, declared in (
        ("table", r"\btable\s+\w+\s*\{"),
        ("register", r"\bregister<"),
        ("counter", r"\bcounter\("),
    ):
        everywhere = len(re.findall(declared, source))
        annotated = len(re.findall(ANNOTATION + declared.removeprefix(r"\b"), source))
        assert everywhere == annotated, f"a {kind} without @name/@id"


def test_each_register_array_is_read_and_written_at_most_once_per_pass(source: str) -> None:
    registers = re.findall(r"register<bit<\d+>>\(\w+\)\s+(\w+)\s*;", source)
    assert len(registers) == len(_committed().registers)
    for register in registers:
        reads = len(re.findall(rf"\b{register}\.read\(", source))
        writes = len(re.findall(rf"\b{register}\.write\(", source))
        assert reads <= 1 and writes <= 1, f"{register}: {reads} reads, {writes} writes"


def test_the_job_priority_is_a_job_table_parameter_as_the_soft_switch_reads_it(
    source: str,
) -> None:
    # PI (BMv2's P4Runtime server) refuses register writes: the scheduler's one per-job value
    # must be table data, and the P4 program, the Python rule and the compiled engine's job
    # row must all take it from the job's entry.
    set_job = next(a for a in _committed().actions if a.preamble.name == "set_job")
    assert ("priority", 8) in [(p.name, p.bitwidth) for p in set_job.params]
    body = re.search(r"\baction\s+set_job\s*\([^)]*\)\s*\{(?P<body>[^}]*)\}", source)
    assert body is not None and "meta.job_priority = priority;" in body["body"]
    assert "job_priority" not in {r.preamble.name for r in _committed().registers}
    assert not re.search(r"\bjob_priority\.(read|write)\(", source)
    assert "priority" in {f.name for f in fields(JobConfig)}
    assert "priority" in JOB_COLUMNS


def test_parser_selects_only_on_fields(source: str) -> None:
    # BMv2 loads a select key only if it is a field, a stack field or a lookahead; p4c hands a
    # member such as a stack's lastIndex through as an expression, which BMv2 refuses.
    keys = [
        key.strip()
        for keyset in re.findall(r"\bselect\s*\(([^)]*)\)", source)
        for key in keyset.split(",")
    ]
    assert keys
    for key in keys:
        assert re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", key), key
        assert key.rsplit(".", 1)[-1] not in {"lastIndex", "size", "next"}, key


def test_compare_p4info_names_a_changed_width() -> None:
    changed = _committed()
    changed.registers[0].type_spec.bitstring.bit.bitwidth = 8
    (problem,) = build.compare_p4info(changed, _committed())
    assert problem.startswith("register agg_job")


def test_compare_p4info_names_a_changed_pkg_info() -> None:
    changed = _committed()
    changed.pkg_info.version = "2"
    (problem,) = build.compare_p4info(changed, _committed())
    assert problem == (
        "pkg_info: emitted {'name': 'inasched', 'version': '2', 'arch': 'v1model'}, "
        "committed {'name': 'inasched', 'version': '1', 'arch': 'v1model'}"
    )
    # A running pipeline with its own extras is still held to the package it claims to be.
    assert build.compare_p4info(changed, _committed(), extra_ok=True) == [problem]


def test_controller_accepts_a_compilers_p4info_with_its_own_extras() -> None:
    # What a compiler adds: package info, annotations, documentation, actions of its own. The
    # control plane needs only names, ids, widths and sizes, so SwitchClient accepts it.
    compiled = p4info_pb2.P4Info()
    compiled.CopyFrom(_committed())
    compiled.pkg_info.arch = "v1model"
    compiled.tables[0].preamble.annotations.append("@noWarn")
    compiled.registers[0].preamble.doc.brief = "written by the scheduler"
    extra = compiled.actions.add()
    extra.preamble.id, extra.preamble.name = 0x01FFFFFF, "compiler_only_action"
    assert p4info.compare_p4info(compiled, _committed(), extra_ok=True) == []
    assert p4info.compare_p4info(compiled, _committed()) == [
        "action compiler_only_action: in the emitted P4Info, not the committed one"
    ]
    compiled.registers[0].size += 1
    (problem,) = p4info.compare_p4info(
        compiled, _committed(), extra_ok=True, labels=("running", "inasched")
    )
    assert problem.startswith("register agg_job: running (")


# ---------------------------------------------------------------------------- protocol


def test_agg_header_is_protocol_header_fields(source: str) -> None:
    fields = _headers(source)["agg_h"]
    # A lower-case struct code is a signed field.
    expected = [
        (name, "int" if code.islower() else "bit", width) for name, code, width in HEADER_FIELDS
    ]
    assert fields == expected
    assert sum(width for _, _, width in fields) == 24 * 8


def test_sizing_constants_equal_their_python_twins_both_ways(sizing: dict[str, int]) -> None:
    twins = {
        "LANES": p4info.DEFAULT_LANES,
        "AGGREGATORS": p4info.DEFAULT_AGGREGATORS,
        "MAX_JOBS": MAX_JOBS,
        "MAX_WORKERS": MAX_WORKERS,
        "DROP_REASONS": len(DropReason),
        "WORKER_TABLE_SIZE": p4info.WORKER_TABLE_SIZE,
        "PORT_TABLE_SIZE": p4info.MAX_PORTS,
        "CLONE_SESSION": p4info.CLONE_SESSION,
    }
    p4_only = {"AGG_UDP_PORT", "FIELD_LIST_ROUTE"}
    assert {name: sizing.get(name) for name in twins} == twins
    assert set(sizing) - set(twins) == p4_only, "a sizing constant with no twin and no reason"


def test_every_sizing_constant_says_why() -> None:
    lines = build.SIZING_P4.read_text().splitlines()
    for n, line in enumerate(lines):
        if re.match(r"#define\s+[A-Z_]+\s+\d+", line):
            above = lines[n - 2] if lines[n - 1].startswith("#ifndef") else lines[n - 1]
            assert above.startswith("//"), f"no comment above {line!r}"


# Two levels (p4/PROTOCOL.md section 7) are in the rule and the engine; the P4 program follows
# (p4/vectors/two_level.json is marked not_in_p4 for the same reason). Empty this set then.
# Kept by (enum, name): Kind.UP == Flag.EVICTED == 4 as ints.
NOT_IN_P4_YET = frozenset(
    (type(m), m.name) for m in (Kind.UP, Outcome.PARENT_RESULT, Outcome.RESEND_UP)
)


@pytest.mark.parametrize(
    ("prefix", "enum"),
    [
        ("KIND_", Kind),
        ("FLAG_", Flag),
        ("STATE_", AggState),
        ("POLICY_", Policy),
        ("DROP_", DropReason),
    ],
)
def test_protocol_constants_equal_the_python_enums(source: str, prefix: str, enum: type) -> None:
    declared = {
        name.removeprefix(prefix): int(value, 0)
        for name, value in re.findall(rf"const\s+bit<\d+>\s+({prefix}\w+)\s*=\s*(\w+)\s*;", source)
    }
    expected = {
        member.name: int(member)
        for member in enum
        if member.name != "NONE" and (enum, member.name) not in NOT_IN_P4_YET
    }
    assert declared == expected


def test_outcome_constants_name_every_rule_outcome(source: str) -> None:
    declared = set(re.findall(r"const\s+bit<\d+>\s+OUTCOME_(\w+)\s*=", source))
    assert declared == {o.name for o in Outcome if (Outcome, o.name) not in NOT_IN_P4_YET}


def test_version_and_ps_worker_id_are_the_protocols(source: str) -> None:
    consts = dict(re.findall(r"const\s+bit<\d+>\s+(\w+)\s*=\s*(\w+)\s*;", source))
    assert int(consts["VERSION"], 0) == VERSION
    assert int(consts["PS_WORKER_ID"], 0) == PS_WORKER_ID


# ---------------------------------------------------------------------------- rule


def _p4_condition(expr: str, names: dict[str, object]) -> bool:
    """A boolean P4 expression of names, fields, ==, !=, &, casts, &&, || and !, evaluated."""
    python = re.sub(r"\((?:bit|int)<\d+>\)", "", expr).replace("&&", " and ")
    python = re.sub(r"!(?!=)", " not ", python.replace("||", " or "))
    return bool(eval(python, {"__builtins__": {}}, names))


def _local(text: str, name: str) -> str:
    return " ".join(re.search(rf"\bbool\s+{name}\s*=\s*([^;]+);", text)[1].split())


def _rule_takes_as_side(policy: Policy, resend: bool, raw: bool, exponent: int) -> bool:
    """Whether rule.process keeps a contribution out of its own PARTIAL sum (the sender is
    not in it yet): RAW_BYPASS or FLUSHED instead of AGGREGATED."""
    cfg = JobConfig(1, policy, fan_in=3, part_size=1, mcast_group=1, ps_port=9)
    regs = Registers(1, 0)
    process(regs, Packet(Kind.GRADIENT, 1, worker=0, fan_in=3, bitmap=1), {1: cfg})
    flags = (Flag.RESEND if resend else Flag.NONE) | (Flag.RAW_FLOAT if raw else Flag.NONE)
    pkt = Packet(Kind.GRADIENT, 1, worker=1, fan_in=3, bitmap=2, flags=flags, exponent=exponent)
    outcome = process(regs, pkt, {1: cfg}).outcome
    assert outcome in (Outcome.AGGREGATED, Outcome.RAW_BYPASS, Outcome.FLUSHED), outcome
    return outcome != Outcome.AGGREGATED


@pytest.mark.parametrize(("policy", "rule_file"), [
    (Policy.STATIC, "static_rule.p4"),
    (Policy.ATP, "shared_rule.p4"),
    (Policy.ESA, "shared_rule.p4"),
])  # fmt: skip
def test_on_partial_keeps_out_of_the_sum_what_the_rule_keeps_out(
    source: str, policy: Policy, rule_file: str
) -> None:
    # rule._on_partial: `_is_side(...) or (resend and flushed_state == _FREE)`. OnPartial's
    # `side` is evaluated with the flushed_state its caller passes, against rule.process.
    on_partial = _strip_comments((INCLUDE_DIR / "on_partial.p4").read_text())
    caller = _strip_comments((INCLUDE_DIR / rule_file).read_text())
    constants = {
        name: int(value, 0)
        for name, value in re.findall(r"const\s+bit<\d+>\s+(\w+)\s*=\s*(\w+)\s*;", source)
    }
    flushed_state = constants[re.search(r"on_partial\.apply\(hdr,\s*meta,\s*(\w+)\)", caller)[1]]
    held = SimpleNamespace(exponent=0)
    for resend, raw, exponent in itertools.product((False, True), (False, True), (0, 1)):
        flags = (int(Flag.RESEND) if resend else 0) | (int(Flag.RAW_FLOAT) if raw else 0)
        names: dict[str, object] = {
            **constants,
            "hdr": SimpleNamespace(agg=SimpleNamespace(flags=flags, exponent=exponent)),
            "meta": SimpleNamespace(held=held),
            "flushed_state": flushed_state,
        }
        for local in ("resend", "shared_pool", "side"):
            if re.search(rf"\bbool\s+{local}\s*=", on_partial):
                names[local] = _p4_condition(_local(on_partial, local), names)
        want = _rule_takes_as_side(policy, resend, raw, exponent)
        assert names["side"] == want, (policy.name, f"resend={resend} raw={raw} exp={exponent}")


# ---------------------------------------------------------------------------- build


def test_generated_lanes_file_is_the_template_expanded(sizing: dict[str, int]) -> None:
    assert build.LANES_P4.read_text() == build.render_lanes(sizing["LANES"])


def test_make_p4_without_p4c_says_so_and_succeeds(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="p4ctl.build"):
        assert build.main(["--check", "--p4c", "p4c-that-is-not-installed"]) == 0
    assert "p4c is not on PATH" in caplog.text
