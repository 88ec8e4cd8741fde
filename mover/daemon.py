"""moverd: the per-broker daemon. Reads the configuration, recovers the log dirs, serves until SIGTERM.

Exit codes: 0 clean stop; 1 cannot start (a log dir is locked by another process, broker.id mismatch, the listener
port is taken); 2 invalid configuration or command line.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import resource
import signal
import socket
import sys
import threading
from pathlib import Path

from mover.broker import BrokerServer
from mover.config import BrokerConfig, ConfigError, default_config
from mover.log_manager import LogManager
from mover.storage.errors import StorageError
from mover.storage.open_files import capacity_for_limit, open_files

log = logging.getLogger("moverd")

# Files a partition uses when all its active segment's files are open: .log, .index, .timeindex.
DESCRIPTORS_PER_PARTITION = 3
# Descriptors for everything else: client connections, dir locks, checkpoint writes, Fetch answers in flight.
DESCRIPTOR_HEADROOM = 1024
# The limit we take when the hard limit is unlimited (setrlimit cannot exceed fs.nr_open anyway).
UNLIMITED_NOFILE_TARGET = 1 << 20


def _notify_systemd(message: str) -> None:
    """sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET (Type=notify in the unit file)."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(message.encode())
    except OSError as e:
        log.warning("could not notify systemd: %s", e)


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
    return p.parse_args(argv)


def load_config(path: str | None) -> BrokerConfig:
    if path is None:
        return default_config(Path.cwd().resolve())
    return BrokerConfig.from_file(path, base_dir=Path.cwd().resolve())


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except _UsageError as e:
        print(f"moverd: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"moverd: {e}", file=sys.stderr)
        return 2
    return run(config, ready_file=args.ready_file)


def run(config: BrokerConfig, *, ready_file: str | None = None) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    nofile = raise_descriptor_limit()
    open_files().set_capacity(capacity_for_limit(nofile))
    manager = LogManager(config)
    try:
        manager.startup()
    except StorageError as e:
        print(f"moverd: {e}", file=sys.stderr)
        return 1
    warn_if_descriptors_short(nofile, len(manager.replicas))
    # Start-up built objects that live as long as the daemon (10,000 partitions: about 210,000). Frozen, the
    # cyclic GC's full collections stop walking them: without this, one describe of every partition triggered
    # 80-100 ms pauses (bench/describe_log_dirs.py). Instagram's precedent for long-lived Python servers.
    gc.freeze()
    try:
        server = _start_server(config, manager)
    except OSError as e:
        print(f"moverd: cannot listen on {config.listeners[0]}: {e.strerror or e}", file=sys.stderr)
        manager.shutdown()
        return 1
    address = server.address
    if ready_file:
        tmp = f"{ready_file}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{address}\n")
        os.replace(tmp, ready_file)
    _notify_systemd("READY=1")
    log.info("moverd ready (broker %d%s)", config.broker_id, f", listening on {address}")
    stop.wait()
    _notify_systemd("STOPPING=1")
    server.stop()
    manager.shutdown()
    return 0


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


def _start_server(config: BrokerConfig, manager: LogManager) -> BrokerServer:
    """The Kafka protocol listener (mover/broker.py). Raises OSError when the listener cannot be bound."""
    server = BrokerServer(config, manager)
    server.start()
    return server


if __name__ == "__main__":
    sys.exit(main())
