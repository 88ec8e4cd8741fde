"""Stopping a watchdog Observer (inotify) without its spurious ERROR.

watchdog 7.1's InotifyEmitter holds an unpaired IN_MOVED_FROM (a file renamed out of the watched dir, or a rename
whose other half has not arrived) for 0.5 s while it waits for the IN_MOVED_TO to pair it with, and returns it even
after the emitter was closed. `Observer.stop()` first drops the emitter's inotify group and then closes its queue,
so an emitter waiting on such an event wakes up to a stopped group and logs `ERROR watchdog.observers.inotify:
InotifyEmitter.queue_events() called when the thread is inactive`: at every stop that follows a rename in the watched
dir by less than half a second (moverd's dir beside its log or ready file).

The right order: tell each emitter to stop, close its queue (a waiting read returns, a held event is handed over
while the emitter can still take it), wait for the emitter's thread to end, and only then stop the observer, which
removes the watches. Reaching the queue uses watchdog's internals (pinned in pyproject.toml); where they are not
there, this is a plain `stop()`.
"""

from __future__ import annotations

from typing import Any

JOIN_TIMEOUT_S = 10.0


def stop_observer(observer: Any) -> None:
    """Stop and join a started watchdog Observer in the order that leaves no emitter reading a closed group."""
    emitters = list(getattr(observer, "emitters", ()))
    for emitter in emitters:
        emitter.stopped_event.set()
        group = getattr(emitter, "_inotify", None)
        queue = getattr(group, "_move_event_grouper", None)
        if queue is not None:
            queue.close()
    for emitter in emitters:
        if emitter.is_alive():
            emitter.join(JOIN_TIMEOUT_S)
    observer.stop()
    observer.join(JOIN_TIMEOUT_S)
