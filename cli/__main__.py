"""``python -m cli``: the ``inasched`` command."""

from cli.main import main

raise SystemExit(main())
