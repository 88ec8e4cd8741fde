"""The log dirs a reassignment between brokers asks for (its `log_dirs`), placed as KIP-113 says: a replica a step adds
to a broker is created in its dir, not copied there afterwards.

For each step the step engine (mover/admin/reassign/step_engine.py) starts:
1. `before_step`: AlterReplicaLogDirs for each replica the step adds, before the step starts. The broker does not hold
   it yet: it answers REPLICA_NOT_AVAILABLE (Kafka; moverd answers UNKNOWN_TOPIC_OR_PARTITION for a topic it holds no
   partition of) and remembers the dir (Kafka's LogManager preferredLogDirs, moverd's RememberedDestinations), so
   that the replica is created there when the step makes the broker a follower. A dir that is not a log dir of the
   broker, or is offline, is refused here: the step is not started.
2. `after_step`, once AlterPartitionReassignments took the step: the same request re-sent every 100 ms (as Kafka's
   tool does) until the broker answers NONE, i.e. the replica exists in that dir (or, created elsewhere in a race,
   is being moved there), or until `timeout_s`; what is still not there is re-sent at each poll (`poll`) and once
   more when the step is over (`step_over`), when it must exist.
3. `settle`, once the partition is at its final replicas: its other replicas (those that stayed on their broker) are
   moved to their dirs between the dirs of their broker, as Kafka's tool does after a reassignment.

Measured on Kafka 3.7 (docs/kafka-compat.md): the log-dir request first and the reassignment then created the
replica in the requested dir 5 times of 5; the other order (Kafka's own tool) created it where the broker chose and
copied it a second time, 3 times of 7 stalling 30-60 s.

Errors are returned per partition (a Kafka error code and its message), for the engine to fail that partition: one
refused dir does not stop the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from mover.admin.alter_log_dirs import RETRY_INTERVAL_S, by_broker, send
from mover.admin.assignment import ANY_LOG_DIR
from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, TopicPartitionReplica, error_name
from mover.admin.reassign.kip455 import TopicPartition
from mover.admin.reassign.progress import Failure
from mover.wire.errors import ErrorCode

# Answers to a replica the broker does not hold yet, the dir remembered for when it is created: Kafka's, and moverd's
# for a topic it holds no partition of.
NOT_THERE = frozenset({ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


class NewReplicaDirs:
    def __init__(self, client: Client, wanted: Mapping[TopicPartitionReplica, str], *, timeout_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.wanted = {r: d for r, d in wanted.items() if d != ANY_LOG_DIR}
        self.timeout_s = timeout_s
        self.sleep = sleep
        # Added replicas whose broker has not confirmed their dir yet.
        self.pending: dict[TopicPartitionReplica, str] = {}

    def _of(self, tp: TopicPartition, brokers: Iterable[int]) -> dict[TopicPartitionReplica, str]:
        replicas = (TopicPartitionReplica(tp[0], tp[1], b) for b in brokers)
        return {r: self.wanted[r] for r in replicas if r in self.wanted}

    def before_step(self, adding: Mapping[TopicPartition, Iterable[int]]) -> dict[TopicPartition, Failure]:
        """The dirs of the replicas the steps add, sent before the steps start. Returns the partitions whose dir a
        broker refused (their steps must not start), with why."""
        group = {r: d for tp, brokers in adding.items() for r, d in self._of(tp, brokers).items()}
        return self._send(group)[1]

    def after_step(self, started: Mapping[TopicPartition, Iterable[int]]) -> dict[TopicPartition, Failure]:
        """The steps were taken: re-send the added replicas' dirs every 100 ms until their brokers hold them there,
        for up to `timeout_s`; the rest stays pending. Returns refusals per partition."""
        pending = {r: d for tp, brokers in started.items() for r, d in self._of(tp, brokers).items()}
        errors: dict[TopicPartition, Failure] = {}
        deadline = time.monotonic() + self.timeout_s
        while pending:
            pending, refused = self._send(pending)
            errors.update(refused)
            if not pending or time.monotonic() + RETRY_INTERVAL_S > deadline:
                break
            self.sleep(RETRY_INTERVAL_S)
        self.pending.update(pending)
        return errors

    def poll(self) -> dict[TopicPartition, Failure]:
        """Re-send once what is still pending."""
        if not self.pending:
            return {}
        self.pending, errors = self._send(self.pending)
        return errors

    def step_over(self, tp: TopicPartition) -> dict[TopicPartition, Failure]:
        """`tp`'s step is over: its added replicas exist now, so what is pending of it is sent until answered."""
        mine = {r: d for r, d in self.pending.items() if (r.topic, r.partition) == tp}
        for r in mine:
            del self.pending[r]
        return self._until_done(mine)

    def settle(self, tp: TopicPartition, replicas: Iterable[int]) -> dict[TopicPartition, Failure]:
        """`tp` is at its final replicas: every one with a dir in the file goes there (a replica already in it: no-op,
        NONE; one that stayed on its broker: a move between the dirs of that broker)."""
        for r in [r for r in self.pending if (r.topic, r.partition) == tp]:
            del self.pending[r]
        return self._until_done(self._of(tp, replicas))

    def _until_done(self, group: dict[TopicPartitionReplica, str]) -> dict[TopicPartition, Failure]:
        errors: dict[TopicPartition, Failure] = {}
        deadline = time.monotonic() + self.timeout_s
        while group:
            group, refused = self._send(group)
            errors.update(refused)
            if group and time.monotonic() + RETRY_INTERVAL_S > deadline:
                for r, d in group.items():
                    errors[(r.topic, r.partition)] = Failure(
                        ErrorCode.REPLICA_NOT_AVAILABLE,
                        f"replica {r} did not appear on broker {r.broker} within {self.timeout_s:g} s to be placed "
                        f"in {d}")
                break
            if group:
                self.sleep(RETRY_INTERVAL_S)
        return errors

    def _send(self, group: dict[TopicPartitionReplica, str]
              ) -> tuple[dict[TopicPartitionReplica, str], dict[TopicPartition, Failure]]:
        """One AlterReplicaLogDirs per broker: (replicas not there yet, refusals per partition). A broker that does
        not answer keeps its replicas pending (the next poll asks again)."""
        not_there: dict[TopicPartitionReplica, str] = {}
        errors: dict[TopicPartition, Failure] = {}
        for broker, mine in by_broker(group).items():
            try:
                _, codes = send(self.client, broker, mine)
            except (ClientError, AdminError):
                not_there.update(mine)
                continue
            for r, code in codes.items():
                if code in NOT_THERE:
                    not_there[r] = mine[r]
                elif code != ErrorCode.NONE:
                    errors[(r.topic, r.partition)] = Failure(
                        code, f"broker {r.broker} refused log dir {mine[r]} for replica {r}: {error_name(code)}")
        return not_there, errors
