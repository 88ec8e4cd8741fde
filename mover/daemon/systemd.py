"""systemd's notify protocol (Type=notify): READY, STATUS, RELOADING, STOPPING and the WATCHDOG pings.

The protocol is one datagram per message to the Unix socket named by $NOTIFY_SOCKET (sd_notify(3)); the standard
library's socket does it, so there is no dependency on libsystemd. Without $NOTIFY_SOCKET (not under systemd, or
a unit that is not Type=notify) every call is a no-op.

The watchdog (WatchdogSec= in the unit; systemd passes it as $WATCHDOG_USEC) restarts the daemon when the pings
stop. A ping only means something if it is sent when the daemon is actually working, so `Watchdog` pings from its
own thread only after every health check passed: the asyncio loop that serves clients answers a callback (a loop
stuck in a blocking call would not), and the log manager's housekeeping thread (retention, flushes, deletes, dir
probes) is alive. When a check fails the thread keeps running and keeps checking, but sends no ping: systemd then
kills and restarts the daemon after WatchdogSec, which is the point.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mover.faults import wedge_point

log = logging.getLogger(__name__)

# A health check returns None when healthy, else what is wrong (logged once per failure streak).
HealthCheck = Callable[[], str | None]

# STATUS= is refreshed at least this often when it changes (moves start and end, dirs fail). Cheap: it reads a
# few counters the log manager keeps in memory.
STATUS_PERIOD_S = 1.0


def notify(message: str) -> bool:
    """sd_notify: one datagram to $NOTIFY_SOCKET. Returns whether it was sent (False when not under systemd)."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]  # abstract namespace socket
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(message.encode())
        return True
    except OSError as e:
        log.warning("could not notify systemd: %s", e)
        return False


def watchdog_interval() -> float | None:
    """Seconds between pings, half of WatchdogSec as sd_watchdog_enabled(3) advises; None when it is off."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None  # WATCHDOG_PID names another process: the watchdog is not ours to feed
    try:
        value = int(usec)
    except ValueError:
        log.warning("ignoring WATCHDOG_USEC=%r: not an integer", usec)
        return None
    return value / 1e6 / 2 if value > 0 else None


@dataclass(frozen=True)
class Status:
    """What STATUS= shows: `systemctl status moverd` prints it under the unit's name."""

    moves_running: int
    moves_queued: int
    dirs_offline: int
    dirs: int
    partitions: int
    zookeeper: str | None = None  # the session state; None when stand-alone

    def line(self) -> str:
        line = (f"moves: {self.moves_running} running, {self.moves_queued} queued; "
                f"log dirs: {self.dirs_offline} of {self.dirs} offline; partitions: {self.partitions}")
        return line if self.zookeeper is None else f"{line}; zookeeper: {self.zookeeper}"


class LoopProbe:
    """Health check: does the asyncio loop run a callback within `timeout`? At most one probe is pending at a
    time, so a wedged loop does not pile up callbacks."""

    def __init__(self, loop_call: Callable[[Callable[[], None]], None], timeout: float) -> None:
        self._call = loop_call
        self.timeout = timeout
        self._pending: concurrent.futures.Future[None] | None = None
        self._since = 0.0

    def __call__(self) -> str | None:
        if self._pending is None or self._pending.done():
            fut: concurrent.futures.Future[None] = concurrent.futures.Future()

            def answer() -> None:
                wedge_point("loop.probe")
                fut.set_result(None)

            try:
                self._call(answer)
            except RuntimeError as e:  # the loop is closed
                return f"event loop is gone: {e}"
            self._pending, self._since = fut, time.monotonic()
        try:
            self._pending.result(self.timeout)
            return None
        except concurrent.futures.TimeoutError:
            return f"event loop has not answered for {time.monotonic() - self._since:.1f}s"


class Watchdog:
    """The notify thread: WATCHDOG=1 every `interval` while healthy, STATUS= when it changes."""

    def __init__(self, checks: list[HealthCheck], status: Callable[[], Status], interval: float | None) -> None:
        self.checks = checks
        self.status = status
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="systemd-notify", daemon=True)
        self._last_status = ""
        self._failing: str | None = None

    def start(self) -> None:
        if os.environ.get("NOTIFY_SOCKET"):
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        period = min(self.interval, STATUS_PERIOD_S) if self.interval else STATUS_PERIOD_S
        next_ping = time.monotonic()
        while not self._stop.is_set():
            try:
                self._send_status()
                if self.interval is not None and time.monotonic() >= next_ping:
                    if self._healthy():
                        notify("WATCHDOG=1")
                    next_ping = time.monotonic() + self.interval
            except Exception:  # the notify thread must outlive any surprise; a dead pinger restarts the daemon
                log.exception("systemd notify thread")
            self._stop.wait(period)

    def _healthy(self) -> bool:
        for check in self.checks:
            problem = check()
            if problem is not None:
                if self._failing is None:
                    log.error("not pinging the systemd watchdog: %s", problem)
                self._failing = problem
                return False
        if self._failing is not None:
            log.warning("healthy again; pinging the systemd watchdog")
            self._failing = None
        return True

    def _send_status(self) -> None:
        line = self.status().line()
        if line != self._last_status and notify(f"STATUS={line}"):
            self._last_status = line
