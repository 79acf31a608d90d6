"""The exception tree of the switch control plane.

Everything a `SwitchBackend` raises is a `SwitchError`; lower-layer errors (gRPC status codes,
p4runtime-shell's exceptions, its ``sys.exit`` on a failed handshake) are mapped onto these at
the boundary in `p4ctl.client`::

    SwitchError
     +-- SwitchUnavailable   the switch cannot be reached (address in the message)
     +-- PipelineMismatch    the switch runs a P4Info other than ours (first difference named)
     +-- NotPrimary          another controller holds a higher election id; we may only read
     +-- WriteFailed         a Write was refused; `.errors` lists every per-update error
     +-- Unsupported         the target does not implement the request (UNIMPLEMENTED)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "NotPrimary",
    "PipelineMismatch",
    "SwitchError",
    "SwitchUnavailable",
    "Unsupported",
    "UpdateError",
    "WriteFailed",
]


class SwitchError(Exception):
    """Base class of every error a switch backend raises."""


class SwitchUnavailable(SwitchError):
    """The switch at `address` cannot be reached or dropped the session."""

    def __init__(self, address: str, detail: str) -> None:
        super().__init__(f"switch at {address} is unavailable: {detail}")
        self.address = address


class Unsupported(SwitchError):
    """The target answered UNIMPLEMENTED: it serves no such request (a read of an entity its
    P4Runtime server does not implement)."""


class PipelineMismatch(SwitchError):
    """The switch's pipeline is not the inasched P4Info for our sizing."""


class NotPrimary(SwitchError):
    """A write was refused because another controller is primary (higher election id)."""


@dataclass(frozen=True, slots=True)
class UpdateError:
    """One refused update of a Write batch: its position, gRPC code name and message."""

    index: int
    code: str
    message: str


class WriteFailed(SwitchError):
    """A Write batch was refused; `errors` holds every per-update error, in batch order."""

    def __init__(self, errors: list[UpdateError] | tuple[UpdateError, ...]) -> None:
        self.errors = tuple(errors)
        lines = [f"  update {e.index}: {e.code}: {e.message}" for e in self.errors]
        super().__init__("write refused:\n" + "\n".join(lines))
