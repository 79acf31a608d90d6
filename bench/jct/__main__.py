"""``python -m bench.jct``: the same command as ``inasched bench jct`` (`bench.jct.cli`)."""

from bench.jct.cli import main

raise SystemExit(main())
