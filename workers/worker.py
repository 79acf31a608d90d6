"""``inasched worker``: one data-parallel worker running a synthetic training loop.

    inasched worker --job 3 --token T --service http://127.0.0.1:8000 [--model ResNet-50]
    inasched worker --config worker0.json [...]

Each iteration sleeps for the model's compute time (times `--compute-scale`), then allreduces
a gradient of the job's size (times `--scale`) through the switch. With a service the worker
joins through REST (``workers.rendezvous``), heartbeats and reports progress; with
``--config`` it reads the join JSON from a file. A worker of a job still queued waits for its
admission (at most `--queue-wait` seconds when given).
``--service``, ``--job`` and ``--token`` default to ``INASCHED_SERVICE``, ``INASCHED_JOB`` and
``INASCHED_JOIN_TOKEN``, the variables ``inasched launch`` gives its workers; ``--gso off``
(``INASCHED_GSO``) sends each datagram alone; ``--quiet`` prints no progress lines.

Exit statuses: ``--help`` lists them (`_EXIT_HELP`), each with one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import httpx
import numpy as np
from p4ctl.gso_option import add_gso_argument

from workers.client import AllreduceClient, open_socket
from workers.errors import AllreduceTimeout, JobEnded, RendezvousError
from workers.options import ClientOptions
from workers.progress import ProgressLines
from workers.rendezvous import WorkerJoin, join, load_config

__all__ = ["Reporter", "main", "model_cost"]

log = logging.getLogger(__name__)
# The logger of the start and progress lines, which go to stdout unadorned.
PROGRESS_LOG = f"{__name__}.progress"


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (a test's capture, say)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: TextIO) -> None:
        pass


# The CLI's one-line exit verdict, bare on stderr whatever the root logger is configured to:
# its own handler, not propagated (neither basicConfig's format nor a log capture takes it).
_verdict = logging.getLogger(f"{__name__}.verdict")
_verdict.propagate = False
_verdict.addHandler(_CurrentStderr())

EXIT_ENDED = 3
EXIT_TIMEOUT = 4
EXIT_JOIN = 5
# The states in which a job has ended, each with what it means to a worker when the service's
# answer gives no detail (a heartbeat of a finished job answers 200 with the state alone).
_ENDED = {
    "finished": "every worker reported its final iteration",
    "cancelled": "cancelled",
    "failed": "failed on the service",
}
# How long a worker that finished waits for its last progress report to reach the service
# (it may be restarting); the service fails a job whose workers are silent for 60 s.
FINAL_REPORT_S = 120.0


def model_cost(model: str) -> tuple[int, float] | None:
    """``(gradient bytes, V100 iteration seconds)`` of `model` from the scheduler's table.

    Names match as job submission matches them (`scheduler.workload.find_model`: case and
    punctuation ignored, "resnet50" is "ResNet-50"); None if unknown.
    """
    # The scheduler owns the shipped data and the one matcher of model names.
    from scheduler.workload import UnknownModel, find_model, model_table

    try:
        return model_table()[find_model(model)]
    except UnknownModel:
        return None


class Reporter:
    """Heartbeats (in a thread) and progress reports of one worker to the service.

    An answer saying the job has ended (a 409, or a state of finished, cancelled or failed)
    sets `ended` to a `JobEnded` naming the state, runs ``on_end(ended)`` once (the client's
    `end`, so pending and later allreduces fail at once instead of retransmitting to a
    switch that keeps nothing of the job), and stops the heartbeats.
    A progress report the service did not get (it is restarting) is kept and sent again with
    the next heartbeat; `deliver` waits, bounded, for the last one, so a job whose workers
    finish while the service is down still finishes when it is back.
    """

    def __init__(
        self,
        service: str,
        join: WorkerJoin,
        token: str,
        on_end: Callable[[JobEnded], None] | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=service, timeout=10.0, headers={"Authorization": f"Bearer {token}"}
        )
        self._job_id = join.job_id
        self._base = f"/jobs/{join.job_id}/workers/{join.worker_id}"
        self._interval = join.heartbeat_interval_s
        self._on_end = on_end
        self.ended: JobEnded | None = None
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        self._unsent: dict[str, int] | None = None  # the latest progress not yet delivered
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="inasched-heartbeat", daemon=True)
        self._thread.start()

    def _post(self, path: str, body: dict[str, int] | None = None) -> bool:
        """POST to this worker's resource; whether the service took it (no transport error,
        no 5xx: a 409 is taken too, it says the job ended)."""
        try:
            response = self._http.post(self._base + path, json=body or {})
        except httpx.HTTPError as exc:  # a service restart must not stop training
            log.warning("%s failed: %s", path, exc)
            return False
        if response.status_code == 409 or response.is_success:
            self._note_state(response)
        elif 400 <= response.status_code < 500:  # sending it again cannot help
            log.warning("%s refused (%d): %s", path, response.status_code, response.text[:200])
        return response.status_code < 500

    def _note_state(self, response: httpx.Response) -> None:
        """Take the job's state from an answer; the first that says it ended ends the client."""
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        state = str(answer.get("state") or "ended")
        if response.status_code != 409 and state not in _ENDED:
            return
        detail = str(answer.get("detail") or _ENDED.get(state, "the service says so"))
        with self._lock:
            if self.ended is not None:
                return
            self.ended = JobEnded(self._job_id, state, detail)
        log.info("%s", self.ended)
        if self._on_end is not None:
            self._on_end(self.ended)

    def _send_unsent(self) -> bool:
        """Send the latest undelivered progress, if any; whether none is left. One thread at
        a time, so the heartbeat thread never sends the report the caller is sending."""
        with self._sending:
            with self._lock:
                body = self._unsent
            if body is None:
                return True
            if not self._post("/progress", body):
                return False
            with self._lock:
                if self._unsent is body:  # else a newer report came meanwhile
                    self._unsent = None
                return self._unsent is None

    def _beat(self) -> None:
        # Once the service said the job ended there is nothing left to tell it.
        while self.ended is None and not self._stop.wait(self._interval):
            self._send_unsent()
            self._post("/heartbeat")

    def progress(self, iterations_done: int, client: AllreduceClient) -> None:
        stats = client.stats()
        body = {
            "iterations_done": iterations_done,
            "bytes_switch": stats.bytes_switch,
            "bytes_ps": stats.bytes_ps,
        }
        with self._lock:
            self._unsent = body
        self._send_unsent()

    def deliver(self, timeout_s: float) -> bool:
        """Wait until the last progress report reached the service (at most `timeout_s`);
        whether it did. Heartbeats go on meanwhile, so the job stays alive."""
        deadline = time.monotonic() + timeout_s
        if self._send_unsent():
            return True
        log.info(
            "waiting for the service to take the last progress report (%g s at most)", timeout_s
        )
        while not self._send_unsent():
            if self.ended is not None or time.monotonic() >= deadline:
                log.warning("the last progress report did not reach the service")
                return False
            time.sleep(self._interval)
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._http.close()


