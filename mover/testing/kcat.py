"""kcat (librdkafka's command-line client): the system tests' second, independent client implementation beside
kafka-python, found once for its producers and consumers."""

from __future__ import annotations

import shutil

KCAT = shutil.which("kcat")


def require_kcat() -> str:
    """kcat's path; CI installs it (Debian package `kcat`), so its absence is a failure, not a skip."""
    assert KCAT is not None, "kcat is not installed (apt-get install kcat): the system tests need it"
    return KCAT
