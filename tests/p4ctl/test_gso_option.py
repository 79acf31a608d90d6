"""``--gso on|off``: the flag of every process that sends datagrams, defaulting to INASCHED_GSO."""

from __future__ import annotations

import argparse

import pytest
from p4ctl.gso_option import GSO_ENV, add_gso_argument
from p4ctl.softswitch import _parser as switch_parser

from cli.ps import _parser as ps_parser
from workers.worker import _parser as worker_parser


def parser(environ: dict[str, str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_gso_argument(p, environ)
    return p


def test_gso_is_on_unless_the_flag_or_the_variable_turns_it_off() -> None:
    assert parser({}).parse_args([]).gso is True
    assert parser({}).parse_args(["--gso", "off"]).gso is False
    assert parser({GSO_ENV: "off"}).parse_args([]).gso is False
    assert parser({GSO_ENV: "0"}).parse_args(["--gso", "on"]).gso is True


def test_a_value_other_than_on_or_off_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        parser({}).parse_args(["--gso", "sometimes"])
    with pytest.raises(SystemExit):
        parser({GSO_ENV: "sometimes"})


@pytest.mark.parametrize("command", [switch_parser, ps_parser, worker_parser])
def test_switch_ps_and_worker_take_gso_off(command: object) -> None:
    args = command().parse_args(["--gso", "off"])  # type: ignore[operator]
    assert args.gso is False
