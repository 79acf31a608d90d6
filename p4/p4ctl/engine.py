"""The compiled engine (``p4ctl._engine``): burst UDP I/O for the switch, workers and PS.

The engine is the one data path: the C extension built by the project's ``pip install``
moves datagrams in bursts (``recvmmsg``/``sendmmsg``, GRO on receive, GSO on send) and runs
the switch's packet pass over the numpy registers, tables and counters the P4Runtime server
reads and writes; without it `engine_module` raises ImportError saying how to rebuild it.
`Burst` is the buffer set one socket owner uses::

    burst = Burst(slots=1024, stride=HEADER_SIZE + 4 * lanes, gso=True)
    n, lost = burst.recv(sock, wait=False)          # rows 0..n-1 of burst.rows, burst.sizes
    burst.send(sock, rows, sizes, addrs, n)         # any rows, e.g. a transfer's datagrams

With ``gso=False`` every row leaves as its own datagram (no ``UDP_SEGMENT``), as a switch
behind an interface that does not segment (a veth, a TAP, BMv2) must get them. Addresses are
one int64, ``(IPv4 as an int) << 16 | port`` (`pack_address`).
"""

from __future__ import annotations

import socket
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Burst",
    "engine_module",
    "pack_address",
    "unpack_address",
]

# One message of a receive burst: a datagram, or a GRO run of segments (one UDP payload).
_MESSAGE_BYTES = 65536


def engine_module() -> ModuleType:
    """The extension module; ImportError saying how to build it when it cannot be imported."""
    try:
        from p4ctl import _engine  # type: ignore[attr-defined]
    except ImportError as exc:
        raise ImportError(
            f"the compiled engine p4ctl._engine cannot be imported ({exc}); it is built by the "
            "project's install: reinstall with 'pip install -e .' (or 'make test')"
        ) from exc
    return _engine  # type: ignore[no-any-return]


def pack_address(address: tuple[str, int]) -> int:
    """``("127.0.0.1", 9555)`` -> the packed int64 the engine uses (dotted IPv4 only)."""
    host, port = address
    return int.from_bytes(socket.inet_aton(host), "big") << 16 | port


def unpack_address(packed: int) -> tuple[str, int]:
    """The inverse of `pack_address`."""
    return socket.inet_ntoa(int(packed >> 16).to_bytes(4, "big")), int(packed & 0xFFFF)


class Burst:
    """Receive and send buffers of one socket owner: `slots` rows of `stride` bytes.

    Received datagram i is ``rows[i, :sizes[i]]`` (a longer one is cut to `stride`, and its
    ``sizes[i]`` is still its real length, so a length check drops it) from ``addrs[i]``.
    `gso` (default on) sends runs of same-size rows to one destination as one segmented
    message; off, each row is a datagram of its own. It turns off by itself the first time
    the kernel refuses segmentation.
    """

    def __init__(self, slots: int, stride: int, *, gso: bool = True) -> None:
        self._engine = engine_module()
        self.slots = slots
        self.stride = stride
        self.rows: npt.NDArray[np.uint8] = np.zeros((slots, stride), np.uint8)
        self.sizes: npt.NDArray[np.int64] = np.zeros(slots, np.int64)
        self.addrs: npt.NDArray[np.int64] = np.zeros(slots, np.int64)
        # Enough raw messages for a burst of full rows; GRO packs many rows into one.
        messages = max(1, min(64, -(-slots * stride // _MESSAGE_BYTES)))
        self._scratch = bytearray(messages * _MESSAGE_BYTES)
        self.gso = gso
        self.gro = False

    def enable_gro(self, sock: socket.socket) -> bool:
        """Ask the kernel to coalesce received datagrams (UDP_GRO); whether it agreed."""
        self.gro = bool(self._engine.enable_gro(sock.fileno()))
        return self.gro

    def recv(self, sock: socket.socket, *, wait: bool) -> tuple[int, int]:
        """``(rows filled, datagrams lost for want of rows)``; ``(0, 0)`` when none is there.

        `wait` blocks for the first datagram (the socket must be blocking); otherwise the
        call never blocks. Raises OSError for errors other than "nothing to read".
        """
        count, lost = self._engine.recv_burst(
            sock.fileno(), self._scratch, self.rows, self.stride, self.sizes, self.addrs, wait
        )
        return int(count), int(lost)

    def send(
        self,
        sock: socket.socket,
        rows: Any,
        sizes: npt.NDArray[np.int64],
        addrs: npt.NDArray[np.int64],
        count: int,
        *,
        stride: int | None = None,
        order: npt.NDArray[np.int64] | None = None,
    ) -> int:
        """Send rows ``order[0..count)`` (default ``0..count``) of `rows`; returns how many the
        kernel refused (each is lost, as on a congested port; the protocol recovers it)."""
        failed, self.gso = self._engine.send_burst(
            sock.fileno(),
            rows,
            self.stride if stride is None else stride,
            sizes,
            addrs,
            count,
            order,
            self.gso,
        )
        return int(failed)
