"""The PS's control channel: how the service tells a PS of its own process which jobs to serve.

A parameter server learns a job only from the service, never from a packet: a packet names a
job, its fan-in and (by its source) a switch, and a PS that believed it would sum and answer
for any sender on the network. The service embeds a PS and calls `ParameterServer.register_job`
directly; a PS that runs alone (``inasched ps --control-port P``) takes the same calls here.

One TCP connection per call, one JSON line each way. A request is
``{"body": {...}, "mac": HEX}``: `body` holds ``op`` (``register``, ``remove`` or
``counters``), its arguments (``register``'s ``fresh``: a new job takes the id) and ``at``
(the sender's Unix time); ``mac`` is its HMAC-SHA256 under the secret the PS and the service
share (``INASCHED_PS_SECRET``, or ``--secret-file``), which never crosses the wire. A request
whose MAC does not verify (constant-time compare), whose ``at`` is more than `MAX_SKEW_S` from
the PS's clock (a replay), or that is malformed gets ``{"ok": false, "error": ...}`` and
changes nothing. A good one gets ``{"ok": true}`` and, for ``counters``, the `PsCounters`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
import socketserver
import threading
import time
from typing import Any

from p4ctl.protocol import Policy

from workers.ps import ParameterServer, PsCounters

__all__ = ["MAX_SKEW_S", "ControlError", "PsControlServer", "RemotePs", "load_secret"]

log = logging.getLogger(__name__)

# How far a request's ``at`` may be from the PS's clock (both sides run NTP-synced hosts).
MAX_SKEW_S = 30.0
_MAX_LINE = 65536
_TIMEOUT_S = 5.0
_MIN_SECRET = 16


class ControlError(Exception):
    """A control call failed: refused by the PS, or the PS could not be reached."""


def load_secret(text: str | None) -> bytes:
    """The shared secret from its text; at least 16 characters, else ValueError."""
    secret = (text or "").strip()
    if len(secret) < _MIN_SECRET:
        raise ValueError(
            f"the PS control secret must be at least {_MIN_SECRET} characters "
            "(set INASCHED_PS_SECRET, or pass --secret-file)"
        )
    return secret.encode()


def _mac(secret: bytes, body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret, canonical, hashlib.sha256).hexdigest()


class PsControlServer:
    """Serves the control channel of `ps` on ``(host, port)`` until `stop`."""

    def __init__(self, ps: ParameterServer, secret: bytes, host: str = "127.0.0.1", port: int = 0):
        self.ps = ps
        self.secret = secret
        control = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = _TIMEOUT_S

            def handle(self) -> None:
                line = self.rfile.readline(_MAX_LINE + 1)
                reply = control.answer(line)
                self.wfile.write(json.dumps(reply).encode() + b"\n")

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, port), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="inasched-ps-control", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> PsControlServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def answer(self, line: bytes) -> dict[str, Any]:
        """The reply to one request line (see the module docstring)."""
        try:
            body = self._verified(line)
            return {"ok": True, **self._apply(body)}
        except (ValueError, KeyError, TypeError, OSError) as exc:  # OSError: unknown host
            log.warning("control request refused: %s", exc)
            return {"ok": False, "error": str(exc)}

    def _verified(self, line: bytes) -> dict[str, Any]:
        if len(line) > _MAX_LINE:
            raise ValueError(f"request longer than {_MAX_LINE} bytes")
        request = json.loads(line)
        if not isinstance(request, dict) or not isinstance(request.get("body"), dict):
            raise ValueError("expected {'body': {...}, 'mac': HEX}")
        body: dict[str, Any] = request["body"]
        mac = request.get("mac")
        if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(self.secret, body)):
            raise ValueError("bad MAC: not signed with this PS's secret")
        at = body.get("at")
        if not isinstance(at, int | float) or abs(time.time() - at) > MAX_SKEW_S:
            raise ValueError(f"request time {at!r} is more than {MAX_SKEW_S:.0f} s off")
        return body

    def _apply(self, body: dict[str, Any]) -> dict[str, Any]:
        op = body["op"]
        if op == "register":
            switch = body["switch"]
            if not (isinstance(switch, list) and len(switch) == 2):
                raise ValueError("switch: expected [HOST, PORT]")
            policy = body.get("policy")
            if policy is not None and not isinstance(policy, str):
                raise ValueError(f"policy: expected a name, got {policy!r}")
            self.ps.register_job(
                _int(body, "job"),
                _int(body, "fan_in"),
                switch=(str(switch[0]), int(switch[1])),
                window=_int(body, "window") if body.get("window") is not None else None,
                policy=policy,
                fresh=body.get("fresh") is True,
                children=_addresses(body.get("children", [])),
                spill=_flag(body, "spill"),
            )
            return {}
        if op == "remove":
            self.ps.remove_job(_int(body, "job"))
            return {}
        if op == "counters":
            c = self.ps.counters()
            return {
                "counters": {
                    "received": c.received,
                    "outcomes": dict(c.outcomes),
                    "drops": dict(c.drops),
                    "jobs": sorted(c.jobs),
                    "copies_queued": c.copies_queued,
                }
            }
        raise ValueError(f"unknown op {op!r}: expected register, remove or counters")


def _addresses(value: Any) -> tuple[tuple[str, int], ...]:
    """A list of ``[HOST, PORT]`` pairs (the switches below a two-level job's root)."""
    if not isinstance(value, list) or not all(
        isinstance(a, list) and len(a) == 2 and isinstance(a[1], int) for a in value
    ):
        raise ValueError("children: expected a list of [HOST, PORT]")
    return tuple((str(host), port) for host, port in value)


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected true or false, got {value!r}")
    return value


def _int(body: dict[str, Any], name: str) -> int:
    value = body[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    return value


class RemotePs:
    """The service's side: `register_job`, `remove_job` and `counters` of a PS elsewhere
    (``workers.ps`` run as ``inasched ps --control-port``), as `ParameterServer` has them."""

    def __init__(self, address: tuple[str, int], secret: bytes, timeout_s: float = _TIMEOUT_S):
        self.address = address
        self.secret = secret
        self.timeout_s = timeout_s

    def register_job(
        self,
        job_id: int,
        fan_in: int,
        *,
        switch: tuple[str, int] | None = None,
        window: int | None = None,
        policy: Policy | str | None = None,
        fresh: bool = False,
        children: tuple[tuple[str, int], ...] = (),
        spill: bool = False,
    ) -> None:
        if switch is None:
            raise ValueError("a PS elsewhere needs the switch's data address")
        name = policy.name.lower() if isinstance(policy, Policy) else policy
        self._call(
            op="register",
            job=job_id,
            fan_in=fan_in,
            switch=[switch[0], switch[1]],
            window=window,
            policy=name,
            fresh=fresh,
            children=[[host, port] for host, port in children],
            spill=spill,
        )

    def remove_job(self, job_id: int) -> None:
        self._call(op="remove", job=job_id)

    def counters(self) -> PsCounters:
        c = self._call(op="counters")["counters"]
        return PsCounters(
            c["received"], c["outcomes"], c["drops"], frozenset(c["jobs"]), c["copies_queued"]
        )

    def _call(self, **body: Any) -> dict[str, Any]:
        body["at"] = time.time()
        line = json.dumps({"body": body, "mac": _mac(self.secret, body)}).encode() + b"\n"
        where = f"{self.address[0]}:{self.address[1]}"
        try:
            with socket.create_connection(self.address, timeout=self.timeout_s) as sock:
                sock.sendall(line)
                reply = json.loads(sock.makefile("rb").readline(_MAX_LINE + 1))
        except (OSError, ValueError) as exc:
            raise ControlError(f"PS control at {where}: {exc}") from exc
        if not isinstance(reply, dict) or not reply.get("ok"):
            error = reply.get("error") if isinstance(reply, dict) else reply
            raise ControlError(f"PS control at {where} refused {body['op']}: {error}")
        return reply
