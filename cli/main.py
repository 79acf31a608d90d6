"""``inasched``: the command line of the project.

    inasched up [--demo] [--switch HOST:PORT --switch-data HOST:PORT] [--ps HOST:PORT] ...
    inasched up --topology FILE               (a fabric: a soft switch process per switch)
    inasched up --standby --database-url URL ...   (a second service that takes over)
    inasched demo [--service URL --token T]
    inasched jobs list|submit|cancel ...      (--service/INASCHED_URL, --token/INASCHED_TOKEN)
    inasched launch --workers N ... -- train.py ARGS   (a job and its workers under torchrun)
    inasched token create TENANT [--admin] [--init] | list | revoke TENANT
    inasched switch|ps|worker|bench ...       (the soft switch, PS, worker, JCT benchmark)
    inasched topology FILE                     (check a topology file and describe it)

Settings not given as flags come from ``INASCHED_*`` variables (`api.settings.Settings`).
``--service`` and ``--token`` are global: accepted before or after any command word. Exit
codes: `cli.jobs.ExitCode`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import httpx
from p4ctl.p4info import MAX_AGGREGATORS
from pydantic import ValidationError

from api.settings import Settings
from cli.jobs import (
    DEFAULT_URL,
    EXIT_CODES_HELP,
    ExitCode,
    OneLineParser,
    add_jobs_parser,
    fail,
    http_error,
    run_jobs,
)
from cli.launch import add_launch_parser, run_launch
from cli.tokens import add_token_parser, run_tokens, up_token
from scheduler.registry import policy_names, priority_names

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

    from api.coordinator.fabricplane import FabricAddresses

__all__ = ["build_parser", "main"]

# Subcommands owned by other packages: name -> module whose main(argv) runs it. Imported only
# when used, so `inasched up` does not pay for torch or the benchmark harness.
DELEGATES = {
    "switch": "p4ctl.softswitch",
    "ps": "cli.ps",
    "worker": "workers.worker",
    "bench": "bench.jct.cli",
    "topology": "cli.topology",
}
GLOBAL_FLAGS = ("--service", "--url", "--token", "--log-level")
# Objects allocated between two young collections in a started service, and how often a
# thread that holds the GIL hands it over (`_tune_interpreter`).
YOUNG_GENERATION = 10_000
SWITCH_INTERVAL_S = 0.001
DELEGATE_HELP = {
    "switch": "run the soft switch alone (P4Runtime + UDP data plane)",
    "ps": "run a parameter server alone",
    "worker": "run one worker of a job (--job ID --token JOIN_TOKEN --service URL)",
    "bench": "the JCT benchmark: simulation, emulation, validation",
    "topology": "check a topology file (docs/topology.md) and describe it",
}
DESCRIPTION = """\
inasched schedules a programmable switch's in-network aggregation memory among
training jobs. 'inasched up' runs everything on this machine (dashboard, API docs at
/docs); 'inasched COMMAND --help' tells more about each command."""
EPILOG = f"""\
global options, accepted in any position:
  --service URL   the service the HTTP commands talk to
                  (default: $INASCHED_URL, else {DEFAULT_URL})
  --token TOKEN   a tenant API token (default: $INASCHED_TOKEN)

settings not given as flags come from INASCHED_* environment variables
(INASCHED_POLICY_POLICY, INASCHED_SWITCH_AGGREGATORS, INASCHED_DATABASE_URL, ...: see the README).

