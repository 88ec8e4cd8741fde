"""`mover-reassign`: kafka-reassign-partitions.sh of the product, moving replicas between brokers in KIP-435 steps
(mover/admin/reassign/step_engine.py) and between log dirs (the same file's `log_dirs`), with KIP-179 progress. Options,
outputs and exit codes: docs/cli.md, "mover-reassign".

    mover-reassign --bootstrap-server H:P --generate --topics-to-move-json-file F --broker-list 1,2,3
                   [--disable-rack-aware]
    mover-reassign --bootstrap-server H:P --execute --reassignment-json-file F [--throttle B/S]
                   [--max-partition-movements 5] [--max-replica-movements 1] [--max-leader-movements 2]
                   [--limits FILE] [--stall-seconds 120]
    mover-reassign --bootstrap-server H:P --verify|--cancel --reassignment-json-file F [--preserve-throttles]
    mover-reassign --bootstrap-server H:P --progress [--request N] [--watch]
    mover-reassign --bootstrap-server H:P --list
    mover-reassign --zookeeper H:P[/chroot] --execute|--verify ...   (deprecated, KIP-179: Kafka before 2.4)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from mover.admin import assignment, zookeeper
from mover.admin.client import DEFAULT_TIMEOUT_S, Client, ClientError
from mover.admin.limits import RunLimits, read_limits
from mover.admin.reassign.progress import IN_SYNC, replica_statuses, table
from mover.admin.reassign.request_progress import running_request
from mover.admin.reassign.request_store import ClusterRequestStore
from mover.admin.reassign.run import request_partitions, restore_throttles
from mover.admin.reassign.status_store import LOG_DIRS_STARTED
from mover.admin.reassign.step_engine import DEFAULT_POLL_S, DEFAULT_STALL_S
from mover.admin.reassign.steps import (
    DEFAULT_MAX_LEADER_MOVEMENTS,
    DEFAULT_MAX_PARTITION_MOVEMENTS,
    DEFAULT_MAX_REPLICA_MOVEMENTS,
    Limits,
)
from mover.admin.reassign.zookeeper_view import ZkConfigs, ZkReassignments
from mover.cli import reassign_brokers, reassign_log_dirs
from mover.cli.arguments import Parser, broker_ids, non_negative_int, positive_int, rate, seconds_up_to
from mover.cli.common import EXIT_IN_PROGRESS, EXIT_OK, CliError, load_command_config, run_command

PROG = "mover-reassign"
ACTIONS = ("generate", "execute", "verify", "progress", "cancel", "list")
ALLOWED = {
    "topics_to_move_json_file": {"generate"},
    "broker_list": {"generate"},
    "disable_rack_aware": {"generate"},
    "reassignment_json_file": {"execute", "verify", "cancel", "progress"},
    "throttle": {"execute"},
    "replica_alter_log_dirs_throttle": {"execute"},
    "max_partition_movements": {"execute"},
    "max_replica_movements": {"execute"},
    "max_leader_movements": {"execute"},
    "limits": {"execute"},
    "stall_seconds": {"execute"},
    "poll_interval": {"execute", "progress"},
    "timeout": {"execute"},
    "dry_run": {"execute"},
    "preserve_throttles": {"verify", "cancel"},
    "request": {"progress"},
    "watch": {"progress"},
}
REQUIRED = {
    "generate": ("topics_to_move_json_file", "broker_list"),
    "execute": ("reassignment_json_file",),
    "verify": ("reassignment_json_file",),
    "cancel": ("reassignment_json_file",),
}
ZK_ACTIONS = {"execute", "verify", "list"}
ZK_DEPRECATION = ("Warning: --zookeeper is deprecated and will be removed in a future version of mover-reassign; "
                  "use --bootstrap-server (KIP-179). Through ZooKeeper the steps run one batch at a time and "
                  "cannot be cancelled.")







def build_parser() -> Parser:
    p = Parser(prog=PROG, description="Reassign Kafka partitions between brokers in KIP-435 steps (and between "
               "log dirs), with KIP-179 progress: kafka-reassign-partitions.sh for calm clusters.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]", help="the brokers to connect to")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                   help="deprecated (KIP-179): for brokers before Kafka 2.4; --execute writes each step's batch to "
                        "/admin/reassign_partitions")
    p.add_argument("--command-config", metavar="FILE", help="Kafka client properties for secured brokers")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--generate", action="store_true", help="propose an assignment of topics onto brokers")
    act.add_argument("--execute", action="store_true", help="carry out a reassignment file in steps")
    act.add_argument("--verify", action="store_true", help="whether a reassignment file is done; clears throttles")
    act.add_argument("--progress", action="store_true", help="KIP-179 progress of a request")
    act.add_argument("--cancel", action="store_true", help="cancel the running steps of a reassignment file")
    act.add_argument("--list", action="store_true", help="the reassignments running in the cluster")
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='--generate: {"topics":[{"topic":"t"}]}')
    p.add_argument("--broker-list", type=broker_ids, metavar="1,2", help="--generate: the brokers to place onto")
    p.add_argument("--disable-rack-aware", action="store_true",
                   help="--generate: place replicas without the brokers' racks")
    p.add_argument("--reassignment-json-file", metavar="FILE", help="Kafka's reassignment JSON")
    p.add_argument("--throttle", type=rate, metavar="BYTES_PER_SECOND",
                   help="--execute: replication throttle on the brokers of each running step")
    p.add_argument("--replica-alter-log-dirs-throttle", type=rate, metavar="BYTES_PER_SECOND",
                   help="--execute: log-dir move throttle for the file's log_dirs")
    p.add_argument("--max-partition-movements", type=positive_int, metavar="N",
                   help=f"--execute: partitions with a step running at once (default "
                        f"{DEFAULT_MAX_PARTITION_MOVEMENTS})")
    p.add_argument("--max-replica-movements", type=positive_int, metavar="N",
                   help=f"--execute: replicas added per partition per step (default {DEFAULT_MAX_REPLICA_MOVEMENTS})")
    p.add_argument("--max-leader-movements", type=positive_int, metavar="N",
                   help=f"--execute: steps moving a preferred leader at once (default {DEFAULT_MAX_LEADER_MOVEMENTS})")
    p.add_argument("--limits", type=Path, metavar="FILE",
                   help="--execute: JSON or TOML with max_partition_movements, max_replica_movements, "
                        "max_leader_movements, throttle; re-read when it changes, applied at the next step")
    p.add_argument("--stall-seconds", type=seconds_up_to(86400), metavar="S",
                   help=f"--execute: report a new replica that has not grown for this long (default "
                        f"{DEFAULT_STALL_S:g})")
    p.add_argument("--poll-interval", type=seconds_up_to(86400), metavar="S",
                   help=f"seconds between looks at the cluster (default {DEFAULT_POLL_S:g})")
    p.add_argument("--timeout", type=non_negative_int, metavar="MS",
                   help="--execute: how long log-dir moves wait for their replica to exist (default 10000)")
    p.add_argument("--preserve-throttles", action="store_true", help="--verify/--cancel: keep the throttles")
    p.add_argument("--request", type=non_negative_int, metavar="N", help="--progress: the request id (default latest)")
    p.add_argument("--watch", action="store_true", help="--progress: live bars with rate and ETA until done")
    p.add_argument("--dry-run", action="store_true",
                   help="--execute: print the KIP-435 steps, their batches, bytes and an estimate; change nothing")
    return p


def _validate(parser: Parser, args: argparse.Namespace) -> str:
    if args.zookeeper is not None and args.bootstrap_server is not None:
        parser.error("--zookeeper and --bootstrap-server cannot be used together")
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if not chosen:
        parser.error("one of --generate, --execute, --verify, --progress, --cancel, --list is required")
    action = chosen[0]
    if args.zookeeper is not None:
        if action not in ZK_ACTIONS:
            parser.error(f"--{action} needs --bootstrap-server; it cannot be used with --zookeeper (KIP-179)")
        print(ZK_DEPRECATION, file=sys.stderr)
    elif args.bootstrap_server is None:
        parser.error("--bootstrap-server is required")
    for option, actions in ALLOWED.items():
        if getattr(args, option) not in (None, False) and action not in actions:
            parser.error(f"--{option.replace('_', '-')} cannot be used with --{action}")
    if action == "progress" and args.reassignment_json_file is not None and (args.request is not None or args.watch):
        parser.error("--progress takes a request (--request, --watch) or a file (--reassignment-json-file), not both")
    for option in REQUIRED.get(action, ()):
        if getattr(args, option) is None:
            parser.error(f"--{action} needs --{option.replace('_', '-')}")
    return action


def _limits(args: argparse.Namespace) -> RunLimits:
    base = RunLimits(Limits(args.max_partition_movements or DEFAULT_MAX_PARTITION_MOVEMENTS,
                            args.max_replica_movements or DEFAULT_MAX_REPLICA_MOVEMENTS,
                            args.max_leader_movements or DEFAULT_MAX_LEADER_MOVEMENTS), args.throttle)
    if args.limits is not None and args.limits.exists():
        base = read_limits(args.limits, base)  # a bad file is refused before anything starts
    return base


def run(args: argparse.Namespace, action: str, out: TextIO) -> int:
    targets = None
    if args.reassignment_json_file is not None:
        targets = assignment.load_reassignment(args.reassignment_json_file)
    topics = (reassign_brokers.load_topics_to_move(args.topics_to_move_json_file)
              if action == "generate" else None)
    limits = _limits(args) if action == "execute" else None
    security = load_command_config(args.command_config, PROG) if args.command_config is not None else None
    if args.zookeeper is not None:
        with zookeeper.AdminZkClient(args.zookeeper) as zk, zk.client(security) as client:
            if action == "list":
                pending = sorted(zk.pending())
                if not pending:
                    print("No partition reassignments found.", file=out)
                else:
                    print("Current partition reassignments:", file=out)
                    for t, p in pending:
                        print(f"{t}-{p}", file=out)
                return 0
            assert targets is not None
            if action == "execute":
                assert limits is not None
                with reassign_brokers.request_store(client, out) as store:
                    return execute(client, targets, out, limits, args, store, args.poll_interval or DEFAULT_POLL_S,
                                   zk)
            # A partition of a running request is in progress even between two batches' znodes; once all is done,
            # the replication throttles a stopped run left are put back as with --bootstrap-server.
            with reassign_brokers.request_store(client, out) as store:
                placed = zk.assignment(sorted({t.topic for t in targets}))
                running = frozenset((t.topic, t.partition) for t in targets
                                    if running_request(store, (t.topic, t.partition))
                                    and tuple(placed.get((t.topic, t.partition), ())) != tuple(t.replicas))
                rc = reassign_log_dirs.verify(client, targets, out, preserve_throttles=args.preserve_throttles, zk=zk,
                                              steps_running=running)
                if rc == 0 and not args.preserve_throttles:
                    restored = restore_throttles(client, store, lambda line: print(line, file=out), wait_s=0,
                                                 configs=ZkConfigs(zk.zk))
                    if restored:
                        print("Throttles removed: " + ", ".join(restored), file=out)
                return rc
    if action == "progress" and args.watch:
        # The watch bootstraps inside its retry (reassign_brokers.watch): a broker restarting as the watch starts is
        # waited for like one restarting later, where every other action reports the failure at once.
        return reassign_brokers.watch(lambda: Client(args.bootstrap_server, timeout=DEFAULT_TIMEOUT_S,
                                                     security=security),
                                      args.request, args.poll_interval or DEFAULT_POLL_S, out)
    with Client(args.bootstrap_server, timeout=DEFAULT_TIMEOUT_S, security=security) as client, \
            reassign_brokers.request_store(client, out) as store:
        poll = args.poll_interval or DEFAULT_POLL_S
        if action == "generate":
            assert topics is not None
            return reassign_brokers.generate(client, topics, args.broker_list, out,
                                             rack_aware=not args.disable_rack_aware)
        if action == "list":
            return reassign_brokers.list_command(client, out, store)
        if action == "progress" and targets is not None:
            # KIP-179's table: where each replica the file names stands, lag in messages behind its leader.
            statuses = replica_statuses(client, [(t.topic, t.partition, b) for t in targets for b in t.replicas])
            for line in table(statuses):
                print(line, file=out)
            done = all(s.status == IN_SYNC for s in statuses)
            return EXIT_OK if done else EXIT_IN_PROGRESS
        if action == "progress":
            return reassign_brokers.progress(client, store, args.request, out)
        assert targets is not None
        if action == "verify":
            return reassign_brokers.verify(client, targets, out, store=store,
                                           preserve_throttles=args.preserve_throttles)
        if action == "cancel":
            return reassign_brokers.cancel(client, targets, out, store=store,
                                           preserve_throttles=args.preserve_throttles, poll_s=poll)
        assert limits is not None
        return execute(client, targets, out, limits, args, store, poll)


def execute(client: Client, targets: list[assignment.PartitionTarget], out: TextIO, limits: RunLimits,
            args: argparse.Namespace, store: ClusterRequestStore, poll: float,
            zk: zookeeper.AdminZkClient | None = None) -> int:
    """Replicas that change brokers go through the step engine; a file that only moves replicas between the log
    dirs of their brokers is mover-log-dirs' --execute (reassign_log_dirs.py: one code path for both tools). With
    `zk` (--zookeeper) the engine reads and starts steps through ZooKeeper (mover/admin/reassign/zookeeper_view.py)."""
    topics = sorted({t.topic for t in targets})
    view = ZkReassignments(zk.zk) if zk is not None else None
    states, _ = view.partition_states(topics) if view is not None else reassign_brokers.partition_states(client,
                                                                                                         topics)
    between_brokers = any(states.get((t.topic, t.partition)) is None
                          or list(states[(t.topic, t.partition)].replicas) != list(t.replicas) for t in targets)
    if args.dry_run:
        if not between_brokers:
            print("Dry run: nothing is changed in the cluster. Every replica is on its target broker: only log dirs "
                  "would change (mover-log-dirs --describe shows where each replica is).", file=out)
            return EXIT_OK
        return reassign_brokers.dry_run(client, targets, out, limits=limits, cluster=view,
                                        poll_s=args.poll_interval or DEFAULT_POLL_S)
    timeout_s = (args.timeout if args.timeout is not None else 10000) / 1000
    if not between_brokers:
        rc = reassign_log_dirs.execute(client, targets, timeout_s, out, args.replica_alter_log_dirs_throttle, zk=zk)
        # Kept so that --progress follows the moves; the brokers carry them out, this run is over.
        # Recorded so that --progress follows the moves from any machine; the brokers carry them out, this run is
        # over (LOG_DIRS_STARTED is a final state: nothing of it is left to resume or take over).
        request_id, _ = store.claim(request_partitions(targets))
        store.finish(request_id, LOG_DIRS_STARTED)
        return rc
    return reassign_brokers.execute(client, targets, out, limits=limits, limits_path=args.limits, store=store,
                                    poll_s=poll, stall_s=args.stall_seconds or DEFAULT_STALL_S,
                                    log_dir_timeout_s=timeout_s, cluster=view,
                                    configs=ZkConfigs(zk.zk) if zk is not None else None)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    action = _validate(parser, args)
    return run_command(PROG, lambda: run(args, action, sys.stdout), user_errors=(CliError, ClientError))


if __name__ == "__main__":
    sys.exit(main())
