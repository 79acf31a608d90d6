"""The ``--gso on|off`` option of every process that sends datagrams (switch, PS, workers).

With GSO on (the default) the engine hands the kernel runs of same-size datagrams to one
destination as one segmented message; the kernel, or the NIC, cuts them into datagrams. A
switch behind a veth, a TAP or any interface that does not segment receives such a run as
one long UDP payload (BMv2 drops it as BAD_LENGTH), so those set-ups turn GSO off and get one
datagram per message. The environment variable `GSO_ENV` gives the default; it is read here,
at the command line, and handed to the library as an argument.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

__all__ = ["GSO_ENV", "add_gso_argument", "parse_switch"]

GSO_ENV = "INASCHED_GSO"
_VALUES = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


def parse_switch(text: str) -> bool:
    """``"on"``/``"off"`` (also true/false, 1/0) -> bool; ArgumentTypeError names the choices."""
    value = _VALUES.get(text.strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected on or off")
    return value


def add_gso_argument(
    parser: argparse.ArgumentParser, environ: Mapping[str, str] = os.environ
) -> None:
    """Add ``--gso on|off`` to `parser` (`args.gso`, a bool), defaulting to `GSO_ENV`, else on."""
    try:
        default = parse_switch(environ.get(GSO_ENV, "on"))
    except argparse.ArgumentTypeError as exc:
        parser.error(f"{GSO_ENV}={exc}")
    parser.add_argument(
        "--gso",
        type=parse_switch,
        default=default,
        metavar="on|off",
        help="send runs of datagrams as UDP GSO messages (default: on, or "
        f"{GSO_ENV}); off for a switch behind a veth, TAP or BMv2",
    )
