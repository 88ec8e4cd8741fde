"""mover-log-dirs: kafka-log-dirs.sh and the log-dir half of kafka-reassign-partitions.sh, for moverd (and for a
real Kafka broker, minus what only moverd offers). Options, outputs and exit codes: docs/cli.md.

    mover-log-dirs --bootstrap-server H:P --describe [--broker-list 1,2] [--topic-list a,b] [--output table]
    mover-log-dirs --bootstrap-server H:P --move --broker B --assignment FILE
    mover-log-dirs --bootstrap-server H:P --execute|--verify|--cancel --reassignment-json-file FILE
    mover-log-dirs --bootstrap-server H:P --progress [--request N] [--watch]
    mover-log-dirs --bootstrap-server H:P --throttle BYTES_PER_SECOND | --remove-throttle [--broker-list 1,2]
    mover-log-dirs --bootstrap-server H:P --cordon DIRS | --uncordon DIRS --broker-list 1,2

Every action takes `--command-config FILE`: Kafka's client security keys (TLS, SASL), docs/security.md, "Clients".
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from mover.admin import assignment, cordon, throttle, zookeeper
from mover.admin.client import DEFAULT_TIMEOUT_S, Client, ClientError
from mover.admin.common import TopicPartitionReplica
from mover.admin.limits import RunLimits
from mover.admin.reassign.log_dir_moves import partition_assignment
from mover.cli import describe, progress, reassign_brokers, reassign_log_dirs
from mover.cli.arguments import Parser, broker_ids, name_list, non_negative_int, rate, rate_or_minus_one, seconds_up_to
from mover.cli.common import CliError, load_command_config, run_command

PROG = "mover-log-dirs"
# Kafka's --timeout for --execute: milliseconds, 10 s by default (KIP-113 Scripts 3).
DEFAULT_EXECUTE_TIMEOUT_MS = 10000
# Set to get a traceback for an unexpected failure (a bug), instead of the one-line message.

ACTIONS = ("describe", "move", "execute", "verify", "progress", "cancel", "throttle", "remove_throttle", "cordon",
           "uncordon")
# Which options each action accepts, beyond --bootstrap-server (Kafka's CommandLineUtils.checkInvalidArgs).
ALLOWED = {
    "broker_list": {"describe", "progress", "throttle", "remove_throttle", "cordon", "uncordon"},
    "topic_list": {"describe"},
    "output": {"describe"},
    "broker": {"move"},
    "assignment": {"move"},
    "reassignment_json_file": {"execute", "verify", "cancel"},
    "timeout": {"execute", "move"},
    "request": {"progress"},
    "watch": {"progress"},
    "interval": {"progress"},
    "replica_alter_log_dirs_throttle": {"execute"},
    "preserve_throttles": {"verify"},
}
REQUIRED = {
    "move": ("broker", "assignment"),
    "execute": ("reassignment_json_file",),
    "verify": ("reassignment_json_file",),
    "cancel": ("reassignment_json_file",),
    # A cordon names one broker's paths: never "every broker" by default.
    "cordon": ("broker_list",),
    "uncordon": ("broker_list",),
}


def _dir_list(text: str) -> list[str]:
    dirs = [x.strip() for x in text.split(",") if x.strip()]
    if not dirs or any(d != "*" and not d.startswith("/") for d in dirs):
        raise argparse.ArgumentTypeError(f"expected comma-separated absolute log dirs, or *, got {text!r}")
    if "*" in dirs and len(dirs) > 1:
        raise argparse.ArgumentTypeError("* means every log dir; it cannot be combined with paths")
    return list(dict.fromkeys(dirs))


def build_parser() -> Parser:
    p = Parser(prog=PROG, description="Describe, move and watch Kafka partition replicas across the log "
               "directories of their brokers (KIP-113), against moverd or Kafka brokers.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]",
                   help="the broker(s) to connect to first (required)")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                   help="deprecated (KIP-179): find the brokers in ZooKeeper; --execute/--move write the "
                        "reassignment znode. Use --bootstrap-server")
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties for secured brokers: security.protocol, sasl.mechanism, "
                        "sasl.jaas.config, ssl.truststore.location, ssl.keystore.* (docs/security.md)")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--describe", action="store_true", help="list the log dirs and replicas of brokers")
    act.add_argument("--move", action="store_true", help="move replicas of --broker as --assignment says")
    act.add_argument("--execute", action="store_true", help="start the log-dir moves of a reassignment file")
    act.add_argument("--verify", action="store_true", help="report whether a reassignment file's moves are done")
    act.add_argument("--progress", action="store_true", help="bytes copied per replica of a move request")
    act.add_argument("--cancel", action="store_true", help="cancel the running moves of a reassignment file")
    act.add_argument("--throttle", type=rate_or_minus_one, metavar="BYTES_PER_SECOND",
                     help="limit log-dir moves on the brokers (-1: remove the limit)")
    act.add_argument("--remove-throttle", action="store_true", help="remove the log-dir move limit")
    act.add_argument("--cordon", type=_dir_list, metavar="DIR,DIR|*",
                     help="cordon log dirs of --broker-list (KIP-1066): no new partition or move lands there")
    act.add_argument("--uncordon", type=_dir_list, metavar="DIR,DIR|*", help="lift the cordon of log dirs")
    p.add_argument("--broker-list", type=broker_ids, metavar="1,2", help="the brokers to ask (default: all)")
    p.add_argument("--topic-list", type=name_list, metavar="a,b", help="--describe only these topics")
    p.add_argument("--output", choices=("json", "table"), help="--describe output format (default json)")
    p.add_argument("--broker", type=non_negative_int, metavar="ID", help="--move: the broker whose replicas move")
    p.add_argument("--assignment", metavar="FILE",
                   help='--move: {"version":1,"partitions":[{"topic":..,"partition":..,"log_dir":..}]}')
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help="the reassignment JSON (replicas and log_dirs per partition)")
    p.add_argument("--timeout", type=non_negative_int, metavar="MS",
                   help=f"--execute/--move: how long to keep retrying replicas that do not exist yet, in ms "
                        f"(default {DEFAULT_EXECUTE_TIMEOUT_MS})")
    p.add_argument("--replica-alter-log-dirs-throttle", type=rate, metavar="BYTES_PER_SECOND",
                   help="--execute: also limit the moves to this rate; --verify removes it once all are done")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="--verify: keep the move throttle even when every move is done")
    p.add_argument("--request", type=non_negative_int, metavar="N",
                   help="--progress: the request id --execute printed (default: the latest)")
    p.add_argument("--watch", action="store_true", help="--progress: live progress bars until all moves end")
    p.add_argument("--interval", type=seconds_up_to(3600), metavar="SECONDS",
                   help=f"--progress --watch: seconds between polls (default {progress.DEFAULT_INTERVAL_S:g})")
    return p


def _validate(parser: Parser, args: argparse.Namespace) -> str:
    if args.zookeeper is not None and args.bootstrap_server is not None:
        parser.error("--zookeeper and --bootstrap-server cannot be used together")
    chosen = [a for a in ACTIONS if getattr(args, a) not in (None, False)]
    if not chosen:
        parser.error("one of --describe, --move, --execute, --verify, --progress, --cancel, --throttle, "
                     "--remove-throttle, --cordon, --uncordon is required")
    action = chosen[0]
    if args.zookeeper is not None:
        if action == "progress":
            parser.error("--progress needs --bootstrap-server; it cannot be used with --zookeeper (KIP-179)")
        print(zookeeper.DEPRECATION, file=sys.stderr)
    elif args.bootstrap_server is None:
        parser.error("--bootstrap-server is required")
    for option, actions in ALLOWED.items():
        if getattr(args, option) not in (None, False) and action not in actions:
            parser.error(f"--{option.replace('_', '-')} cannot be used with --{action.replace('_', '-')}")
    for option in REQUIRED.get(action, ()):
        if getattr(args, option) is None:
            parser.error(f"--{action} needs --{option.replace('_', '-')}")
    if action == "throttle" and args.throttle == -1:
        action = "remove_throttle"
    return action


def run(args: argparse.Namespace, action: str, out: TextIO) -> int:
    # Files first: a malformed file is reported without touching any broker.
    targets = None
    if args.reassignment_json_file is not None:
        targets = assignment.load_reassignment(args.reassignment_json_file)
    moves = assignment.load_move(args.assignment, args.broker) if action == "move" else None
    timeout_s = (args.timeout if args.timeout is not None else DEFAULT_EXECUTE_TIMEOUT_MS) / 1000
    security = load_command_config(args.command_config, PROG) if args.command_config is not None else None
    if args.zookeeper is not None:
        with zookeeper.AdminZkClient(args.zookeeper) as zk, zk.client(security) as client:
            return _run_with(client, args, action, out, targets, moves, timeout_s, zk)
    if action == "progress" and args.watch:
        # The watch bootstraps inside its retry (progress.watch): a broker restarting as the watch starts is waited
        # for like one restarting later, where every other action reports the failure at once.
        interval = args.interval if args.interval is not None else progress.DEFAULT_INTERVAL_S
        return progress.watch(lambda: Client(args.bootstrap_server, timeout=DEFAULT_TIMEOUT_S, security=security),
                              args.broker_list, args.request, interval, out)
    with Client(args.bootstrap_server, timeout=DEFAULT_TIMEOUT_S, security=security) as client:
        return _run_with(client, args, action, out, targets, moves, timeout_s, None)


def _run_with(client: Client, args: argparse.Namespace, action: str, out: TextIO,
              targets: list[assignment.PartitionTarget] | None, moves: dict[TopicPartitionReplica, str] | None,
              timeout_s: float,
              zk: zookeeper.AdminZkClient | None) -> int:
    if action == "describe":
        return describe.describe(client, args.broker_list, args.topic_list, args.output or "json", out)
    if action == "move":
        assert moves is not None
        return reassign_log_dirs.move(client, args.broker, moves, timeout_s, out, zk=zk)
    if action in ("execute", "verify", "cancel"):
        assert targets is not None
        if action == "execute":
            if zk is None and _between_brokers(client, targets):
                # The library's run, printed as mover-reassign --execute prints it: replicas that change brokers go
                # in KIP-435 steps, under the default limits.
                with reassign_brokers.request_store(client, out) as store:
                    return reassign_brokers.execute(client, targets, out, limits=RunLimits(), store=store,
                                                    log_dir_timeout_s=timeout_s)
            return reassign_log_dirs.execute(client, targets, timeout_s, out, args.replica_alter_log_dirs_throttle,
                                    zk=zk)
        if action == "verify":
            return reassign_log_dirs.verify(client, targets, out, preserve_throttles=args.preserve_throttles, zk=zk)
        return reassign_log_dirs.cancel(client, targets, out)
    brokers = describe.select_brokers(client, args.broker_list)
    if action == "progress":
        assert not args.watch  # run() hands --watch to progress.watch, which connects by itself
        return progress.progress(client, brokers, args.request, out)
    if action in ("cordon", "uncordon"):
        return cordon_command(client, brokers, args.cordon or args.uncordon, action == "cordon", out)
    return throttle.throttle_command(client, brokers, None if action == "remove_throttle" else args.throttle,
                                     out)


def cordon_command(client: Client, brokers: list[int], dirs: list[str], on: bool, out: TextIO) -> int:
    """--cordon / --uncordon: every broker is checked before any is changed, so a fleet is never half-cordoned
    because one broker is too old."""
    for broker in brokers:
        cordon.require_cordons(client, broker)
    for broker in brokers:
        after = cordon.set_cordon(client, broker, dirs, on)
        now = ",".join(cordon.cordoned(after)) or "none"
        print(f"{'Cordoned' if on else 'Uncordoned'} {','.join(dirs)} on broker {broker}; its cordoned log dirs: "
              f"{now}", file=out)
    return 0


def _between_brokers(client: Client, targets: list[assignment.PartitionTarget]) -> bool:
    if {b for t in targets for b in t.replicas} - client.brokers.keys():
        return False  # refused by the log-dir path with Kafka 2.3's wording
    current = partition_assignment(client, sorted({t.topic for t in targets}))
    return any((t.topic, t.partition) in current and list(current[(t.topic, t.partition)]) != list(t.replicas)
               for t in targets)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    action = _validate(parser, args)
    return run_command(PROG, lambda: run(args, action, sys.stdout), user_errors=(CliError, ClientError))

if __name__ == "__main__":
    sys.exit(main())
