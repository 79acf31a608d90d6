"""`Releaser`: removes ended jobs from the switch in the background.

Reclaiming a job's aggregators and removing its tables reads whole register arrays on a
P4Runtime target, which takes seconds; done under the scheduling lock it would stall every
join, report and submission meanwhile. The job's switch job id stays taken until its removal
is done, so no new job can meet its leftovers, and a restart in between finds the leftovers
as stale state and removes them (`Coordinator.resync`).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from p4ctl.backend import SwitchBackend
from p4ctl.errors import SwitchError

from api.coordinator.pslink import PsLink

__all__ = ["Releaser"]

log = logging.getLogger(__name__)


class Releaser:
    """A queue of switch job ids to remove and the thread that removes them, oldest first."""

    def __init__(
        self,
        *,
        backend: SwitchBackend,
        ps: PsLink | None,
        on_released: Callable[[int], None],
        retry_s: float = 1.0,
    ) -> None:
        self.backend = backend
        self.ps = ps
        self.on_released = on_released
        self.retry_s = retry_s
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inasched-releaser", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, switch_job_id: int) -> None:
        """Remove `switch_job_id` from the switch soon; `on_released` runs once it is gone."""
        self._queue.put(switch_job_id)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Finish the removals queued so far, then stop (failures are left to the next start)."""
        self._stopping.set()
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def pending(self) -> int:
        return self._queue.qsize()

    def _run(self) -> None:
        while (sid := self._queue.get()) is not None:
            try:
                # remove_job also frees the job's aggregators; a reclaim before it would read
                # the whole pool once more, which takes seconds on a P4Runtime target.
                self.backend.remove_job(sid)
            except SwitchError as exc:
                log.warning("switch job %d not removed yet: %s", sid, exc)
                if not self._stopping.wait(self.retry_s):
                    self._queue.put(sid)
                continue
            if self.ps is not None:
                # A PS away keeps the job's registration; the id's next admission replaces it.
                self.ps.remove(sid)
            self.on_released(sid)
