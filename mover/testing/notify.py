"""systemd's side of the notify protocol for tests: a Unix datagram socket that records what a daemon sends to
$NOTIFY_SOCKET (READY=1, STATUS=..., WATCHDOG=1, STOPPING=1), one line per message field, with arrival times."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path


class NotifySocket:
    """A Unix datagram socket playing systemd's side of sd_notify: every message with when it arrived."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []
        self._stop = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            for line in data.decode().splitlines():
                self.messages.append((time.monotonic(), line))

    def lines(self, prefix: str) -> list[str]:
        return [m for _, m in list(self.messages) if m.startswith(prefix)]

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.sock.close()

    def __enter__(self) -> NotifySocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
