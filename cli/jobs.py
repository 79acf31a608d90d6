"""``inasched jobs list|submit|cancel``: the REST API's jobs from the command line.

Output is for people (a table, a few lines) unless ``--json`` asks for the service's JSON
body as is. Every failure is one line on stderr and an `ExitCode`.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import httpx

from scheduler.memory import JobState
from scheduler.workload import UnknownModel, find_model

__all__ = [
    "DEFAULT_URL",
    "ExitCode",
    "OneLineParser",
    "add_job_flags",
    "add_jobs_parser",
    "fail",
    "http_error",
    "jobs_table",
    "run_jobs",
]

DEFAULT_URL = "http://127.0.0.1:8000"


class ExitCode(enum.IntEnum):
    """Exit status of every ``inasched`` command except the delegated ones (switch, ps,
    worker, bench), which document their own."""

    OK = 0
    REFUSED = 1  # the service answered with an error: no such job, already ended, invalid
    USAGE = 2  # a bad flag, setting or value (argparse exits 2 too)
    UNREACHABLE = 3  # the service, the switch or the database is not answering
    UNAUTHORIZED = 4  # no token, or the service did not accept it


EXIT_CODES_HELP = """\
exit status:
  0  done
  1  the service refused the request (no such job, job already ended, invalid job)
  2  bad usage: an unknown flag, a bad setting or value
  3  the service, the switch or the database cannot be reached
  4  no API token given, or the service did not accept it"""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are the CLI's one line on stderr and exit 2, as
    every other usage error of ``inasched`` (its subcommands' parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("inasched").strip()
        fail(f"{command + ': ' if command else ''}{message} (see '{self.prog} --help')")
        raise SystemExit(int(ExitCode.USAGE))


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> int:
    """Print ``inasched: <message>`` as one line on stderr; returns `code`."""
    print(f"inasched: {' '.join(message.split())}", file=sys.stderr)
    return int(code)


def http_error(response: httpx.Response) -> tuple[str, ExitCode]:
    """One readable line for an error answer of the service, and the exit code it means."""
    try:
        body = response.json()
    except ValueError:
        body = None
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # request validation: [{"loc": [...], "msg": ...}, ...]
        parts = []
        for error in detail:
            where = [str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path")]
            msg = str(error.get("msg", "invalid"))
            parts.append(f"{'.'.join(where)}: {msg}" if where else msg)
        text = "; ".join(parts)
    elif isinstance(detail, str):
        text = detail
    else:
        text = response.text.strip()[:200] or response.reason_phrase
    code = ExitCode.UNAUTHORIZED if response.status_code in (401, 403) else ExitCode.REFUSED
    return f"{text} (HTTP {response.status_code})", code


def add_jobs_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """The ``jobs`` command and its actions; `client` carries the global --service/--token."""
    jobs = sub.add_parser(
        "jobs",
        parents=[client],
        help="list, submit or cancel jobs over HTTP",
        description="List, submit or cancel your tenant's jobs on a running service.",
    )
    actions = jobs.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[client], help="a table of the jobs, newest first")
    listing.add_argument(
        "--state",
        choices=[state.value for state in JobState],
        help="only jobs in this state",
    )
    listing.add_argument("--limit", type=int, default=50, help="at most this many (1..500)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many newest jobs")
    listing.add_argument("--json", action="store_true", help="print the service's JSON")
    submit = actions.add_parser(
        "submit",
        parents=[client],
        help="submit a job; prints its join token and how to start its workers",
        description="Submit a job. Give --model (its gradient size comes from the model "
        "table) or --gradient-bytes.",
    )
    submit.add_argument("name", help="a name for the job (letters, digits, . _ - and spaces)")
    add_job_flags(submit)
    submit.add_argument("--json", action="store_true", help="print the service's JSON")
    limits = actions.add_parser(
        "limits", parents=[client], help="what your tenant may do (priority classes, quotas)"
    )
    limits.add_argument("--json", action="store_true", help="print the service's JSON")
    cancel = actions.add_parser("cancel", parents=[client], help="cancel a job")
    cancel.add_argument("job_id", type=int, help="the job's id")
    cancel.add_argument("--json", action="store_true", help="print the service's JSON")


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a job's spec (`jobs submit`, `launch`), which `submit_body` reads."""
    parser.add_argument("--workers", type=int, required=True, help="data-parallel workers, 1..32")
    parser.add_argument("--iterations", type=int, required=True, help="iterations to run")
    parser.add_argument(
        "--model",
        help="a model of the table, case and punctuation ignored (resnet50, bert, vgg16)",
    )
    parser.add_argument(
        "--gradient-bytes", type=int, help="fp32 gradient bytes per iteration (instead of --model)"
    )
    parser.add_argument(
        "--priority-class", type=int, default=0, help="user class 0..15, higher first (static)"
    )
    parser.add_argument(
        "--window", type=int, help="fragments in flight, 1..4096 (default: the service's)"
    )


