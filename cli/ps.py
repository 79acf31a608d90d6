"""``inasched ps``: a parameter server alone, with its control channel.

    inasched ps [--host H --port 9556] [--job ID:FAN_IN[:POLICY[:WINDOW]] --switch HOST:PORT]
                [--control-port P --secret-file F] [--gso off]

The PS itself is ``workers.ps.ParameterServer``; the channel the service registers jobs over
is ``workers.ps_control``. The control secret comes from ``--secret-file`` or `SECRET_ENV`,
and ``--gso`` from ``INASCHED_GSO``, read here and handed on as arguments.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path

from p4ctl.gso_option import add_gso_argument
from p4ctl.protocol import Policy

from workers.ps import ParameterServer
from workers.ps_control import PsControlServer, load_secret

__all__ = ["SECRET_ENV", "main"]

log = logging.getLogger(__name__)

# The control channel's shared secret (``workers.ps_control``), when no --secret-file is given.
SECRET_ENV = "INASCHED_PS_SECRET"


def _registration(text: str) -> tuple[int, int, Policy | None, int | None]:
    parts = text.split(":")
    if not 2 <= len(parts) <= 4:
        raise argparse.ArgumentTypeError(f"--job {text!r}: expected ID:FAN_IN[:POLICY[:WINDOW]]")
    policy = Policy.parse(parts[2]) if len(parts) > 2 and parts[2] else None
    window = int(parts[3]) if len(parts) > 3 else None
    return int(parts[0]), int(parts[1]), policy, window


def _parser() -> argparse.ArgumentParser:
    """The command line of ``inasched ps``."""
    parser = argparse.ArgumentParser(prog="inasched ps", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to receive on")
    parser.add_argument("--port", type=int, default=9556, help="UDP port (default 9556)")
    parser.add_argument("--idle-timeout", type=float, default=60.0, metavar="S")
    parser.add_argument("--max-results", type=int, default=8192, help="kept per job, at most")
    parser.add_argument(
        "--job",
        type=_registration,
        action="append",
        default=[],
        help="serve this job from the start: ID:FAN_IN[:POLICY[:WINDOW]] (needs --switch)",
    )
    parser.add_argument("--switch", help="HOST:PORT, the switch's data address for --job jobs")
    parser.add_argument(
        "--control-port",
        type=int,
        help="TCP port where the service registers jobs (workers.ps_control); needs the "
        f"shared secret, from --secret-file or {SECRET_ENV}",
    )
    parser.add_argument("--secret-file", type=Path, help="file holding the control secret")
    add_gso_argument(parser)
    parser.add_argument("--log-level", default="INFO")
    return parser


def _secret(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bytes:
    """The control secret (empty without --control-port); a bad one is a usage error."""
    if args.control_port is None:
        return b""
    try:
        text = args.secret_file.read_text() if args.secret_file else os.environ.get(SECRET_ENV)
        return load_secret(text)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))


def _register_jobs(ps: ParameterServer, args: argparse.Namespace) -> None:
    """Serve the --job jobs from the start, taking their packets from --switch."""
    if not args.switch:
        return
    host, _, port = args.switch.rpartition(":")
    for job_id, fan_in, policy, window in args.job:
        ps.register_job(job_id, fan_in, switch=(host, int(port)), window=window, policy=policy)


def _serve(ps: ParameterServer, control: PsControlServer | None) -> None:
    """Serve until SIGINT or SIGTERM, logging the counters every 10 s; then stop `control`."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with ps:
        log.info("parameter server on %s:%d", *ps.address)
        if control is not None:
            log.info("control channel on %s:%d", *control.address)
        while not stop.wait(10.0):
            log.info("counters: %s", ps.counters())
    if control is not None:
        control.stop()


def main(argv: list[str] | None = None) -> int:
    """``inasched ps``: serve until SIGINT or SIGTERM; returns the exit status (0; 1 when it
    cannot bind; 2 for a bad argument or secret)."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    if args.job and not args.switch:
        parser.error("--job needs --switch HOST:PORT: a PS takes a job's packets only from it")
    secret = _secret(parser, args)
    try:
        ps = ParameterServer(
            args.host,
            args.port,
            idle_timeout_s=args.idle_timeout,
            max_results=args.max_results,
            gso=args.gso,
        )
    except OSError as exc:
        log.error("cannot bind %s:%d: %s", args.host, args.port, exc)
        return 1
    _register_jobs(ps, args)
    control = None
    if args.control_port is not None:
        try:
            control = PsControlServer(ps, secret, args.host, args.control_port).start()
        except OSError as exc:
            log.error("cannot bind the control port %s:%d: %s", args.host, args.control_port, exc)
            ps.stop()
            return 1
    _serve(ps, control)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
