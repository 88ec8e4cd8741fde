"""ConfigReloader: server.properties re-read while moverd runs, on an edit of the file and on SIGHUP.

What a reload does, key by key (compared with the file as last read):
* a dynamic key (mover.config.DYNAMIC_KEYS: the throttle under both names, the move threads) becomes the new static
  layer of the dynamic broker config and applies at once, unless a value set at run time through
  IncrementalAlterConfigs (the persisted dynamic layers) sets the same key: that value still wins, as in Kafka,
  whose dynamic broker config takes precedence over server.properties (docs/kafka-compat.md#dynamic-broker-config-
  precedence);
* any other known key is static: the change is logged (key, old and new value) as needing a restart and the running
  value stays;
* a file that does not parse or holds an invalid value is logged and changes nothing (all or nothing, as
  IncrementalAlterConfigs validates a whole request): the daemon keeps its running configuration.

Edits are seen through watchdog (inotify) on the file's directory, filtered to the file's name: editors save by
writing a temporary file and renaming it over the original (or truncate and write in several steps), so events are
debounced until the directory has been quiet for DEBOUNCE_S (at most MAX_DELAY_S after the first one), and a reload
whose text did not change does nothing. SIGHUP (`systemctl reload`) reloads at once, changed or not.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from mover.config.broker import (
    DYNAMIC_KEYS,
    KNOWN_KEYS,
    BrokerConfig,
    ConfigError,
    parse_properties,
    read_properties_text,
)
from mover.config.dynamic import ATTRIBUTE, ConfigSource, DynamicBrokerConfig
from mover.config.file_watch import stop_observer

log = logging.getLogger(__name__)

# Quiet time after the last event before the file is read: an editor's write-rename-chmod sequence takes
# milliseconds; a quarter second also absorbs a slow `cat > file` of a large file without being noticeable.
DEBOUNCE_S = 0.25
# A file rewritten without pause (a loop appending to it) is still read at this interval.
MAX_DELAY_S = 2.0

# Event types that mean the content may have changed; not `opened` / `closed_no_write`, which our own reads cause.
_CHANGES = frozenset({"created", "modified", "moved", "deleted", "closed"})

UNSET = "(unset)"


class ConfigReloader:
    def __init__(self, path: str | os.PathLike[str], dynamic: DynamicBrokerConfig, *,
                 initial_text: str | None = None) -> None:
        self.path = Path(path).absolute()
        self.dynamic = dynamic
        self._text: str | None = None
        self._props: dict[str, str] = {}
        self._wake = threading.Event()
        self._hup = False
        self._stopping = False
        self._observer: Observer | None = None  # type: ignore[valid-type]
        self._thread = threading.Thread(target=self._run, name="config-reloader", daemon=True)
        self.reloads = 0  # reloads that read a valid file (tests and logs)
        if initial_text is None:
            try:
                initial_text = read_properties_text(self.path)
            except ConfigError as e:
                log.warning("cannot read %s to watch it: %s", self.path, e)
        if initial_text is not None:
            # The text the running configuration came from: an edit made during start-up is caught by start().
            self._text = initial_text
            self._props = parse_properties(initial_text)

    def start(self) -> None:
        try:
            self.reload(forced=False)  # the file may have been edited while the daemon started
        except Exception:
            log.exception("reloading %s failed; the running configuration is unchanged", self.path)
        self._thread.start()
        handler = _Handler(self.path.name, self._file_event)
        observer = Observer()
        try:
            observer.schedule(handler, str(self.path.parent), recursive=False)
            observer.start()
        except OSError as e:
            # inotify watches are a per-user limit; SIGHUP still reloads.
            log.warning("not watching %s for edits (%s); reload with SIGHUP", self.path, e)
            return
        self._observer = observer
        log.info("watching %s for edits", self.path)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._observer is not None:
            stop_observer(self._observer)  # in the order that logs no spurious inotify ERROR
        if self._thread.is_alive():
            self._thread.join(10)

    def request_reload(self) -> None:
        """SIGHUP (from the daemon's signal loop): reload now, on the reloader's thread."""
        self._hup = True
        self._wake.set()

    def _file_event(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._stopping:
                return
            self._wake.clear()
            if not self._hup:
                first = time.monotonic()
                # Debounce: wait for quiet, a SIGHUP, or the maximum delay.
                while self._wake.wait(DEBOUNCE_S) and not self._stopping:
                    self._wake.clear()
                    if self._hup or time.monotonic() - first >= MAX_DELAY_S:
                        break
                if self._stopping:
                    return
            forced, self._hup = self._hup, False
            try:
                self.reload(forced=forced)
            except Exception:  # a reload must never take the daemon down
                log.exception("reloading %s failed; the running configuration is unchanged", self.path)

    def reload(self, *, forced: bool = True) -> bool:
        """Re-read the file and apply what changed. Returns False when it changed nothing (unchanged or invalid)."""
        why = "SIGHUP" if forced else "file changed"
        try:
            text = read_properties_text(self.path)
        except ConfigError as e:
            log.error("reload (%s): %s; keeping the running configuration", why, e)
            return False
        if text == self._text and not forced:
            return False
        props = parse_properties(text, source=str(self.path))
        try:
            config = BrokerConfig.from_properties(props)
        except ConfigError as e:
            log.error("reload (%s): %s is invalid: %s; keeping the running configuration", why, self.path, e)
            return False
        old = self._props
        self._text, self._props = text, props
        self.reloads += 1
        dynamic_changed: list[str] = []
        for key in sorted(set(old) | set(props)):
            before, after = old.get(key), props.get(key)
            if before is not None and after is not None and before.strip() == after.strip():
                continue
            if key in DYNAMIC_KEYS:
                dynamic_changed.append(key)
            elif key in KNOWN_KEYS:
                log.warning("reload (%s): %s changed from %s to %s; it is static: the running value stays until "
                            "moverd restarts", why, key, before if before is not None else UNSET,
                            after if after is not None else UNSET)
        self.dynamic.set_static(config)
        for key in dynamic_changed:
            before, after = old.get(key), props.get(key)
            effective = self.dynamic.effective(key)
            if effective.source in (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG):
                log.warning("reload (%s): %s changed from %s to %s in %s, but the value set at run time "
                            "(IncrementalAlterConfigs, %s) takes precedence: %s stays %s", why, key,
                            before if before is not None else UNSET, after if after is not None else UNSET,
                            self.path.name, ConfigSource(effective.source).name, ATTRIBUTE[key], effective.value)
            else:
                log.info("reload (%s): %s changed from %s to %s; applied", why, key,
                         before if before is not None else UNSET, after if after is not None else UNSET)
        log.info("reloaded %s (%s): %d dynamic change(s) applied", self.path, why, len(dynamic_changed))
        return True


class _Handler(FileSystemEventHandler):
    """Passes on events that touch the watched file's name (as source or as rename target)."""

    def __init__(self, name: str, changed: Callable[[], None]) -> None:
        self.name = name
        self.changed = changed

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _CHANGES:
            return
        paths = (event.src_path, getattr(event, "dest_path", "") or "")
        if any(os.path.basename(os.fsdecode(p)) == self.name for p in paths if p):
            self.changed()
