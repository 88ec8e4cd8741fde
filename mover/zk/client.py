"""ZkSession: moverd's one ZooKeeper session (kazoo), its state, and the worker thread every znode task runs on.

Rules this module enforces for the rest of mover/zk:
* Nothing on a client's request path waits on ZooKeeper longer than a short bound: work is posted to the worker
  (`post`, coalesced by key) and only `call` waits, up to its timeout, and only while the session is connected.
* kazoo's own threads only flip flags and post tasks: a kazoo callback that did I/O would stall every watch.
* After every (re)connection the owner's `on_connected` runs on the worker: a new session has lost the ephemeral
  znodes and the watches, and while disconnected any znode may have changed, so everything is re-registered and
  re-read. A lost session is not an error for the daemon: moves and clients carry on without ZooKeeper.
* A chroot in `zookeeper.connect` (`host:port/kafka`) is created when missing, as Kafka's brokers do.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, ZookeeperError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

log = logging.getLogger(__name__)

# Errors a znode task may hit when ZooKeeper goes away or a znode is not what we expect; the task is dropped and
# the next (re)connection re-reads everything.
ZK_ERRORS = (KazooException, ZookeeperError, KazooTimeoutError)

# Tasks that run whatever the owner's fence says: they are what takes the registration back.
ALWAYS_RUN = frozenset({"connected", "tick"})

# Reconnection: retry forever, at most 250 ms apart (a refused connect costs nothing), so moverd is back within
# a quarter of a second of ZooKeeper answering again.
_RECONNECT = dict(max_tries=-1, delay=0.05, backoff=2, max_delay=0.25, max_jitter=0.1, ignore_expire=True)


class ZkUnavailableError(Exception):
    """ZooKeeper could not be reached at start-up (the message names the connect string and the time waited)."""


def split_chroot(connect: str) -> tuple[str, str]:
    """("h1:2181,h2:2181", "/kafka") from "h1:2181,h2:2181/kafka"; the chroot is "" when there is none."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/") if chroot.strip("/") else ""


