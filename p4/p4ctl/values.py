"""P4Runtime values: the canonical bytestring of an int, and the refusal of an entity."""

from __future__ import annotations

from google.rpc import code_pb2

__all__ = ["EntityError", "decode_value", "encode_value"]


class EntityError(Exception):
    """An entity the switch refuses; `code` is a `google.rpc.Code` value."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def encode_value(value: int) -> bytes:
    """The canonical P4Runtime bytestring of a non-negative int (no leading zero bytes)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode_value(data: bytes, width: int, what: str) -> int:
    """The int in a P4Runtime bytestring; raises `EntityError` when it does not fit `width`."""
    value = int.from_bytes(data, "big")
    if not data or value >> width:
        raise EntityError(
            code_pb2.OUT_OF_RANGE, f"{what}: {data.hex() or 'empty'} does not fit {width} bits"
        )
    return value
