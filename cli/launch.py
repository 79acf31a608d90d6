"""``inasched launch``: submit a job and run its workers under ``torchrun``, as one command.

    inasched launch --workers 2 --model ResNet-50 --iterations 100 -- train.py ARGS
    inasched launch --workers 2 --gradient-bytes 4096 --iterations 10 -- -m workers.worker

The job is submitted to the service; once it is admitted (it may first wait for switch
memory, at most ``--queue-wait`` seconds), ``torchrun --standalone --nproc-per-node N`` starts
its workers with ``INASCHED_SERVICE``, ``INASCHED_JOB`` and ``INASCHED_JOIN_TOKEN`` set beside
torchrun's own ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``. The job's state
is followed while they run: a job cancelled or failed on the service stops every worker, and
a worker that fails stops the others (torchrun does) and cancels the job, so the switch keeps
nothing of it. If ``launch`` itself is killed, torchrun is sent SIGTERM (Linux) and the service
fails the silent job after its heartbeat timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from cli.jobs import (
    ExitCode,
    UsageError,
    add_job_flags,
    fail,
    http_error,
    no_token,
    submit_body,
    unreachable,
)
from scheduler.memory import JobState

__all__ = ["LAUNCH_EXIT_CODES_HELP", "LaunchExit", "add_launch_parser", "run_launch"]

# Linux prctl(2) option: the signal a child gets when its parent dies.
_PR_SET_PDEATHSIG = 1
# How long launch asks again a service that does not answer before it gives up: a restart
# takes seconds, and the workers' heartbeats ride out as long.
_SILENCE_S = 60.0


class LaunchExit:
    """Exit status of ``inasched launch`` beyond the CLI's shared `ExitCode` (0-4)."""

    JOB_ENDED = 5  # the service cancelled or failed the job, or it stayed queued too long
    WORKER_FAILED = 6  # a worker exited non-zero or was killed
    INTERRUPTED = 7  # launch got Ctrl-C or SIGTERM


DESCRIPTION = """\
Submit a job and run its workers under torchrun on this host. Once the job is admitted,
'torchrun --standalone --nproc-per-node N' starts them with INASCHED_SERVICE, INASCHED_JOB
and INASCHED_JOIN_TOKEN set beside RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. A job
cancelled or failed on the service stops every worker; a worker that fails stops the
others and cancels the job."""
LAUNCH_EXIT_CODES_HELP = """\
exit status:
  0  the workers exited 0 (the job finished; a job whose workers did not report all
     its iterations is cancelled, so that the switch frees its memory)
  1  the service refused the job (invalid, over the tenant's quota)
  2  bad usage: an unknown flag or model, no training command
  3  the service cannot be reached
  4  no API token given, or the service did not accept it
  5  the job was cancelled or failed on the service, or was still queued after
     --queue-wait: every worker was stopped
  6  a worker failed (exited non-zero or was killed): every worker was stopped and
     the job cancelled; or the job finished and a worker failed after it (a collective
     after the job's final progress report fails)
  7  interrupted (Ctrl-C, SIGTERM): every worker was stopped and the job cancelled"""


class _Interrupted(Exception):
    """SIGTERM, turned into an exception of the main thread as Ctrl-C is."""


class _Unreachable(Exception):
    """The service has not answered for `_SILENCE_S` seconds."""


def add_launch_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """The ``launch`` command; `client` carries the global --service/--token."""
    launch = sub.add_parser(
        "launch",
        parents=[client],
        help="submit a job and run its workers under torchrun",
        description=DESCRIPTION,
        epilog=LAUNCH_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="inasched launch --workers N (--model M | --gradient-bytes B) --iterations I "
        "[options] -- SCRIPT|-m MODULE [ARGS]",
    )
    add_job_flags(launch)
    launch.add_argument("--name", help="the job's name (default: the script's or module's)")
    launch.add_argument(
        "--queue-wait",
        type=float,
        help="seconds the job may wait for switch memory before it is cancelled "
        "(default: no limit)",
    )
    launch.add_argument(
        "--torchrun",
        help="the torchrun to run (default: the one beside this Python, else on PATH)",
    )
    launch.add_argument(
        "--poll", type=float, default=1.0, help="seconds between reads of the job's state"
    )
    launch.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds workers get to stop after SIGTERM before they are killed",
    )
    launch.add_argument(
        "training",
        nargs=argparse.REMAINDER,
        metavar="-- SCRIPT|-m MODULE [ARGS]",
        help="after --: the training script (or -m MODULE) and its arguments",
    )