class ZkSession:
    def __init__(self, connect: str, *, session_timeout_ms: int, connection_timeout_ms: int) -> None:
        self.connect_string = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self.client: KazooClient | None = None
        self.on_connected: Callable[[], None] = lambda: None
        self.tick: Callable[[], None] = lambda: None
        # The owner's fence: tasks posted by watches and callers run only while it says this broker holds its
        # registration in the current session; the "connected" task and the tick always run (they re-register).
        self.may_act: Callable[[], bool] = lambda: True
        self.tick_interval_s = 0.25
        self._state = "not started"
        self._queue: queue.Queue[tuple[str | None, Callable[[], Any], Future[Any] | None]] = queue.Queue()
        self._pending: set[str] = set()
        self._pending_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zk-worker", daemon=True)

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Connect (creating the chroot if missing) within zookeeper.connection.timeout.ms; raises
        ZkUnavailableError. The worker thread is started separately (`start_worker`), once the owner is ready."""
        hosts, chroot = split_chroot(self.connect_string)
        timeout_s = self.connection_timeout_ms / 1000
        if chroot:
            # kazoo does not create a missing chroot; a session without one does, as Kafka's KafkaZkClient does.
            bare = KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000)
            try:
                bare.start(timeout=timeout_s)
                bare.ensure_path(chroot)
            except (KazooTimeoutError, *ZK_ERRORS) as e:
                raise ZkUnavailableError(
                    f"cannot reach ZooKeeper at {hosts} within {timeout_s:g}s: {e or type(e).__name__}") from None
            finally:
                bare.stop()
                bare.close()
        self.client = KazooClient(hosts=self.connect_string, timeout=self.session_timeout_ms / 1000,
                                  connection_retry=KazooRetry(**_RECONNECT))
        try:
            self.client.start(timeout=timeout_s)
        except KazooTimeoutError:
            self.client.stop()
            self.client.close()
            raise ZkUnavailableError(
                f"cannot reach ZooKeeper at {self.connect_string} within {timeout_s:g}s") from None
        # Listening from here on: this first connection is the owner's to handle (its start-up reads everything).
        self.client.add_listener(self._on_state)
        self._state = "connected"

    def start_worker(self) -> None:
        """The owner ran its first on_connected itself (start-up reads ZooKeeper before moverd says it is ready)."""
        self._thread.start()

    def _connected(self) -> None:
        # Looked up when it runs: the owner sets on_connected after the session is already up.
        self.on_connected()

    def stop(self) -> None:
        self._stopping.set()
        self._queue.put((None, lambda: None, None))
        if self._thread.is_alive():
            self._thread.join(10)
        if self.client is not None:
            try:
                self.client.stop()
                self.client.close()
            except ZK_ERRORS:
                pass
        self._state = "closed"

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> str:
        """"connected", "suspended" (connection lost, the session may still live), "expired" (the session is gone,
        reconnecting with a new one), "not started" or "closed". Read-only, cheap, safe from any thread."""
        return self._state

    @property
    def connected(self) -> bool:
        return self._state == "connected"

    @property
    def session_id(self) -> int | None:
        if self.client is None or not self.connected:
            return None
        return self.client.client_id[0] if self.client.client_id else None

    def _on_state(self, state: str) -> None:
        # On kazoo's thread: record and post, nothing else (kazoo forbids blocking calls here).
        if self._stopping.is_set():
            return
        if state == KazooState.CONNECTED:
            self._state = "connected"
            log.info("ZooKeeper connected (session 0x%x)", (self.client.client_id or (0,))[0] if self.client else 0)
            self.post("connected", self._connected)
        elif state == KazooState.SUSPENDED:
            self._state = "suspended"
            log.warning("ZooKeeper connection lost; moves and clients carry on, reconnecting")
        elif state == KazooState.LOST:
            self._state = "expired"
            log.warning("ZooKeeper session expired; will register again with a new session")

    # ------------------------------------------------------------------ the worker

    def post(self, key: str | None, task: Callable[[], Any]) -> None:
        """Run `task` on the worker. Tasks with the same key coalesce while one is waiting (a burst of watch
        events is one re-read)."""
        if key is not None:
            with self._pending_lock:
                if key in self._pending:
                    return
                self._pending.add(key)
        self._queue.put((key, task, None))

    def call(self, task: Callable[[], Any], timeout_s: float) -> Any:
        """Run `task` on the worker and wait for its result up to `timeout_s`; None when not connected, on
        timeout or on a ZooKeeper error (the caller then goes on without ZooKeeper)."""
        if not self.connected or self._stopping.is_set():
            return None
        fut: Future[Any] = Future()
        self._queue.put((None, task, fut))
        try:
            return fut.result(timeout_s)
        except Exception as e:  # noqa: BLE001 - any failure means "no answer from ZooKeeper"
            log.warning("ZooKeeper task did not complete: %s", e or type(e).__name__)
            return None

    def _run(self) -> None:
        next_tick = time.monotonic()
        while not self._stopping.is_set():
            try:
                key, task, fut = self._queue.get(timeout=max(0.0, next_tick - time.monotonic()))
            except queue.Empty:
                key, task, fut = "tick", self.tick, None
                next_tick = time.monotonic() + self.tick_interval_s
                if not self.connected:
                    continue
            if self._stopping.is_set():
                break
            if key is not None:
                with self._pending_lock:
                    self._pending.discard(key)
            if key not in ALWAYS_RUN and not self.may_act():
                # Dropped: the owner re-reads and re-publishes everything once it may act again.
                log.debug("ZooKeeper task %s skipped: not registered in this session", key or "call")
                if fut is not None:
                    fut.set_result(None)
                continue
            try:
                result = task()
                if fut is not None:
                    fut.set_result(result)
            except ZK_ERRORS as e:
                log.warning("ZooKeeper task %s failed: %s", key or getattr(task, "__name__", "?"),
                            e or type(e).__name__)
                if fut is not None:
                    fut.set_exception(e)
            except Exception as e:  # noqa: BLE001 - a bug in one task must not stop the worker (or the daemon)
                log.exception("ZooKeeper task %s crashed", key or getattr(task, "__name__", "?"))
                if fut is not None:
                    fut.set_exception(e)
            if time.monotonic() >= next_tick and self.connected:
                next_tick = time.monotonic() + self.tick_interval_s
                try:
                    self.tick()
                except ZK_ERRORS as e:
                    log.warning("ZooKeeper periodic task failed: %s", e or type(e).__name__)
                except Exception:  # noqa: BLE001
                    log.exception("ZooKeeper periodic task crashed")