_EXIT_HELP = f"""exit status (with one line on stderr):
  0  done
  {EXIT_ENDED}  the job ended (cancelled, failed, or finished) before this worker's iterations
  {EXIT_TIMEOUT}  no result within --timeout (a peer stopped, or the switch is unreachable)
  {EXIT_JOIN}  could not join (service, token, config, or still queued after --queue-wait)
  1  anything else
  2  bad arguments"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inasched worker",
        description=__doc__.split("\n")[0],
        epilog=_EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--job", type=int, help="the service's job id (default: $INASCHED_JOB)")
    parser.add_argument("--token", help="the job's join token (default: $INASCHED_JOIN_TOKEN)")
    parser.add_argument(
        "--service", help="base URL of the inasched service (default: $INASCHED_SERVICE)"
    )
    parser.add_argument("--config", help="join JSON file, instead of --job/--token/--service")
    parser.add_argument(
        "--model",
        help="emulate this model of the model table: its gradient size and compute time "
        "(default: the job's gradient size and its model's compute time)",
    )
    parser.add_argument("--iterations", type=int, help="default: the job's")
    parser.add_argument("--scale", type=float, default=1.0, help="gradient size factor")
    parser.add_argument("--compute-scale", type=float, default=1.0, help="compute time factor")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind the data socket")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds without a result")
    parser.add_argument(
        "--queue-wait",
        type=float,
        default=None,
        help="seconds to wait while the job is queued for switch memory (default: no limit)",
    )
    parser.add_argument("--seed", type=int, default=0)
    add_gso_argument(parser)
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="print no start and progress lines on stdout (the exit line on stderr stays)",
    )
    parser.add_argument("--log-level", default="WARNING")
    return parser


def _progress(args: argparse.Namespace) -> ProgressLines:
    """The start and progress lines, logged to stdout as they are (`PROGRESS_LOG`), or
    nowhere with `--quiet`."""
    if args.quiet:
        return ProgressLines(lambda line: None)
    progress = logging.getLogger(PROGRESS_LOG)
    if not progress.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        progress.addHandler(handler)
        progress.setLevel(logging.INFO)
        progress.propagate = False  # the lines are the command's output, not log records
    return ProgressLines(progress.info)


def main(argv: list[str] | None = None) -> int:
    """Run the worker; returns the exit status (module docstring)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.config:
        _from_launch(args)
    if not args.config and not (args.job is not None and args.token and args.service):
        parser.error("give --config FILE, or --job, --token and --service")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        return _run(args)
    except JobEnded as exc:
        return _fail(EXIT_ENDED, str(exc))
    except RendezvousError as exc:
        return _fail(EXIT_JOIN, str(exc))
    except AllreduceTimeout as exc:
        return _fail(EXIT_TIMEOUT, str(exc))
    except OSError as exc:
        return _fail(1, f"socket error: {exc}")


