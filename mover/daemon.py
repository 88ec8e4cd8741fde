"""moverd: the per-broker daemon. Reads the configuration, recovers the log dirs, serves until SIGTERM.

Exit codes: 0 clean stop; 1 cannot start (a log dir is locked by another process, broker.id mismatch, the listener
port is taken); 2 invalid configuration or command line.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from mover.broker import BrokerServer
from mover.config import BrokerConfig, ConfigError, default_config
from mover.log_manager import LogManager
from mover.storage.errors import StorageError

log = logging.getLogger("moverd")


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
    if args.add_scram_user or args.delete_scram_user:
        return scram_users(config, args)
    return run(config, ready_file=args.ready_file)


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


def run(config: BrokerConfig, *, ready_file: str | None = None) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    manager = LogManager(config)
    try:
        manager.startup()
    except StorageError as e:
        print(f"moverd: {e}", file=sys.stderr)
        return 1
    # Start-up built objects that live as long as the daemon (10,000 partitions: about 210,000). Frozen, the
    # cyclic GC's full collections stop walking them: without this, one describe of every partition triggered
    # 80-100 ms pauses (bench/describe_log_dirs.py). Instagram's precedent for long-lived Python servers.
    gc.freeze()
    try:
        server = _start_server(config, manager)
    except OSError as e:
        print(f"moverd: cannot listen on {', '.join(map(str, config.listeners))}: {e.strerror or e}",
              file=sys.stderr)
        manager.shutdown()
        return 1
    except ConfigError as e:
        print(f"moverd: {e}", file=sys.stderr)
        manager.shutdown()
        return 2
    address = server.address
    if ready_file:
        # Every listener as NAME://host:port, beside the ready file (which keeps its one-line format), written
        # first so it is complete when the ready file appears.
        _write_atomically(f"{ready_file}.listeners",
                          "".join(f"{name}://{addr}\n" for name, addr in server.addresses.items()))
        _write_atomically(ready_file, f"{address}\n")
    _notify_systemd("READY=1")
    log.info("moverd ready (broker %d%s)", config.broker_id, f", listening on {address}")
    stop.wait()
    _notify_systemd("STOPPING=1")
    server.stop()
    manager.shutdown()
    return 0


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _start_server(config: BrokerConfig, manager: LogManager) -> BrokerServer:
    """The Kafka protocol listener (mover/broker.py). Raises OSError when the listener cannot be bound."""
    server = BrokerServer(config, manager)
    server.start()
    return server


if __name__ == "__main__":
    sys.exit(main())
