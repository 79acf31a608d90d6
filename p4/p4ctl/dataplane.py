"""The soft switch's UDP data plane: one socket, one thread, `Pipeline.handle` per datagram.

Every datagram arriving on the data address goes through one packet pass; what leaves is sent
from the same socket, so workers and PS see results come from the switch's address. The thread
blocks in ``recvfrom`` (no timeout, so no poll syscall per packet); `stop` sets a flag and sends
the socket an empty datagram to wake it.
"""

from __future__ import annotations

import logging
import socket
import threading

from p4ctl.pipeline import Address, Pipeline

__all__ = ["DataPlane"]

log = logging.getLogger(__name__)

# Largest datagram we read: header + 256 lanes is 1,048 bytes; anything longer is malformed,
# but we read it whole so that it is counted as BAD_LENGTH rather than truncated into a
# plausible packet.
MAX_DATAGRAM = 65535
# Socket buffers sized for bursts of a few thousand fragments from many senders.
SOCKET_BUFFER = 8 * 1024 * 1024


class DataPlane:
    """Serves `pipeline` on a UDP socket bound to `bind` (port 0 picks an ephemeral port)."""

    def __init__(self, pipeline: Pipeline, bind: Address = ("127.0.0.1", 0)) -> None:
        self.pipeline = pipeline
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
        recvfrom = self._sock.recvfrom
        sendto = self._sock.sendto
        handle = self.pipeline.handle
        while True:
            try:
                data, source = recvfrom(MAX_DATAGRAM)
            except OSError:
                if self._stopping:
                    return
                raise
            if self._stopping:
                return
            try:
                sends = handle(data, source)
            except Exception:
                # A bug in one packet pass must not take the switch down for every job.
                log.exception("packet pass failed on %d bytes from %s", len(data), source)
                continue
            for wire, destination in sends:
                try:
                    sendto(wire, destination)
                except OSError as exc:
                    # A full buffer or an unreachable port loses this datagram only, as a
                    # congested switch port would; the protocol's resends recover it.
                    log.debug("send to %s failed: %s", destination, exc)