{EXIT_CODES_HELP}
"""


# Flag (its argparse dest) -> the setting it gives: "field" or "section.field".
FLAG_SETTINGS = {
    "host": "http.host", "port": "http.port", "data_dir": "data_dir",
    "database_url": "database.url", "switch": "switch.target", "switch_data": "switch.data",
    "switch_device_id": "switch.device_id", "switch_thrift": "switch.thrift",
    "switch_ports": "switch.ports", "topology": "switch.topology",
    "p4_config": "switch.p4_config", "ps": "ps.address", "aggregators": "switch.aggregators",
    "lanes": "switch.lanes", "policy": "policy.policy", "priority": "policy.priority",
    "standby": "standby.enabled",
}  # fmt: skip


def _settings(args: argparse.Namespace) -> Settings:
    """The settings the flags in `args` give, the others from the environment."""
    given: dict[str, Any] = {}
    for dest, setting in FLAG_SETTINGS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        section, _, field = setting.rpartition(".")
        if section:
            given.setdefault(section, {})[field] = value
        else:
            given[field] = value
    return Settings(**given)


def _add_service_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8000)")
    p.add_argument("--data-dir", help="SQLite file and outputs (default ./data)")
    p.add_argument("--database-url", help="SQLAlchemy URL, e.g. postgresql+psycopg://...")
    p.add_argument("--switch", help="HOST:PORT of a P4Runtime switch (default: embedded)")
    p.add_argument("--switch-data", help="HOST:PORT of that switch's UDP data plane")
    p.add_argument("--switch-device-id", type=int, help="that switch's P4Runtime device id")
    p.add_argument(
        "--switch-thrift",
        help="HOST:PORT of BMv2's Thrift runtime (registers, which its P4Runtime refuses)",
    )
    p.add_argument(
        "--switch-ports",
        help="HOST=PORT,...: the switch port each worker and PS host sits behind (BMv2)",
    )
    p.add_argument(
        "--p4-config", help="that switch's device config: the JSON p4c-bm2-ss writes, for BMv2"
    )
    p.add_argument(
        "--topology",
        help="a topology file (docs/topology.md): a fabric of switches, one soft switch "
        "process each on loopback (embedded), or the file's P4Runtime addresses",
    )
    p.add_argument("--ps", help="HOST:PORT of an external parameter server")
    p.add_argument(
        "--aggregators", type=int, help=f"embedded switch pool size, 1..{MAX_AGGREGATORS}"
    )
    p.add_argument("--lanes", type=int, choices=(64, 128, 256))
    p.add_argument("--policy", choices=policy_names())
    p.add_argument("--priority", choices=priority_names())
    p.add_argument("--tenant", default="local", help="tenant of the token printed at start")


def _client_flags() -> argparse.ArgumentParser:
    """--service and --token, added to the top-level parser and to every parser under it that
    talks HTTP, so that they are accepted in any position. SUPPRESS keeps a subparser that did
    not see the flag from overwriting what an outer one saw."""
    client = argparse.ArgumentParser(add_help=False)
    client.add_argument(
        "--service",
        "--url",
        dest="service",
        metavar="URL",
        default=argparse.SUPPRESS,
        help=f"base URL of the service (default: $INASCHED_URL, else {DEFAULT_URL})",
    )
    client.add_argument(
        "--token",
        metavar="TOKEN",
        default=argparse.SUPPRESS,
        help="tenant API token (default: $INASCHED_TOKEN)",
    )
    return client


def build_parser() -> argparse.ArgumentParser:
    client = _client_flags()
    parser = OneLineParser(
        prog="inasched",
        description=DESCRIPTION,
        epilog=EPILOG,
        parents=[client],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log detail (default INFO)",
    )
    # Each subparser is a OneLineParser too; the commands' adders take any ArgumentParser's.
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True, metavar="COMMAND"),
    )
    up = sub.add_parser("up", help="run the service, soft switch and PS (Ctrl-C stops)")
    _add_service_flags(up)
    up.add_argument("--demo", action="store_true", help="also run the demo jobs")
    up.add_argument(
        "--standby",
        action="store_true",
        default=None,
        help="while another service holds the store, serve reads and take over when it stops "
        "(INASCHED_STANDBY_ENABLED; docs/OPERATIONS.md)",
    )
    demo = sub.add_parser(
        "demo",
        parents=[client],
        help="run the demo jobs and print their JCTs",
        description="Run the demo jobs and print their JCTs: in a service started for the "
        "demo, or, with --service URL (and a token), in that running service.",
    )
    _add_service_flags(demo)
    add_jobs_parser(sub, client)
    add_launch_parser(sub, client)
    add_token_parser(sub)
    for name in DELEGATES:
        sub.add_parser(name, help=f"{DELEGATE_HELP[name]}; see 'inasched {name} --help'")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``inasched`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    outer, command = _leading_globals(argv)
    if command < len(argv) and argv[command] in DELEGATES:
        name = argv[command]
        run: Callable[[list[str]], int] = importlib.import_module(DELEGATES[name]).main
        rest = argv[command + 1 :]
        if name == "bench" and rest[:1] == ["jct"]:
            rest = rest[1:]  # `inasched bench jct ...`, the benchmark's documented name
        # Global options before the command word go to it: `inasched --service URL worker`.
        renamed = ["--service" + o[5:] if o.split("=")[0] == "--url" else o for o in outer]
        return run(rest + renamed)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    for noisy in ("alembic", "httpx"):  # one line per migration step or HTTP request
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        commands: dict[str, Callable[[argparse.Namespace], int]] = {
            "up": _up, "demo": _demo, "jobs": _jobs, "token": _token, "launch": _launch,
        }  # fmt: skip
        return commands[args.command](args)
    except BrokenPipeError:
        return _reader_gone()
    except ValidationError as exc:
        first = exc.errors()[0]
        return fail(f"bad setting {'.'.join(map(str, first['loc']))}: {first['msg']}")


def _reader_gone() -> int:
    """stdout's reader stopped reading (``inasched jobs list | head``): not an error. What is
    left unwritten goes nowhere, so that the interpreter's last flush does not fail too."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return int(ExitCode.OK)


