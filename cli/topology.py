"""``inasched topology FILE``: check a topology file and print its one-line description.

    inasched topology scheduler/data/topology-2tors.json

The file format and its defaults are ``docs/topology.md``; ``scheduler.fabric`` reads it. A
bad file prints its `TopologyError` (the file, the switch and the field) and exits 2.
"""

from __future__ import annotations

import sys

from cli.jobs import OneLineParser
from scheduler.errors import TopologyError
from scheduler.fabric import load_fabric

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Print the file's description (0), or its error (2)."""
    parser = OneLineParser(
        prog="inasched topology", description="Check a topology file and describe it."
    )
    parser.add_argument("file", metavar="TOPOLOGY.json", help="the topology file")
    args = parser.parse_args(argv)
    try:
        fabric = load_fabric(args.file)
    except TopologyError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(fabric.describe())
    return 0
