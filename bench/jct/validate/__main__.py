"""``python -m bench.jct.validate``: the validation of ``--sim`` against ``--emu``."""

from bench.jct.validate.cli import main

raise SystemExit(main())