def _from_launch(args: argparse.Namespace) -> None:
    """Fill --service, --job and --token not given from the variables of ``inasched launch``."""
    args.service = args.service or os.environ.get("INASCHED_SERVICE")
    args.token = args.token or os.environ.get("INASCHED_JOIN_TOKEN")
    if args.job is None and os.environ.get("INASCHED_JOB", "").isdigit():
        args.job = int(os.environ["INASCHED_JOB"])


def _fail(status: int, message: str) -> int:
    _verdict.error("inasched worker: %s", message)
    return status


@dataclass(frozen=True, slots=True)
class _Workload:
    """What the worker emulates: `iterations` of `compute_s` seconds, then an allreduce of
    `size` floats."""

    model: str | None
    iterations: int
    size: int
    compute_s: float


def _joined(args: argparse.Namespace) -> tuple[WorkerJoin, socket.socket]:
    """The join (from --config, or through the service) and the data socket it names."""
    if args.config:
        join_info = load_config(args.config)
        return join_info, open_socket(join_info.data_host or args.host, join_info.data_port or 0)
    sock = open_socket(args.host, 0)
    try:
        endpoint = sock.getsockname()[:2]
        return join(
            args.service, args.job, args.token, endpoint, queue_wait_s=args.queue_wait
        ), sock
    except BaseException:
        sock.close()
        raise


def _workload(args: argparse.Namespace, join_info: WorkerJoin) -> _Workload:
    """The job's workload, or an explicit --model's, scaled by --scale and --compute-scale."""
    model = args.model or join_info.model
    cost = model_cost(model) if model else None
    # The gradient is the job's size, which the service scheduled; only an explicit `--model`
    # (emulating that model's job, scaled by `--scale`) sizes it from the model table.
    grad_bytes = cost[0] if cost and args.model else join_info.gradient_bytes
    return _Workload(
        model=model,
        iterations=args.iterations if args.iterations is not None else join_info.iterations,
        size=max(1, int(grad_bytes * args.scale) // 4),
        compute_s=(cost[1] if cost else 0.0) * args.compute_scale,
    )


def _train(
    client: AllreduceClient,
    reporter: Reporter | None,
    work: _Workload,
    grad: np.ndarray,
    progress: ProgressLines,
) -> None:
    """The iterations: compute, allreduce, report progress; JobEnded when the job ends first."""
    for it in range(work.iterations):
        if work.compute_s:
            time.sleep(work.compute_s)
        client.allreduce(grad * np.float32(1.0 / (1 + it)), key="grad", average=True)
        if reporter is not None:
            if reporter.ended is not None:
                raise reporter.ended.again()
            reporter.progress(it + 1, client)
        progress.iteration(it + 1, client.stats())
    if reporter is not None:
        reporter.deliver(FINAL_REPORT_S)


def _run(args: argparse.Namespace) -> int:
    join_info, sock = _joined(args)
    work = _workload(args, join_info)
    client = AllreduceClient(
        join_info, sock=sock, options=ClientOptions(timeout_s=args.timeout), gso=args.gso
    )
    reporter = Reporter(args.service, join_info, args.token, client.end) if args.service else None
    rng = np.random.default_rng(args.seed + join_info.worker_id)
    # One random gradient, rescaled per iteration: generating fresh noise of a large model's
    # size every iteration would cost more than the allreduce being emulated.
    grad = (rng.standard_normal(work.size) * 1e-2).astype(np.float32)
    log.info(
        "job %d: a gradient of %s (%d floats), %.3f s compute per iteration",
        join_info.job_id,
        work.model or "the job's size",
        work.size,
        work.compute_s,
    )
    progress = _progress(args)
    progress.start(
        join_info, iterations=work.iterations, gradient_bytes=work.size * 4, model=work.model
    )
    try:
        _train(client, reporter, work, grad, progress)
    finally:
        if reporter is not None:
            reporter.close()
        client.close()
    log.info("job %d worker %d done: %s", join_info.job_id, join_info.worker_id, client.stats())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
