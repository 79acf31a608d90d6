"""The service's exception tree and its mapping to HTTP answers.

    ServiceError
     +-- NotFound        404: no such job (or not the caller's)
     +-- Conflict        409: illegal transition, or a worker of an ended job; carries `state`
     +-- Invalid         422: a value that passed the schema but not the service's rules
     +-- SwitchFailed    503: the switch refused or cannot be reached; retry later
     +-- StoreFailed     503: the job store is full or unreachable (`api.store.health`)

Lower-layer errors are mapped here, at the boundary: `scheduler.errors.IllegalTransition`
-> 409, `p4ctl.errors.SwitchError` -> 503, a database error that `api.store.health` reads as
a store fault -> 503 (`StoreFailed`, the episode logged once; any other stays a 500). A
request that fails its schema gets FastAPI's 422 body, with any text that cannot be UTF-8 (a
lone surrogate such as ``"\\ud800"`` in a JSON string, which the body's own value echoes
back) written as its escape.
"""

from __future__ import annotations

import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from p4ctl.errors import SwitchError
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException

from api.store.db import DatabaseUnavailable
from api.store.health import StoreFault, StoreHealth
from scheduler.errors import IllegalTransition

__all__ = [
    "Conflict",
    "Forbidden",
    "Invalid",
    "NotFound",
    "ServiceError",
    "StoreFailed",
    "SwitchFailed",
    "TooMany",
    "allowed_methods",
    "install_handlers",
    "printable",
]


class ServiceError(Exception):
    status = 500

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail}

    def headers(self) -> dict[str, str]:
        return {}


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409

    def __init__(self, detail: str, *, state: str, retry_after_s: int | None = None) -> None:
        super().__init__(detail)
        self.state = state
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail, "state": self.state}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)} if self.retry_after_s else {}


class Forbidden(ServiceError):
    """The caller may not do this (a limit an admin sets says so)."""

    status = 403


class TooMany(ServiceError):
    """Over a rate limit: try again after `retry_after_s`."""

    status = 429

    def __init__(self, detail: str, *, retry_after_s: float) -> None:
        super().__init__(detail)
        self.retry_after_s = max(1, math.ceil(retry_after_s))

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class Invalid(ServiceError):
    """Same shape as FastAPI's own 422s, so clients parse one format."""

    status = 422

    def __init__(self, loc: tuple[str, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc

    def body(self) -> dict[str, Any]:
        return {"detail": [{"loc": list(self.loc), "msg": self.detail, "type": "value_error"}]}


class SwitchFailed(ServiceError):
    status = 503

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class StoreFailed(ServiceError):
    """The job store is full or unreachable: ``{"detail", "store": "full" | "unreachable"}``."""

    status = 503

    def __init__(self, fault: StoreFault) -> None:
        super().__init__(fault.detail)
        self.fault = fault

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail, "store": self.fault.kind}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.fault.retry_after_s)}


def printable(value: Any) -> Any:
    """`value` (JSON data) with every string made encodable as UTF-8: a lone surrogate, which
    JSON can carry and UTF-8 cannot, becomes its ``\\udXXX`` escape text."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


def allowed_methods(request: Request) -> str:
    """The ``Allow`` header of the request's path: the methods the OpenAPI spec gives it (the
    dashboard's files, which the spec does not list, are read-only)."""
    methods: set[str] = set()
    for template, operations in request.app.openapi()["paths"].items():
        if re.fullmatch(re.sub(r"\{[^/}]+\}", "[^/]+", template), request.url.path):
            methods |= {method.upper() for method in operations}
    return ", ".join(sorted(methods or {"GET", "HEAD"}))


def install_handlers(app: FastAPI, health: StoreHealth) -> None:
    """Register the JSON answers of every mapped error on `app`; store faults go to `health`."""

    async def service_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServiceError)
        return JSONResponse(printable(exc.body()), status_code=exc.status, headers=exc.headers())

    async def request_invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        detail = printable(jsonable_encoder(exc.errors()))
        return JSONResponse({"detail": detail}, status_code=422)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        cause = exc.__cause__
        if exc.status_code == 400 and isinstance(cause, UnicodeDecodeError):
            # FastAPI's 400 for a body that is not UTF-8; it is malformed JSON like any other.
            error = {
                "type": "json_invalid",
                "loc": ["body", cause.start],
                "msg": f"JSON invalid: not UTF-8 text at byte {cause.start}",
                "input": {},
            }
            return JSONResponse({"detail": [error]}, status_code=422)
        if exc.status_code == 405:
            # Starlette names only the methods of the first route of the path (or none, when
            # the dashboard's static mount answered): a client needs all of them.
            exc = HTTPException(405, exc.detail, headers={"Allow": allowed_methods(request)})
        return await http_exception_handler(request, exc)

    async def illegal(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, IllegalTransition)
        return JSONResponse({"detail": str(exc), "state": exc.old}, status_code=409)

    async def switch_error(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            {"detail": f"switch: {exc}"}, status_code=503, headers={"Retry-After": "1"}
        )

    async def store_error(request: Request, exc: Exception) -> Response:
        fault = health.fault(exc)
        if fault is None:
            raise exc  # a bug: the server's 500, with its traceback
        return await service_error(request, StoreFailed(fault))

    app.add_exception_handler(ServiceError, service_error)
    app.add_exception_handler(SQLAlchemyError, store_error)
    app.add_exception_handler(DatabaseUnavailable, store_error)
    app.add_exception_handler(RequestValidationError, request_invalid)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(IllegalTransition, illegal)
    app.add_exception_handler(SwitchError, switch_error)
