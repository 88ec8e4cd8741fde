"""What both configurations (mover/config/broker.py, mover/config/security.py) stand on: `ConfigError`, the
`Listener` endpoint, and the reading and parsing of a Java `.properties` file. Below both, so neither imports the
other to get them (BrokerConfig builds a SecurityConfig; security's parser needs only these).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """An invalid configuration value; the message is one line fit for the operator."""


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def read_properties_text(path: str | os.PathLike[str]) -> str:
    """The text of a properties file, which must be UTF-8. Raises ConfigError (one line) when it cannot be read or
    holds bytes that are not UTF-8, naming the byte's offset and line."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read configuration file {path}: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path} is not UTF-8: byte 0x{data[e.start]:02x} at offset {e.start} (line {line}); "
                          "save it as UTF-8") from None


def parse_properties(text: str, *, source: str | None = None) -> dict[str, str]:
    """Java .properties, the subset brokers' files use: `k=v` or `k: v`, `#`/`!` comments, `\\` continuations.

    A key set more than once keeps its last value, as Java's Properties does; when `source` names the file, that is a
    warning naming every line that set it, so a careless copy-paste (two broker.id lines) is seen."""
    out: dict[str, str] = {}
    seen: dict[str, list[tuple[int, str]]] = {}
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if not pending:
            start = number
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        for i, ch in enumerate(line):
            if ch in "=:":
                key, value = line[:i].strip(), line[i + 1 :].strip()
                break
            if ch.isspace():
                key, value = line[:i].strip(), line[i:].strip().lstrip("=:").strip()
                break
        else:
            key, value = line, ""
        out[key] = value
        seen.setdefault(key, []).append((start, value))
    if source is not None:
        for key, places in seen.items():
            if len(places) > 1:
                lines = ", ".join(f"line {n}: {key}={v}" for n, v in places)
                log.warning("%s sets %s %d times (%s); using the last value, %r", source, key, len(places), lines,
                            places[-1][1])
    return out
