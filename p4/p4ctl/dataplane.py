"""The soft switch's UDP data plane: one socket, one thread, bursts through the compiled pass.

Every datagram arriving on the data address goes through one packet pass; what leaves is sent
from the same socket, so workers and PS see results come from the switch's address. The
thread receives a burst (``recvmmsg``, UDP GRO), runs the compiled pass over all of it
(`Pipeline.handle_burst`), and sends what leaves grouped by destination (``sendmmsg``; with
`gso`, UDP GSO: the results of many fragments for one worker leave in one system call;
without it, one datagram per message, for receivers behind an interface that does not
segment). `stop` sets a flag and sends the socket an empty datagram to wake the thread.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading

import numpy as np
import numpy.typing as npt

from p4ctl.engine import Burst
from p4ctl.pipeline import Address, Pipeline

__all__ = ["DataPlane", "send_order"]

log = logging.getLogger(__name__)

# Socket buffers sized for bursts of a few thousand fragments from many senders.
SOCKET_BUFFER = 8 * 1024 * 1024
# Datagrams received per burst: a window of fragments from a few
# workers; the pass takes microseconds per burst, so a larger burst buys little.
BURST_SLOTS = 1024


class DataPlane:
    """Serves `pipeline` on a UDP socket bound to `bind` (port 0 picks an ephemeral port);
    `gso` as ``p4ctl.engine.Burst`` takes it."""

    def __init__(
        self, pipeline: Pipeline, bind: Address = ("127.0.0.1", 0), *, gso: bool = True
    ) -> None:
        self.pipeline = pipeline
        self.gso = gso
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                self._sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
            self._sock.bind(bind)
        except OSError:
            self._sock.close()
            raise
        self.address: Address = self._sock.getsockname()
        self._stopping = False
        # Received datagrams the burst had no row for (a flood of tiny coalesced datagrams):
        # lost as on a full NIC ring; they reach no counter of the P4 program.
        self.overflow = 0
        self._thread = threading.Thread(target=self._serve, name="p4ctl-dataplane", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("data plane listening on %s:%d", *self.address)

    def stop(self) -> None:
        """Stop the thread and close the socket; safe to call twice."""
        if self._thread.is_alive():
            self._stopping = True
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as waker:
                host = "127.0.0.1" if self.address[0] == "0.0.0.0" else self.address[0]
                waker.sendto(b"", (host, self.address[1]))
            self._thread.join()
        self._sock.close()

    def _serve(self) -> None:
        burst = Burst(BURST_SLOTS, self.pipeline.lanes * 4 + 24, gso=self.gso)
        burst.enable_gro(self._sock)
        handle_burst = self.pipeline.handle_burst
        while True:
            try:
                count, lost = burst.recv(self._sock, wait=True)
            except OSError as exc:
                if self._stopping:
                    return
                if exc.errno == errno.ECONNREFUSED:  # an ICMP error of an earlier send
                    continue
                raise
            if self._stopping:
                return
            self.overflow += lost
            try:
                for rows, sizes, addrs, n in handle_burst(
                    burst.rows, burst.sizes, burst.addrs, count
                ):
                    order = send_order(addrs[:n])
                    burst.send(self._sock, rows, sizes, addrs, n, stride=rows.shape[1], order=order)
            except Exception:
                # A bug in one pass must not take the switch down for every job.
                log.exception("packet pass failed on a burst of %d datagrams", count)


def send_order(addrs: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The order to send a pass's outputs in: grouped by destination, so that a worker's
    results leave as one segmented send, each group in pass order, and the groups in the
    order of their last datagram, so that the datagram the pass emitted last leaves last (a
    probe's reply still tells that everything before it has left)."""
    _, group = np.unique(addrs, return_inverse=True)
    last = np.zeros(group.max(initial=-1) + 1, np.int64)
    np.maximum.at(last, group, np.arange(len(addrs)))
    return np.argsort(last[group], kind="stable")