def no_token() -> int:
    """The one-line answer to a command that needs an API token and has none."""
    return fail(
        "no API token: give --token or set INASCHED_TOKEN "
        "('inasched token create TENANT' makes one; 'inasched up' prints one)",
        ExitCode.UNAUTHORIZED,
    )


def unreachable(service: str, exc: Exception) -> int:
    """The one-line answer when `service` does not answer."""
    return fail(
        f"cannot reach the service at {service} ({exc}); is it up? "
        "Give --service URL or set INASCHED_URL",
        ExitCode.UNREACHABLE,
    )


def submit_body(args: argparse.Namespace, name: str | None) -> dict[str, Any]:
    """The ``POST /jobs`` body of a job's flags (`jobs submit`, `launch`); `UsageError` says
    what is wrong with them."""
    if (args.model is None) == (args.gradient_bytes is None):
        raise UsageError("give --model or --gradient-bytes (one of them: a job has one size)")
    try:
        model = find_model(args.model) if args.model is not None else None
    except UnknownModel as exc:
        raise UsageError(str(exc)) from None
    given = {
        "name": name, "n_workers": args.workers, "iterations": args.iterations,
        "model": model, "gradient_bytes": args.gradient_bytes,
        "priority_class": args.priority_class, "window": args.window,
    }  # fmt: skip
    return {k: v for k, v in given.items() if v is not None}


class UsageError(ValueError):
    """A command's flags that cannot make a request; its message is the one line to print."""


def run_jobs(args: argparse.Namespace, *, service: str, token: str | None) -> int:
    """``inasched jobs ACTION``: one request to `service`; returns the exit status."""
    if not token:
        return no_token()
    body: dict[str, Any] = {}
    if args.action == "submit":
        try:
            body = submit_body(args, args.name)
        except UsageError as exc:
            return fail(str(exc))
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=service, headers=headers, timeout=30) as http:
            if args.action == "list":
                params: dict[str, Any] = {"limit": args.limit, "offset": args.offset}
                if args.state:
                    params["state"] = args.state
                response = http.get("/jobs", params=params)
            elif args.action == "submit":
                response = http.post("/jobs", json=body)
            elif args.action == "limits":
                response = http.get("/limits")
            else:
                response = http.post(f"/jobs/{args.job_id}/cancel")
    except httpx.HTTPError as exc:
        return unreachable(service, exc)
    if response.is_error:
        line, code = http_error(response)
        return fail(line, code)
    result = response.json()
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.action == "list":
        print(jobs_table(result["items"]))
        print(f"{len(result['items'])} of {result['total']} jobs")
    elif args.action == "submit":
        print(_submitted(result, service))
    elif args.action == "limits":
        print(limits_line(result))
    else:
        print(f"job {result['id']} {result['name']!r}: {result['state']}")
    return int(ExitCode.OK)


def limits_line(limits: dict[str, Any]) -> str:
    """A ``TenantLimitsPublic`` body as one line."""
    return (
        f"tenant {limits['tenant']}: priority classes 0..{limits['max_priority_class']}, "
        f"{limits['max_jobs']} jobs admitted at once, {limits['aggregator_share']:.0%} of the "
        f"aggregators, {limits['submit_rate']:g} submissions/s (bursts of "
        f"{limits['submit_burst']})"
    )


def _submitted(job: dict[str, Any], service: str) -> str:
    lines = [f"job {job['id']} {job['name']!r}: {job['state']}"]
    if job.get("join_token"):
        worker = f"inasched worker --job {job['id']} --token {job['join_token']}"
        lines += [
            f"join token (shown only now): {job['join_token']}",
            f"start its {job['n_workers']} workers, each with:",
            f"  {worker} --service {service}",
        ]
    return "\n".join(lines)


COLUMNS = ("ID", "NAME", "STATE", "POLICY", "PRIO", "WORKERS", "PROGRESS", "JCT_S", "WHY")
RIGHT = {"ID", "PRIO", "WORKERS", "PROGRESS", "JCT_S"}
OVERRAN = "over-ran its declared iterations: ranked by attained service"


def _row(job: dict[str, Any]) -> tuple[str, ...]:
    jct = f"{job['jct_s']:.2f}" if job.get("jct_s") is not None else "-"
    queue = job.get("queue_reason") or {}
    overran = OVERRAN if job.get("overran_declaration") else ""
    why = job.get("reason") or queue.get("message") or overran
    return (
        str(job["id"]),
        str(job["name"]),
        str(job["state"]),
        str(job.get("policy") or "-"),
        str(job.get("priority_level", "-")),
        str(job["n_workers"]),
        f"{job['iterations_done']}/{job['iterations']}",
        jct,
        str(why),
    )


def jobs_table(jobs: Sequence[dict[str, Any]]) -> str:
    """`jobs` (``JobPublic`` bodies) as an aligned text table with a header line."""
    rows = [COLUMNS, *(_row(job) for job in jobs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if name in RIGHT else cell.ljust(width)
            for cell, width, name in zip(row, widths, COLUMNS, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
