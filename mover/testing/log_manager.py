"""What tests and benches ask of a LogManager that the broker never does: each through the broker's own paths.

- `alter_replica_log_dir(manager, tp, path)`: one partition's AlterReplicaLogDirs, as a client's request; the error
  code (0: started, redirected or nothing to do).
- `moves(manager)`: the moves attached to replicas now (wait until none is left, count the resumed ones).
- `pending_deletes(manager)`: the retired dirs waiting for `kafka-delete-logs`.
- `cancel_move(manager, tp)`: cancel the partition's move as an operator does, with an AlterReplicaLogDirs to "any".
- `set_throttle(manager, rate)`: the intra-broker throttle as a server.properties edit sets it (the static layer of
  DynamicBrokerConfig, not persisted; a dynamic value an operator set still wins, as in Kafka).
"""

from __future__ import annotations

from pathlib import Path

from mover.config.broker import THROTTLE_KEY
from mover.config.dynamic import ConfigSource
from mover.log.log_manager import LogManager
from mover.moves import ReplicaMove
from mover.storage.names import TopicPartition
from mover.wire.messages.log_dirs import ANY_LOG_DIR


def alter_replica_log_dir(manager: LogManager, tp: TopicPartition, path: str) -> int:
    return manager.alter_replica_log_dirs([(tp, path)])[0][tp]


def moves(manager: LogManager) -> list[ReplicaMove]:
    return [r.move for r in list(manager.replicas.values()) if r.move is not None]


def pending_deletes(manager: LogManager) -> list[Path]:
    return manager.log_dirs.logs_to_be_deleted.paths()


def cancel_move(manager: LogManager, tp: TopicPartition) -> bool:
    """Whether the partition had a move, now cancelled."""
    replica = manager.replicas.get(tp)
    if replica is None or replica.move is None:
        return False
    codes, _ = manager.alter_replica_log_dirs([(tp, ANY_LOG_DIR)], record=False)
    return codes[tp] == 0


def set_throttle(manager: LogManager, rate: int | None) -> None:
    """None: unlimited (the built-in default)."""
    manager.dynamic_config.update({THROTTLE_KEY: None if rate is None else str(rate)},
                                  ConfigSource.STATIC_BROKER_CONFIG)
