"""The exceptions of the worker library (one tree, so a caller can catch `WorkerError`).

``WorkerError``
  ``AllreduceTimeout``  no result within the timeout: a peer stopped, or the switch is gone
  ``ClientClosed``      the client was closed, or failed earlier, before this allreduce finished
  ``RendezvousError``   the worker could not learn its job (service, token, config file)
  ``JobEnded``          the service says the job has ended (finished, cancelled or failed): its
                        join fails, and so does every allreduce pending or issued after it
"""

from __future__ import annotations

__all__ = ["AllreduceTimeout", "ClientClosed", "JobEnded", "RendezvousError", "WorkerError"]


class WorkerError(Exception):
    """Base of every error the worker library raises on purpose."""


class AllreduceTimeout(WorkerError):
    """No result arrived for `seq` of job `job` within `timeout_s`."""

    def __init__(self, job: int, seq: int, timeout_s: float, resends: int, switch: str) -> None:
        super().__init__(
            f"job {job}: no result for fragment {seq} in {timeout_s:.1f} s after {resends} "
            f"retransmissions; a peer worker stopped or the switch at {switch} is unreachable"
        )
        self.job = job
        self.seq = seq


class ClientClosed(WorkerError):
    """The allreduce client is closed (or broken by an earlier failure, given as the cause)."""


class RendezvousError(WorkerError):
    """The worker could not join its job; the message says what to fix."""


class JobEnded(WorkerError):
    """The service reports that job `job_id` has ended in `state` (finished, cancelled, failed).

    A collective on an ended job cannot complete (the switch keeps nothing of it), so the
    client fails it with this error instead of retransmitting until its timeout.
    """

    def __init__(self, job_id: int, state: str, detail: str) -> None:
        super().__init__(f"job {job_id} has ended ({state}): {detail}; no collective can run on it")
        self.job_id = job_id
        self.state = state
        self.detail = detail

    def again(self) -> JobEnded:
        """A fresh copy, to raise once more without growing the first one's traceback."""
        return JobEnded(self.job_id, self.state, self.detail)
