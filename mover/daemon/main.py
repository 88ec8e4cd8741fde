"""moverd: the per-broker daemon. Reads the configuration, recovers the log dirs, serves until SIGTERM.

Exit codes: 0 clean stop; 1 cannot start (a log dir is locked by another process, broker.id mismatch, the listener
or metrics port is taken); 2 invalid configuration or command line. SIGHUP re-reads the configuration file
(mover/config/reloader.py); under systemd it reports READY/STATUS/STOPPING and feeds the watchdog
(mover/daemon/systemd.py).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mover.config.broker import (
    BrokerConfig,
    ConfigError,
    Listener,
    default_config,
    parse_properties,
    read_properties_text,
)
from mover.config.reloader import ConfigReloader
from mover.daemon import systemd
from mover.daemon.broker_server import BrokerServer
from mover.log.log_loader import find_cluster_id, new_cluster_id
from mover.log.log_manager import LogManager
from mover.storage.errors import StorageError
from mover.storage.open_files import capacity_for_limit, open_files

if TYPE_CHECKING:
    from mover.metrics import MoverMetrics
    from mover.zk.coordinator import ZooKeeperCoordinator

log = logging.getLogger("moverd")

# Files a partition uses when all its active segment's files are open: .log, .index, .timeindex.
DESCRIPTORS_PER_PARTITION = 3
# Descriptors for everything else: client connections, dir locks, checkpoint writes, Fetch answers in flight.
DESCRIPTOR_HEADROOM = 1024
# The limit we take when the hard limit is unlimited (setrlimit cannot exceed fs.nr_open anyway).
UNLIMITED_NOFILE_TARGET = 1 << 20

# Without a systemd watchdog, how long the event loop may take to answer the health probe of the STATUS thread.
LOOP_PROBE_TIMEOUT_S = 5.0

# SIGTERM and SIGINT stop the daemon; SIGHUP re-reads the configuration file.
DAEMON_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog="moverd", description="Move Kafka replicas between the log dirs of a broker (KIP-113).")
    p.add_argument("--config", metavar="server.properties",
                   help="broker configuration; without it, the embedded default: two log dirs under ./var")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--ready-file", metavar="PATH", help="write the bound listener address here once ready")
    users = p.add_argument_group("SCRAM users (then exit; a running moverd picks the change up within a second)")
    users.add_argument("--add-scram-user", metavar="NAME",
                       help="store SCRAM credentials for NAME; the password is read from the first line of stdin")
    users.add_argument("--delete-scram-user", metavar="NAME", help="remove NAME's credentials for --mechanism")
    users.add_argument("--mechanism", default="SCRAM-SHA-512", choices=["SCRAM-SHA-256", "SCRAM-SHA-512"])
    users.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations, 4096-16384 (default 4096)")
    return p.parse_args(argv)


def load_config(path: str | None) -> BrokerConfig:
    if path is None:
        return default_config(Path.cwd().resolve())
    return BrokerConfig.from_file(path)


def read_config(path: str | None) -> tuple[BrokerConfig, str | None]:
    """The configuration and the file's text it came from (None for the embedded default), which the reloader
    compares later edits with. Raises ConfigError."""
    if path is None:
        return load_config(None), None
    text = read_properties_text(path)
    return BrokerConfig.from_properties(parse_properties(text, source=path)), text


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except _UsageError as e:
        print(f"moverd: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        config, text = read_config(args.config)
    except ConfigError as e:
        print(f"moverd: {e}", file=sys.stderr)
        return 2
    if args.add_scram_user or args.delete_scram_user:
        return scram_users(config, args)
    return run(config, ready_file=args.ready_file, config_path=args.config, config_text=text)


def scram_users(config: BrokerConfig, args: argparse.Namespace) -> int:
    """--add-scram-user / --delete-scram-user: change the credential store moverd reads (ZooKeeper or log dirs)."""
    from mover.security.broker_security import credential_store
    from mover.security.credentials import ScramCredential

    try:
        store, close = credential_store(config)
    except ConfigError as e:
        print(f"moverd: {e}", file=sys.stderr)
        return 2
    try:
        if args.delete_scram_user:
            if not store.delete(args.delete_scram_user, args.mechanism):
                print(f"moverd: no {args.mechanism} credentials for {args.delete_scram_user}", file=sys.stderr)
                return 1
            print(f"deleted {args.mechanism} credentials of {args.delete_scram_user}")
            return 0
        password = sys.stdin.readline().rstrip("\n")
        if not password:
            print("moverd: --add-scram-user reads the password from stdin; got an empty line", file=sys.stderr)
            return 2
        try:
            credential = ScramCredential.create(args.mechanism, password, args.iterations)
        except ValueError as e:
            print(f"moverd: {e}", file=sys.stderr)
            return 2
        store.upsert(args.add_scram_user, args.mechanism, credential)
        print(f"stored {args.mechanism} credentials of {args.add_scram_user} ({credential.iterations} iterations)")
        return 0
    finally:
        close()


def run(config: BrokerConfig, *, ready_file: str | None = None, config_path: str | None = None,
        config_text: str | None = None) -> int:
    # The daemon's signals are blocked in every thread (threads inherit the mask of the thread that starts them,
    # and none has started yet) and taken by the main thread with sigwait once the daemon is up. With handlers
    # instead, the kernel may deliver a signal to any thread; Python then runs the handler only when the main
    # thread next wakes, which a main thread blocked on an Event may never do: a SIGHUP was seen lost that way.
    # A signal that arrives during start-up waits until start-up is done (a SIGTERM then stops at once).
    signal.pthread_sigmask(signal.SIG_BLOCK, DAEMON_SIGNALS)
    # Whatever has started is torn down, in reverse, on every way out: a refusal half-way through start-up, an
    # unexpected exception, or the normal stop.
    with contextlib.ExitStack() as started:
        return _run(started, config, ready_file=ready_file, config_path=config_path, config_text=config_text)


def _run(started: contextlib.ExitStack, config: BrokerConfig, *, ready_file: str | None, config_path: str | None,
         config_text: str | None) -> int:
    nofile = raise_descriptor_limit()
    open_files().set_capacity(capacity_for_limit(nofile))
    zk = None
    if config.zookeeper_connect:
        zk = _connect_zookeeper(config)
        if zk is None:
            return 1
        stop_zk = _once(zk.stop)
        started.callback(stop_zk)
    manager = LogManager(config)
    metrics: MoverMetrics | None = None
    if config.metrics_listener is not None:
        # Imported only when metrics are served: prometheus_client's import was a third of a start's CPU (0.2 s of
        # 0.6 here), paid by every moverd with no metrics.listener.
        from mover.metrics import BrokerCollector, MoverMetrics

        metrics = MoverMetrics()
        manager.add_move_observer(metrics)  # before start-up: resumed moves count too
        metrics.registry.register(BrokerCollector(manager, metrics, lambda: zookeeper_state(zk)))
    try:
        manager.startup()
    except StorageError as e:
        print(f"moverd: {e}", file=sys.stderr)
        return 1
    started.callback(manager.shutdown)
    if zk is not None:
        # ZooKeeper stops before the manager shuts down: no reassignment starts and no status is written while the
        # moves stop.
        started.callback(stop_zk)
    warn_if_descriptors_short(nofile, len(manager.replicas))
    # Start-up built objects that live as long as the daemon (10,000 partitions: about 210,000). Frozen, the
    # cyclic GC's full collections stop walking them: without this, one describe of every partition triggered
    # 80-100 ms pauses (bench/describe_log_dirs.py). Instagram's precedent for long-lived Python servers. Start-up
    # built them with the GC paused and left them unwalked (log_loader.cyclic_gc_paused): frozen, they never are.
    # Nothing is frozen later: clients connect from now on, and a connection frozen while open would, once closed,
    # stay for good (its objects form a cycle). A create of many partitions collects once instead (cyclic_gc_paused).
    gc.freeze()
    try:
        server = _start_server(config, manager, metrics)
    except OSError as e:
        print(f"moverd: cannot listen on {', '.join(map(str, config.listeners))}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    except ConfigError as e:
        print(f"moverd: {e}", file=sys.stderr)
        return 2
    started.callback(server.stop)
    if metrics is not None and config.metrics_listener is not None:
        from mover.metrics import MetricsExporter

        host, port = config.metrics_listener
        exporter = MetricsExporter(metrics.registry, host, port)
        try:
            exporter.start()
        except OSError as e:
            print(f"moverd: cannot serve metrics on {host}:{port}: {e.strerror or e}", file=sys.stderr)
            return 1
        started.callback(exporter.stop)
    # Registered once clients can connect to the address it advertises, as Kafka's brokers do.
    if zk is not None and not _start_zookeeper(zk, manager, server.advertised_listeners()):
        return 1
    reloader: ConfigReloader | None = None
    if config_path is not None:
        reloader = ConfigReloader(config_path, manager.dynamic_config, initial_text=config_text)
        reloader.start()
        started.callback(reloader.stop)
    interval = systemd.watchdog_interval()
    watchdog = systemd.Watchdog(
        [systemd.LoopProbe(server.call_soon, timeout=interval / 2 if interval else LOOP_PROBE_TIMEOUT_S),
         lambda: None if manager.housekeeping_alive() else "the log manager's housekeeping thread has died"],
        lambda: broker_status(manager, zk), interval)
    address = server.address
    if ready_file:
        # Every listener as NAME://host:port, beside the ready file (which keeps its one-line format), written
        # first so it is complete when the ready file appears.
        _write_atomically(f"{ready_file}.listeners",
                          "".join(f"{name}://{addr}\n" for name, addr in server.addresses.items()))
        _write_atomically(ready_file, f"{address}\n")
    systemd.notify(f"READY=1\nSTATUS={broker_status(manager, zk).line()}")
    watchdog.start()
    started.callback(watchdog.stop)
    log.info("moverd ready (broker %d%s)", config.broker_id, f", listening on {address}")
    while True:
        signum = signal.sigwait(DAEMON_SIGNALS)
        if signum != signal.SIGHUP:
            log.info("received %s, stopping", signal.Signals(signum).name)
            break
        # SIGHUP's default action would end the daemon: `systemctl reload` must never do that.
        if reloader is None:
            log.info("received SIGHUP; running on the embedded default configuration, nothing to reload")
        else:
            log.info("received SIGHUP, reloading %s", config_path)
            reloader.request_reload()
    systemd.notify("STOPPING=1")
    return 0


def _once(stop: Callable[[], None]) -> Callable[[], None]:
    """`stop`, run at most once however many times the returned callable is called."""
    done = False

    def once() -> None:
        nonlocal done
        if not done:
            done = True
            stop()
    return once


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def raise_descriptor_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (what Kafka's packaging asks systemd for); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return UNLIMITED_NOFILE_TARGET
    target = hard if hard != resource.RLIM_INFINITY else max(soft, UNLIMITED_NOFILE_TARGET)
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("raised the open file limit from %d to %d (the hard limit)", soft, target)
            soft = target
        except (OSError, ValueError) as e:
            log.warning("could not raise the open file limit from %d to %d: %s", soft, target, e)
    return soft


def warn_if_descriptors_short(nofile: int, partitions: int) -> None:
    """Warn when the limit is below what every partition's active segment open at once would take (its .log,
    .index and .timeindex) plus room for clients. moverd still runs: idle files are closed and reopened on demand
    (mover/storage/open_files.py), at the cost of an open(2) per request to a partition that was idle."""
    wanted = partitions * DESCRIPTORS_PER_PARTITION + DESCRIPTOR_HEADROOM
    if nofile < wanted:
        log.warning("open file limit %d is below the %d that %d partitions would use with all files open: at most "
                    "%d segment and index files stay open, the rest are reopened on demand; raise LimitNOFILE "
                    "(systemd) or `ulimit -n` to avoid the reopening", nofile, wanted, partitions,
                    open_files().capacity)


def _connect_zookeeper(config: BrokerConfig) -> ZooKeeperCoordinator | None:
    """Connect and agree on the cluster id before the log dirs are opened (meta.properties records it)."""
    # Imported here: a stand-alone moverd (no zookeeper.connect) loads no ZooKeeper code, kazoo included.
    from mover.zk.coordinator import ZooKeeperCoordinator, ZooKeeperStartError

    zk = ZooKeeperCoordinator(config)
    try:
        zk.connect()
        local = find_cluster_id(config.log_dirs)
        if config.cluster_id and local and config.cluster_id != local:
            local = config.cluster_id  # LogDir.open reports the mismatch with meta.properties
        config.cluster_id = zk.cluster_id(local or config.cluster_id, new_cluster_id())
    except ZooKeeperStartError as e:
        print(f"moverd: {e}", file=sys.stderr)
        zk.stop()
        return None
    return zk


def _start_zookeeper(zk: ZooKeeperCoordinator, manager: LogManager, listeners: list[Listener]) -> bool:
    from mover.zk.coordinator import ZooKeeperStartError  # only with zookeeper.connect (see _connect_zookeeper)

    try:
        zk.start(manager, listeners)
    except ZooKeeperStartError as e:
        print(f"moverd: {e}", file=sys.stderr)
        return False
    return True


def zookeeper_state(zk: ZooKeeperCoordinator | None) -> str:
    """The ZooKeeper session state for the metrics page, in the metrics' words (mover/metrics/collector.py)."""
    if zk is None:
        return "standalone"
    return {"connected": "connected", "suspended": "suspended", "fenced": "fenced"}.get(zk.session_state(), "lost")


def broker_status(manager: LogManager, zk: ZooKeeperCoordinator | None) -> systemd.Status:
    running, queued = manager.move_counts()
    return systemd.Status(
        moves_running=running,
        moves_queued=queued,
        dirs_offline=sum(not s.online for s in list(manager.dirs.values())),
        dirs=len(manager.dirs),
        partitions=len(manager.replicas),
        zookeeper=None if zk is None else zookeeper_state(zk),
    )


def _start_server(config: BrokerConfig, manager: LogManager, metrics: MoverMetrics | None) -> BrokerServer:
    """The Kafka protocol listener (mover/daemon/broker_server.py). Raises OSError when the listener cannot be bound."""
    server = BrokerServer(config, manager, request_observer=metrics.observe_request if metrics else None)
    server.start()
    return server

