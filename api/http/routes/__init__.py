"""One router per resource: jobs, workers, switch, policy, metrics, events, bench runs,
tokens, tenant limits; and the error answers their OpenAPI entries share."""

from __future__ import annotations

from typing import Any

Responses = dict[int | str, dict[str, Any]]

UNAUTHORIZED: Responses = {
    401: {
        "description": "no bearer token, or an unknown or revoked one (a worker's: not the "
        "job's join token)"
    }
}


def not_found(what: str) -> Responses:
    """The 404 answer of a route that names `what` (a job of another tenant is not found)."""
    return {404: {"description": f"no {what} of that id the token may see"}}