def run_launch(args: argparse.Namespace, *, service: str, token: str | None) -> int:
    """``inasched launch``: submit, wait for admission, run torchrun, follow the job."""
    command = list(args.training)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        return fail("give the training command after --, e.g. -- train.py ARGS")
    if not token:
        return no_token()
    torchrun = args.torchrun or _default_torchrun()
    if torchrun is None:
        return fail("torchrun not found: install torch, or give --torchrun PATH")
    try:
        body = submit_body(args, args.name or _job_name(command))
    except UsageError as exc:
        return fail(str(exc))
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=service, headers=headers, timeout=30) as http:
        try:
            response = http.post("/jobs", json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
        except httpx.HTTPError as exc:
            return unreachable(service, exc)
        if response.is_error:
            line, code = http_error(response)
            return fail(line, code)
        job = response.json()
        print(f"job {job['id']} {job['name']!r}: {job['state']}", flush=True)
        launcher = _Launcher(http, job, service=service, args=args)
        with _sigterm_interrupts():
            try:
                return launcher.run([torchrun, *_torchrun_flags(args.workers), *command])
            except _Unreachable:
                launcher.stop_workers()
                return fail(
                    f"the service at {service} has not answered for {_SILENCE_S:g} s: every "
                    f"worker stopped; job {job['id']} fails when its heartbeats stop",
                    ExitCode.UNREACHABLE,
                )
            except (KeyboardInterrupt, _Interrupted):
                launcher.stop_workers()
                cancelled = launcher.cancel("launch was interrupted")
                return _verdict(
                    f"interrupted: every worker stopped, {launcher.fate(cancelled)}",
                    LaunchExit.INTERRUPTED,
                )


def _verdict(message: str, status: int) -> int:
    """The CLI's one line on stderr (`fail`) with launch's own exit `status`."""
    fail(message, ExitCode.OK)
    return status


class _Launcher:
    """One launched job: its service-side state and its torchrun process."""

    def __init__(
        self, http: httpx.Client, job: dict[str, Any], *, service: str, args: argparse.Namespace
    ) -> None:
        self.http = http
        self.job_id = int(job["id"])
        self.token = str(job["join_token"])
        self.service = service
        self.poll_s = max(0.05, args.poll)
        self.grace_s = max(0.0, args.grace)
        self.queue_wait_s: float | None = args.queue_wait
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self, argv: list[str]) -> int:
        state, reason = self._wait_for_admission()
        if state is not None:
            return self._ended(state, reason)
        env = dict(
            os.environ,
            INASCHED_SERVICE=self.service,
            INASCHED_JOB=str(self.job_id),
            INASCHED_JOIN_TOKEN=self.token,
        )
        print(f"job {self.job_id}: starting its workers: {' '.join(argv)}", flush=True)
        try:
            self.proc = subprocess.Popen(
                argv, env=env, start_new_session=True, preexec_fn=_die_with_parent
            )
        except OSError as exc:
            cancelled = self.cancel("its workers could not be started")
            return fail(f"cannot run {argv[0]}: {exc}; {self.fate(cancelled)}")
        while (status := _wait(self.proc, self.poll_s)) is None:
            state, reason = self._state()
            if state in (JobState.CANCELLED, JobState.FAILED):
                self.stop_workers()
                return self._ended(state, reason)
        return self._workers_exited(status)

    def _workers_exited(self, status: int) -> int:
        self.stop_workers()  # a worker's own children, if it left any behind
        state, reason = self._answered_state()
        if state in (JobState.CANCELLED, JobState.FAILED):
            return self._ended(state, reason)
        if status != 0 and state == JobState.FINISHED:
            return _verdict(
                f"job {self.job_id} finished, but a worker then failed (torchrun exit status "
                f"{status}), e.g. a collective issued after the job's final progress report",
                LaunchExit.WORKER_FAILED,
            )
        if status != 0:
            cancelled = self.cancel("a worker failed")
            return _verdict(
                f"a worker failed (torchrun exit status {status}): every worker stopped, "
                f"{self.fate(cancelled)}",
                LaunchExit.WORKER_FAILED,
            )
        if state == JobState.FINISHED:
            print(f"job {self.job_id}: finished", flush=True)
        else:
            self.cancel("its workers exited before reporting every iteration")
            print(
                f"job {self.job_id}: the workers exited 0 before reporting every iteration; "
                "cancelled so that the switch frees its memory",
                flush=True,
            )
        return int(ExitCode.OK)

    def _ended(self, state: JobState, reason: str) -> int:
        return _verdict(
            f"job {self.job_id} was {state.value}: {reason or 'no reason given'}; "
            "every worker stopped",
            LaunchExit.JOB_ENDED,
        )

    def _wait_for_admission(self) -> tuple[JobState | None, str]:
        """None once the job holds switch memory; else the state it ended in and why."""
        deadline = None if self.queue_wait_s is None else time.monotonic() + self.queue_wait_s
        said = False
        while True:
            state, reason = self._answered_state()
            if state.holds_memory or state == JobState.FINISHED:
                return None, ""
            if state.terminal:
                return state, reason
            if not said:
                print(f"job {self.job_id}: queued for switch memory: {reason}", flush=True)
                said = True
            if deadline is not None and time.monotonic() >= deadline:
                self.cancel("still queued after --queue-wait")
                return JobState.CANCELLED, f"still queued after {self.queue_wait_s:g} s"
            time.sleep(self.poll_s)

    def _state(self) -> tuple[JobState | None, str]:
        """The job's state and reason; None while the service does not answer (a restart)."""
        try:
            response = self.http.get(f"/jobs/{self.job_id}")
        except httpx.HTTPError:
            return None, ""
        if response.is_error:
            return None, ""
        body = response.json()
        queue = body.get("queue_reason") or {}
        return JobState(body["state"]), str(body.get("reason") or queue.get("message") or "")

    def _answered_state(self) -> tuple[JobState, str]:
        """`_state`, asked again while the service does not answer (it may be restarting);
        raises `_Unreachable` after `_SILENCE_S` seconds without an answer."""
        deadline = time.monotonic() + _SILENCE_S
        while (found := self._state())[0] is None:
            if time.monotonic() >= deadline:
                raise _Unreachable
            time.sleep(self.poll_s)
        return found[0], found[1]

    def cancel(self, why: str) -> bool:
        """Cancel the job on the service (its switch memory is freed); whether it is cancelled
        now. A job that already ended (409), or a service that does not answer, is left as
        it is."""
        try:
            response = self.http.post(f"/jobs/{self.job_id}/cancel")
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        print(f"job {self.job_id}: cancelled: {why}", flush=True)
        return True

    def fate(self, cancelled: bool) -> str:
        """What became of the job, for the verdict line."""
        if cancelled:
            return f"job {self.job_id} cancelled"
        return (
            f"job {self.job_id} not cancelled (it had ended, or the service did not answer: "
            "then it fails when its heartbeats stop)"
        )

    def stop_workers(self) -> None:
        """SIGTERM to torchrun, which passes it to its workers; after `grace_s`, SIGKILL to
        torchrun and to every process under it still alive (torchrun starts each worker in
        a session of its own, so a killed torchrun would leave them running)."""
        if self.proc is None:
            return
        under = _descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if _wait(self.proc, self.grace_s) is None:
                under |= _descendants(self.proc.pid)
                self.proc.kill()
                self.proc.wait()
        deadline = time.monotonic() + self.grace_s
        while (alive := {p for p in under if _alive(p)}) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid, started in alive:
            with contextlib.suppress(ProcessLookupError):
                if _start_time(pid) == started:
                    os.kill(pid, signal.SIGKILL)


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def _torchrun_flags(workers: int) -> list[str]:
    # One host: a rendezvous on a free local port, so that launches can run side by side.
    return ["--standalone", "--nnodes", "1", "--nproc-per-node", str(workers)]


def _job_name(command: list[str]) -> str:
    if command[0] in ("-m", "--module") and len(command) > 1:
        return command[1].rsplit(".", 1)[-1][:64]
    return Path(command[0]).stem[:64] or "launch"


def _default_torchrun() -> str | None:
    beside = Path(sys.executable).with_name("torchrun")
    return str(beside) if beside.exists() else shutil.which("torchrun")


def _die_with_parent() -> None:
    """Run in the child before torchrun starts: SIGTERM when launch dies (Linux only)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    def interrupt(*_: object) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, ...)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _start_time(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[19]) if fields else None  # field 22 of proc(5): starttime


def _alive(process: tuple[int, int | None]) -> bool:
    fields = _stat(process[0])
    return fields is not None and fields[0] != "Z" and _start_time(process[0]) == process[1]


def _descendants(root: int) -> set[tuple[int, int | None]]:
    """``(pid, start time)`` of every process under `root` (Linux ``/proc``; else none)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[tuple[int, int | None]] = set()
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.add((pid, _start_time(pid)))
        todo.extend(children.get(pid, ()))
    return found
