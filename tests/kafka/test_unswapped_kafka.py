"""`mover-audit execute` against a real Kafka 3.7.0 that loses moves (KAFKA-16365, docs/kafka-compat.md): moves sent
right after a topic of replication factor 2 is created leave copies complete that the broker never swaps in until it
restarts (here 24 of the 24 in five runs, 22 in a sixth; with replication factor 1 on one broker, whether combined
with the controller or not, none in 8 piles). Such a copy follows its partition, so it never looks stalled: execute must
name each, once, name no copy the broker did swap in, and end (exit 1: only a restart, the operator's, swaps them in);
the named lines are checked against what the broker reports, copy by copy. The broker restarted, it swaps them in, as
the line tells the operator. Should a Kafka
release lose none, every move ends done and the test checks that nothing was named."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from mover.admin.alter_log_dirs import alter_log_dirs
from mover.admin.client import Client
from mover.admin.common import TopicPartitionReplica
from mover.testing.audit_process import AuditProcess
from mover.testing.execute_plan import write_plan
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.unswapped import future_copies
from mover.testing.wait import wait_for

TOPIC = "pile"
PARTITIONS = 24
STALL_S = 8  # the copies' lines come after this; a broker restart is not part of the run (it would be "unreachable")


@pytest.fixture(scope="module")
def kafka(kafka_cluster: Callable[..., KafkaCluster]) -> KafkaCluster:
    """Two brokers of two log dirs each and a controller of their own: the partitions' followers joining their ISR
    right after creation are what makes 3.7.0 lose the dirs' acknowledgements (module docstring)."""
    return kafka_cluster(brokers=2, log_dirs=2, controller=True)


def test_execute_names_each_copy_kafka_3_7_0_never_swaps_in(kafka: KafkaCluster, tmp_path: Path) -> None:
    kafka.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=2)  # returns once each has its dirs
    dirs = [str(d) for d in kafka.log_dirs(1)]
    moves = []
    for p in range(PARTITIONS):
        now = str(kafka.dir_of(1, TOPIC, p))
        moves.append({"cluster": "k", "broker": 1, "topic": TOPIC, "partition": p, "from_dir": now,
                      "to_dir": dirs[1] if now == dirs[0] else dirs[0], "size_bytes": 0, "step": 1})
    plan = write_plan(tmp_path / "plan", moves)
    # Every move sent at once, at once (execute takes them up as already running): while the broker still reports
    # its new replicas' dirs, the pile that loses some.
    with Client(kafka.bootstrap) as client:
        alter_log_dirs(client, {TopicPartitionReplica(TOPIC, m["partition"], 1): m["to_dir"] for m in moves}, 10)
    execute = AuditProcess("execute", "--plan", str(plan), "--bootstrap-server", kafka.bootstrap, "--cluster", "k",
                           "--max-moves-per-disk", str(PARTITIONS), "--max-moves-per-broker", str(PARTITIONS),
                           "--max-moves", str(PARTITIONS), "--poll-interval", "0.2", "--stall-seconds", str(STALL_S),
                           timeout=120)
    done = re.compile(rf"^done {TOPIC}-(\d+) on broker 1 of k")
    named = re.compile(rf"^not swapped in: {TOPIC}-(\d+) on broker 1 of k has had its copy caught up \(offset lag 0\)")

    def ended(pattern: re.Pattern[str]) -> list[int]:
        return [int(m[1]) for line in list(execute.lines) if (m := pattern.match(line))]

    def carried_out() -> bool:
        """Every move execute took on is done or named (a copy the broker swapped in before execute looked is not
        one of them: execute counts it done without a line)."""
        counted = [int(m[1]) for line in list(execute.lines) if (m := to_carry_out.search(line))]
        return bool(counted) and len(set(ended(done)) | set(ended(named))) == counted[0]

    to_carry_out = re.compile(r"^plan .*: (\d+) move\(s\) to carry out")
    stuck: list[int] = []
    try:
        execute.wait_until(lambda: carried_out() or execute.proc.poll() is not None, "every move done or named")
        code = execute.wait()  # it does not wait for a restart
        stuck = ended(named)
        assert code == (1 if stuck else 0), execute.output
        assert len(stuck) == len(set(stuck)), execute.output  # each named once
        assert not set(stuck) & set(ended(done)), execute.output
        assert not any(line.startswith("stalled:") for line in execute.lines), execute.output
        with Client(kafka.bootstrap) as client:
            left = future_copies(client, [1], {TOPIC: list(range(PARTITIONS))})
        # Named are exactly the copies the broker still holds complete beside their replica.
        assert sorted(int(c.name.rsplit("-", 1)[1]) for c in left) == sorted(stuck), (left, execute.output)
        assert all(c.offset_lag == 0 for c in left), left
        print(f"Kafka 3.7.0 left {len(stuck)} of {PARTITIONS} copies unswapped: {sorted(stuck)}")
    finally:
        if execute.proc.poll() is None:
            execute.proc.send_signal(signal.SIGKILL)
        execute.wait()
    if stuck:  # what the line tells the operator: the restarted broker swaps them in
        kafka.restart(1)
        target = {m["partition"]: m["to_dir"] for m in moves}
        wait_for(lambda: all(str(kafka.dir_of(1, TOPIC, p)) == d for p, d in target.items()), 60,
                 "every copy swapped in after the restart")