def _leading_globals(argv: list[str]) -> tuple[list[str], int]:
    """The global options before the first command word, and that word's index."""
    i = 0
    while i < len(argv) and argv[i].split("=", 1)[0] in GLOBAL_FLAGS:
        i += 1 if "=" in argv[i] else 2
    return argv[:i], i


def _service(args: argparse.Namespace) -> str:
    """--service anywhere on the line, else INASCHED_URL, else the default."""
    given: str | None = getattr(args, "service", None)
    return (given or os.environ.get("INASCHED_URL") or DEFAULT_URL).rstrip("/")


def _api_token(args: argparse.Namespace) -> str | None:
    """--token anywhere on the line, else INASCHED_TOKEN."""
    given: str | None = getattr(args, "token", None)
    return given if given is not None else os.environ.get("INASCHED_TOKEN")


def _jobs(args: argparse.Namespace) -> int:
    return run_jobs(args, service=_service(args), token=_api_token(args))


def _launch(args: argparse.Namespace) -> int:
    return run_launch(args, service=_service(args), token=_api_token(args))


def _token(args: argparse.Namespace) -> int:
    return run_tokens(args, _settings(args))


def _up(args: argparse.Namespace) -> int:
    return _serve(args, demo=args.demo, keep_serving=True)


def _demo(args: argparse.Namespace) -> int:
    # Only a --service given on the command line sends the demo to a running service: an
    # exported INASCHED_URL must not turn `inasched demo` into a different command.
    if getattr(args, "service", None):
        token = _api_token(args)
        if not token:
            return fail("--service needs --token (or INASCHED_TOKEN)", ExitCode.UNAUTHORIZED)
        from cli.demo import run_demo

        try:
            run_demo(_service(args), token, report=lambda line: print(line, flush=True))
        except httpx.HTTPStatusError as exc:
            line, code = http_error(exc.response)
            return fail(line, code)
        except httpx.HTTPError as exc:
            return fail(
                f"cannot reach the service at {_service(args)}: {exc}", ExitCode.UNREACHABLE
            )
        return 0
    return _serve(args, demo=True, keep_serving=False)


