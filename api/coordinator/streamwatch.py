"""`StreamWatch`: ends the open event streams of tokens revoked in the store.

A token revoked over REST ends its streams at once (`EventBus.end_streams`); one revoked by
writing the store (``inasched token revoke``) is found by looking: every `STREAM_CHECK_S`,
while streams are open, one store read tells which of their token digests are still live.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection

from api.coordinator.events import EventBus

__all__ = ["STREAM_CHECK_S", "StreamWatch"]

log = logging.getLogger(__name__)

# A revoked token's open stream ends within this long (plus one store read).
STREAM_CHECK_S = 1.0


class StreamWatch:
    """Ends the streams of revoked tokens: every `period_s`, while streams are open, one store
    read (`live`) tells which of their digests are still live tokens. A store that cannot be
    read ends no stream (the check resumes when it answers)."""

    def __init__(
        self,
        bus: EventBus,
        live: Callable[[Collection[str]], Collection[str]],
        *,
        period_s: float = STREAM_CHECK_S,
    ) -> None:
        self.bus, self.live, self.period_s = bus, live, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def check(self) -> int:
        """One check; returns how many streams it ended."""
        digests = self.bus.digests()
        if not digests:
            return 0
        revoked = digests - set(self.live(digests))
        ended = self.bus.end_streams(revoked) if revoked else 0
        if ended:
            log.info("ended %d event stream(s) of revoked tokens", ended)
        return ended

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self.period_s):
            try:
                self.check()
            except Exception as exc:  # the store is away: keep the streams, say so once
                if not failing:
                    log.warning("cannot check the event streams' tokens: %s", exc)
                failing = True
            else:
                failing = False
