"""The thread every test client runs on (producers, consumers, the MoveWatcher), and the one rule they share: a
client that hung or crashed fails the test, for a dead client must not pass."""

from __future__ import annotations

import logging
import threading
from typing import Self

from mover.testing.wait import WAIT_S

log = logging.getLogger(__name__)


class Worker:
    """A client on a thread of its own: `start()`, `close()` (stop without judging, for finally blocks), and
    `_check_stopped()`, which fails the test when the thread hung or crashed (a dead client must not pass)."""

    kind = "worker"
    join_timeout_s = WAIT_S

    def __init__(self, name: str) -> None:
        self.name = name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run_guarded, name=f"{self.kind}-{name}", daemon=True)
        self.crash: BaseException | None = None

    def start(self) -> Self:
        self._thread.start()
        return self

    def _run_guarded(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by _check_stopped()
            self.crash = e
            log.exception("%s %s crashed", self.kind, self.name)

    def _run(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self.join_timeout_s)

    def _check_stopped(self) -> None:
        assert not self._thread.is_alive(), f"{self.kind} {self.name} did not stop"
        assert self.crash is None, f"{self.kind} {self.name} crashed: {self.crash!r}"
