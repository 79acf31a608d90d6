"""The web dashboard: static files (plain ES modules, SVG and canvas; no build step).

The service mounts :func:`static_dir` at ``/``; the pages read the JSON endpoints and the
``/events`` stream described in ``docs/CONTRACTS.md`` ("Dashboard JSON").
"""

from __future__ import annotations

import pathlib

__all__ = ["static_dir"]


def static_dir() -> pathlib.Path:
    """The folder holding ``index.html`` and its assets, e.g. ``.../dashboards/static``."""
    return pathlib.Path(__file__).resolve().parent / "static"