def _tune_interpreter() -> None:
    """Keep the garbage collector and the decision rounds off the request path of a
    long-running service.

    The oldest generation is mostly what the imports and the start made (about 140,000
    objects that live as long as the process); walking it stops every thread for tens of
    milliseconds. `gc.freeze` moves them out of the collector's sight, and a larger young
    generation makes every collection rarer. A decision round holds the GIL for tens of
    milliseconds, and the submissions' writer waits for it after each database round trip:
    a shorter switch interval hands it over sooner.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION, middle, old)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def _serve(args: argparse.Namespace, *, demo: bool, keep_serving: bool) -> int:
    started = _start_service(args)
    if isinstance(started, int):
        return started
    settings, app, token, fate = started
    service = app.state.service
    url = f"http://{settings.http.host}:{settings.http.port}"
    server, thread = _http_server(app, settings)
    if not _listening(server, thread):
        service.stop()
        return fail(
            f"cannot listen on {settings.http.host}:{settings.http.port} (address in use?): "
            "--port (INASCHED_HTTP_PORT) picks another port, --host (INASCHED_HTTP_HOST) "
            "another address",
            ExitCode.UNREACHABLE,
        )
    _tune_interpreter()
    fabric = service.plane.fabric if service.plane is not None else None
    _announce(
        url,
        settings,
        leading=service.leading,
        tenant=args.tenant,
        token=token,
        fate=fate,
        fabric=fabric,
    )
    try:
        _serve_until_stopped(url, token, thread, demo=demo, keep_serving=keep_serving)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        service.stop()
    return 0


def _start_service(args: argparse.Namespace) -> tuple[Settings, FastAPI, str, str] | int:
    """``(settings, app, token, fate)``: the app of the flags' settings with its service
    started, and the token of ``--tenant`` `inasched up` prints (`fate` says whether it is the
    one printed before); or the exit status of what failed, said in one line."""
    from p4ctl.errors import SwitchError

    from api.http.app import create_app
    from api.store.db import DatabaseUnavailable
    from api.store.tokens import BadTenantName, check_tenant_name
    from scheduler.errors import TopologyError

    try:
        check_tenant_name(args.tenant)
    except BadTenantName as exc:
        return fail(f"--tenant: {exc}")
    settings = _settings(args)
    try:
        app = create_app(settings)
    except DatabaseUnavailable as exc:
        return fail(str(exc), ExitCode.UNREACHABLE)
    service = app.state.service
    try:
        service.start()
    except TopologyError as exc:
        return fail(f"cannot start: {exc}", ExitCode.USAGE)
    except (SwitchError, OSError, ValueError, DatabaseUnavailable) as exc:
        return fail(f"cannot start: {exc}", ExitCode.UNREACHABLE)
    with service.sessions() as session:
        token, reused = up_token(session, tenant=args.tenant, data_dir=settings.data_dir)
    fate = "the one printed before, still live" if reused else "new; the next start prints it again"
    return settings, app, token, fate


def _http_server(app: FastAPI, settings: Settings) -> tuple[uvicorn.Server, threading.Thread]:
    """A uvicorn server for `app` where the settings say, running in a thread of its own."""
    import uvicorn

    config = uvicorn.Config(
        app, host=settings.http.host, port=settings.http.port, log_level="warning",
        timeout_graceful_shutdown=3, timeout_keep_alive=30,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="inasched-http", daemon=True)
    thread.start()
    return server, thread


def _listening(server: uvicorn.Server, thread: threading.Thread) -> bool:
    """Whether `server` came up; False when its thread ended first (the address is taken)."""
    while not server.started:
        if not thread.is_alive():
            return False
        thread.join(0.05)
    return True


def _announce(
    url: str,
    settings: Settings,
    *,
    leading: bool,
    tenant: str,
    token: str,
    fate: str,
    fabric: FabricAddresses | None = None,
) -> None:
    if not leading:
        print(f"inasched is standing by at {url}/: it serves reads and takes over when the "
              "service that holds the store stops", flush=True)  # fmt: skip
    policy = settings.policy.policy
    print(f"inasched is up: dashboard {url}/  (policy {policy})", flush=True)
    if fabric is not None:
        for name, (p4runtime, data) in fabric.switches.items():
            print(f"switch {name}: data {data.host}:{data.port}, P4Runtime {p4runtime}", flush=True)
    print(f"tenant '{tenant}' token: {token} ({fate})", flush=True)
    print("Ctrl-C stops everything.", flush=True)


def _serve_until_stopped(
    url: str, token: str, thread: threading.Thread, *, demo: bool, keep_serving: bool
) -> None:
    """Run the demo if asked, then serve until Ctrl-C, SIGTERM or the server's end."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        if demo:
            from cli.demo import run_demo

            run_demo(url, token, report=lambda line: print(line, flush=True))
            if not keep_serving:
                # On a P4Runtime switch each removal reads the whole pool: seconds per job.
                print("demo done: removing its jobs from the switch, then stopping", flush=True)
        if keep_serving:
            print(f"serving {url}/ until Ctrl-C", flush=True)
            while not stop.wait(0.5) and thread.is_alive():
                pass
    except KeyboardInterrupt:
        print("stopping", flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    raise SystemExit(main())
