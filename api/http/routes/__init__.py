"""One router per resource: jobs, workers, switch, policy, metrics, events, bench runs,
tokens, tenant limits; and the error answers their OpenAPI entries share."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Responses = dict[int | str, dict[str, Any]]

UNAUTHORIZED: Responses = {
    401: {
        "description": "no bearer token, or an unknown or revoked one (a worker's: not the "
        "job's join token)"
    }
}


class Unavailable(BaseModel):
    """A 503's body: what is wrong, and ``store`` when it is the job store (`StoreFailed`)."""

    detail: str
    store: Literal["full", "unreachable"] | None = Field(
        default=None, description="present when the job store is full or does not answer"
    )


UNAVAILABLE: Responses = {
    503: {
        "model": Unavailable,
        "description": "the job store is full or unreachable (`store` says which), or this "
        "service is a standby (writes), or the switch does not answer; ask again after "
        "Retry-After",
        "headers": {
            "Retry-After": {
                "description": "seconds to wait before asking again",
                "required": True,
                "schema": {"type": "integer", "minimum": 1},
            }
        },
    }
}


def not_found(what: str) -> Responses:
    """The 404 answer of a route that names `what` (a job of another tenant is not found)."""
    return {404: {"description": f"no {what} of that id the token may see"}}
