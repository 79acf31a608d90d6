"""``inasched``: the command line of the project.

    inasched up [--demo] [--switch HOST:PORT --switch-data HOST:PORT] [--ps HOST:PORT] ...
    inasched demo [--url URL --token T]
    inasched jobs list|submit|cancel ...      (INASCHED_URL, INASCHED_TOKEN)
    inasched token create TENANT
    inasched switch|ps|worker|bench ...       (the soft switch, PS, worker, JCT benchmark)

Settings not given as flags come from ``INASCHED_*`` variables (`api.settings.Settings`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import ValidationError

from api.settings import Settings

__all__ = ["main"]

# Subcommands owned by other packages: name -> module whose main(argv) runs it. Imported only
# when used, so `inasched up` does not pay for torch or the benchmark harness.
DELEGATES = {
    "switch": "p4ctl.softswitch",
    "ps": "workers.ps",
    "worker": "workers.worker",
    "bench": "bench.jct",
}
DEFAULT_URL = "http://127.0.0.1:8000"


def _fail(message: str, code: int = 2) -> int:
    print(f"inasched: {message}", file=sys.stderr)
    return code


def _settings(args: argparse.Namespace) -> Settings:
    names = (
        "host", "port", "data_dir", "database_url", "switch", "switch_data", "ps",
        "aggregators", "lanes", "policy", "priority",
    )  # fmt: skip
    given = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    return Settings(**given)


def _add_service_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8000)")
    p.add_argument("--data-dir", help="SQLite file and outputs (default ./data)")
    p.add_argument("--database-url", help="SQLAlchemy URL, e.g. postgresql+psycopg://...")
    p.add_argument("--switch", help="HOST:PORT of a P4Runtime switch (default: embedded)")
    p.add_argument("--switch-data", help="HOST:PORT of that switch's UDP data plane")
    p.add_argument("--ps", help="HOST:PORT of an external parameter server")
    p.add_argument("--aggregators", type=int, help="embedded switch pool size")
    p.add_argument("--lanes", type=int, choices=(64, 128, 256))
    p.add_argument("--policy", choices=("static", "atp", "esa"))
    p.add_argument("--priority", choices=("srtf", "las", "fifo", "static"))
    p.add_argument("--tenant", default="local", help="tenant of the token printed at start")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inasched", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run the service, soft switch and PS (Ctrl-C stops)")
    _add_service_flags(up)
    up.add_argument("--demo", action="store_true", help="also run the demo jobs")
    demo = sub.add_parser("demo", help="run the demo jobs and print their JCTs")
    _add_service_flags(demo)
    demo.add_argument("--url", help="a running service (default: start one for the demo)")
    demo.add_argument("--token", default=os.environ.get("INASCHED_TOKEN"))
    jobs = sub.add_parser("jobs", help="list, submit or cancel jobs over HTTP")
    jobs.add_argument("--url", default=os.environ.get("INASCHED_URL", DEFAULT_URL))
    jobs.add_argument("--token", default=os.environ.get("INASCHED_TOKEN"))
    jsub = jobs.add_subparsers(dest="action", required=True)
    jl = jsub.add_parser("list")
    jl.add_argument("--state")
    jl.add_argument("--limit", type=int, default=50)
    js = jsub.add_parser("submit")
    js.add_argument("name")
    js.add_argument("--workers", type=int, required=True)
    js.add_argument("--iterations", type=int, required=True)
    js.add_argument("--model")
    js.add_argument("--gradient-bytes", type=int)
    js.add_argument("--priority-class", type=int, default=0)
    jc = jsub.add_parser("cancel")
    jc.add_argument("job_id", type=int)
    token = sub.add_parser("token", help="tenant API tokens")
    tsub = token.add_subparsers(dest="action", required=True)
    tc = tsub.add_parser("create")
    tc.add_argument("tenant")
    tc.add_argument("--data-dir")
    tc.add_argument("--database-url")
    for name in DELEGATES:
        sub.add_parser(name, help=f"see 'inasched {name} --help'", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``inasched`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATES:
        run: Callable[[list[str]], int] = importlib.import_module(DELEGATES[argv[0]]).main
        rest = argv[1:]
        if argv[0] == "bench" and rest[:1] == ["jct"]:
            rest = rest[1:]  # `inasched bench jct ...`, the benchmark's documented name
        return run(rest)
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    for noisy in ("alembic", "httpx"):  # one line per migration step or HTTP request
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        commands: dict[str, Callable[[argparse.Namespace], int]] = {
            "up": _up, "demo": _demo, "jobs": _jobs, "token": _token,
        }  # fmt: skip
        return commands[args.command](args)
    except ValidationError as exc:
        first = exc.errors()[0]
        return _fail(f"bad setting {'.'.join(map(str, first['loc']))}: {first['msg']}")


def _token(args: argparse.Namespace) -> int:
    from api.db import DatabaseUnavailable, open_database
    from api.store import create_tenant_token

    settings = _settings(args)
    try:
        engine, sessions = open_database(settings.resolved_database_url)
    except DatabaseUnavailable as exc:
        return _fail(str(exc))
    with sessions() as session:
        print(create_tenant_token(session, tenant=args.tenant))
    engine.dispose()
    return 0


def _up(args: argparse.Namespace) -> int:
    return _serve(args, demo=args.demo, keep_serving=True)


def _demo(args: argparse.Namespace) -> int:
    if args.url:
        if not args.token:
            return _fail("--url needs --token (or INASCHED_TOKEN)")
        from api.demo import run_demo

        run_demo(args.url, args.token, report=print)
        return 0
    return _serve(args, demo=True, keep_serving=False)


def _serve(args: argparse.Namespace, *, demo: bool, keep_serving: bool) -> int:
    import uvicorn
    from p4ctl.errors import SwitchError

    from api.app import create_app
    from api.db import DatabaseUnavailable
    from api.store import create_tenant_token

    settings = _settings(args)
    try:
        app = create_app(settings)
    except DatabaseUnavailable as exc:
        return _fail(str(exc))
    service = app.state.service
    try:
        service.start()
    except (SwitchError, OSError, ValueError) as exc:
        return _fail(f"cannot start: {exc}")
    with service.sessions() as session:
        token = create_tenant_token(session, tenant=args.tenant)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level="warning",
        timeout_graceful_shutdown=3, timeout_keep_alive=30,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="inasched-http", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            service.stop()
            return _fail(f"cannot listen on {settings.host}:{settings.port}")
        thread.join(0.05)
    url = f"http://{settings.host}:{settings.port}"
    print(f"inasched is up: dashboard {url}/  (policy {settings.policy})", flush=True)
    print(f"tenant '{args.tenant}' token: {token}", flush=True)
    print("Ctrl-C stops everything.", flush=True)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        if demo:
            from api.demo import run_demo

            run_demo(url, token, report=lambda line: print(line, flush=True))
        if keep_serving:
            print(f"serving {url}/ until Ctrl-C", flush=True)
            while not stop.wait(0.5) and thread.is_alive():
                pass
    except KeyboardInterrupt:
        print("stopping", flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.should_exit = True
        thread.join(timeout=15)
        service.stop()
    return 0


def _jobs(args: argparse.Namespace) -> int:
    if not args.token:
        return _fail("give --token or set INASCHED_TOKEN ('inasched token create TENANT')")
    headers = {"Authorization": f"Bearer {args.token}"}
    try:
        with httpx.Client(base_url=args.url, headers=headers, timeout=30) as http:
            if args.action == "list":
                params: dict[str, Any] = {"limit": args.limit}
                if args.state:
                    params["state"] = args.state
                response = http.get("/jobs", params=params)
            elif args.action == "submit":
                body = {
                    "name": args.name, "n_workers": args.workers, "iterations": args.iterations,
                    "model": args.model, "gradient_bytes": args.gradient_bytes,
                    "priority_class": args.priority_class,
                }  # fmt: skip
                response = http.post("/jobs", json={k: v for k, v in body.items() if v is not None})
            else:
                response = http.delete(f"/jobs/{args.job_id}")
    except httpx.HTTPError as exc:
        return _fail(f"cannot reach the service at {args.url}: {exc}")
    if response.is_error:
        return _fail(f"{response.status_code}: {response.text}", code=1)
    body = response.json()
    if args.action == "list":
        print(f"{'id':>5} {'state':<10} {'policy':<7} {'progress':>11} {'jct_s':>8}  name")
        for job in body["items"]:
            jct = f"{job['jct_s']:.2f}" if job["jct_s"] is not None else "-"
            done = f"{job['iterations_done']}/{job['iterations']}"
            print(
                f"{job['id']:>5} {job['state']:<10} {job['policy'] or '-':<7} {done:>11} "
                f"{jct:>8}  {job['name']}"
            )
        print(f"{body['total']} jobs")
    else:
        print(json.dumps(body, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
