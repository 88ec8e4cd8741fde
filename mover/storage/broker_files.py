"""BrokerFiles: the broker-wide JSON files kept in every online log dir (the dynamic config layers, KIP-179's request
ids, ACLs, SCRAM credentials, the ZooKeeper session id), so losing one disk loses none of them.

Their owners (mover/config/dynamic.py, mover/moves/requests.py, mover/security/, mover/zk/registration.py) say what
to write; this says where and what an error means. In moverd the LogManager hands out one whose dirs are the online
log dirs at each call and whose guard is `LogDirs.storage_guard`, so an I/O error writing or reading a copy takes that
dir offline like any other storage error, and a process limit (EMFILE, ENOMEM) fails that copy and leaves the dir
online (docs/architecture.md). Without a guard (tools, unit tests) an error is logged and the dir skipped.

Crash-safety invariants:
* Each copy is replaced with `atomic_write` (tmp, fsync, rename, fsync of the dir): a crash leaves the old or the new
  copy whole, never a torn one.
* Every copy carries a rank (an epoch, a next id, a time) and the reader takes the highest: a copy a failed dir
  missed, or a crash between two dirs' writes, is outranked by the newer one, never merged with it.
* No copy is written to a dir that is offline: the dirs are asked for at each write.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from mover.storage.files import atomic_write

log = logging.getLogger(__name__)

# Runs storage work on one log dir; yields the list it appends the dir's OSError to (swallowed, not raised).
FileGuard = Callable[[Path, str], AbstractContextManager[list[OSError]]]


@contextlib.contextmanager
def _log_and_skip(path: Path, what: str) -> Iterator[list[OSError]]:
    failed: list[OSError] = []
    try:
        yield failed
    except OSError as e:
        failed.append(e)
        log.warning("%s in %s: %s", what, path, e)


class BrokerFiles:
    def __init__(self, dirs: Callable[[], Iterable[Path]] | Iterable[Path], guard: FileGuard | None = None) -> None:
        """`dirs`: the log dirs to keep copies in, asked for at each call when a callable (moverd: the online
        ones); `guard`: what an OSError on a dir means (moverd: `LogDirs.storage_guard`, reraise=False)."""
        if callable(dirs):
            self._dirs = dirs
        else:
            fixed = list(dirs)
            self._dirs = lambda: fixed
        self._guard = guard or _log_and_skip

    def dirs(self) -> list[Path]:
        return list(self._dirs())

    def write_json(self, name: str, value: object, what: str) -> int:
        """Write `value` as `name` in every dir (atomically, durably); returns how many dirs hold it now."""
        data = json.dumps(value, sort_keys=True).encode()
        written = 0
        for d in self.dirs():
            with self._guard(d, f"persist {what}") as failed:
                atomic_write(d / name, data)
            written += not failed
        if not written:
            log.error("%s persisted in no log dir", what)
        return written

    def read_newest_json(self, name: str, rank: Callable[[dict[str, Any]], int], what: str) -> dict[str, Any] | None:
        """The copy of `name` with the highest `rank` among the dirs. A missing copy is skipped; one that is not
        valid (a hand edit, a copy of another format) is logged and skipped; a read error goes to the guard."""
        best: dict[str, Any] | None = None
        best_rank = 0
        for d in self.dirs():
            raw: bytes | None = None
            with self._guard(d, f"read {what}"):
                try:
                    raw = (d / name).read_bytes()
                except FileNotFoundError:
                    continue
            if raw is None:
                continue
            try:
                data = json.loads(raw.decode("utf-8"))
                if not isinstance(data, dict):
                    raise ValueError(f"not a {what} file")
                r = rank(data)
            except (ValueError, TypeError, KeyError) as e:
                log.warning("ignoring unreadable %s: %s", d / name, e)
                continue
            if best is None or r > best_rank:
                best, best_rank = data, r
        return best

    def stamp(self, name: str) -> tuple[tuple[str, int, int], ...]:
        """(dir, mtime, size) of each copy: cheap to compare, to notice another process's write."""
        out = []
        for d in self.dirs():
            try:
                st = (d / name).stat()
            except OSError:
                continue
            out.append((str(d), st.st_mtime_ns, st.st_size))
        return tuple(out)


def as_broker_files(dirs: BrokerFiles | Callable[[], Iterable[Path]] | Iterable[Path]) -> BrokerFiles:
    """A BrokerFiles as given, or one over the given dirs with no guard (tools and unit tests)."""
    return dirs if isinstance(dirs, BrokerFiles) else BrokerFiles(dirs)
