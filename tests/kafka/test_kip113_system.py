"""KIP-113's system tests on a real Kafka 3.7 (KRaft: a controller and 4 brokers, 2 log dirs each, started without
root's DAC override so that a chmod 000 dir really is unreadable to them), with an idempotent acks=all producer and a
consumer running on each topic (replication factor 3, min.insync.replicas 2):

* a replica a reassignment step adds to a broker is created in the log dir the file asks for, never in another
  (KIP-113: AlterReplicaLogDirs before the replica exists, mover/admin/reassign/new_replica_dirs.py), sampled every
  100 ms on the disk and through DescribeLogDirs while the reassignment runs;
* 1b: every replica moved to the unused log dir of the next broker (1 -> 2 -> 3 -> 4 -> 1) by `mover-reassign
  --execute` of a file with log_dirs: the cluster ends at the target placement, every acknowledged record is read back
  exactly once, no throttle is left;
* 2: a follower's log dir made unreadable (chmod 000), then the leader's, then one of every other broker's (one
  partition left with no replica on a good dir): each goes offline (DescribeLogDirs error 56, no partitions) and the
  partitions with min.insync.replicas replicas left on good dirs keep taking writes and being read. Kafka 3.7.0 then
  re-creates every replica of a failed dir in its broker's other dir (KAFKA-16234, docs/kafka-compat.md), and every
  partition with a leader serves again (a replica its partition had dropped from the ISR before the broker noticed may
  stay absent: it is forgiven while the partition serves without it); it refuses to restart while both copies are
  there, so the repair (chmod back, brokers stopped) deletes the copy holding fewer bytes (the failed dir's, as
  Kafka's message says, except for the partition that had no leader to refill it) and restarts them: every dir online,
  every partition serving, every acknowledged record read back exactly once.

They share one cluster (a start costs 20-40 s on this machine) and run in this order; the second test leaves its
dirs repaired. 2 min 21 s to 3 min 21 s here (load average 16-30 on a shared 2-core machine), 43-92 s of it the
cluster start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError
from mover.admin.log_dir_state import describe_broker
from mover.admin.reassign.kip455 import BROKER_RESOURCE, TOPIC_RESOURCE, own_configs, partition_states
from mover.admin.reassign.replication_throttle import BROKER_KEYS, TOPIC_KEYS
from mover.testing import prefork
from mover.testing.consumers import PyConsumer, end_offsets, wait_caught_up
from mover.testing.exactly_once import assert_clean, check
from mover.testing.history import TP
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.moverd import SETPRIV
from mover.testing.producers import PyProducer, prefill
from mover.testing.unswapped import future_copies
from mover.testing.wait import WaitTimeout, wait_for
from mover.testing.worker import Worker
from mover.wire.errors import ErrorCode

BROKERS = [1, 2, 3, 4]
HEAP = "-Xmx200m -Xms64m"
# A broker finds a dir unreadable at its next write there, the high-watermark checkpoint: every second here instead
# of Kafka's 5, so that test 2's three failures are each seen sooner.
HW_CHECKPOINT_MS = 1000


@pytest.fixture(scope="module")
def cluster(kafka_home_dir: Path, kafka_jvm_opts: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(tmp_path_factory.mktemp("kafka"), kafka_home_dir, brokers=len(BROKERS), log_dirs=2,
                         controller=True, heap=HEAP, jvm_opts=kafka_jvm_opts,
                         props={"auto.leader.rebalance.enable": "false",
                                "replica.high.watermark.checkpoint.interval.ms": HW_CHECKPOINT_MS})
    for b in BROKERS:
        kafka.broker(b).prefix = SETPRIV  # from the first start: test 2's chmod 000 must bite
    with kafka:
        yield kafka


def mover_reassign(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return prefork.run([sys.executable, "-m", "mover.cli.reassign_partitions", *args], capture_output=True,
                       text=True, env={**os.environ, "MOVER_REASSIGN_STATE_DIR": str(state_dir)}, timeout=240,
                       stdin=subprocess.DEVNULL)


def write_file(path: Path, topic: str, targets: dict[int, tuple[list[int], list[str]]]) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r, "log_dirs": d} for p, (r, d) in sorted(targets.items())]}))
    return path


def placement(client: Client, topic: str) -> dict[int, tuple[list[int], list[str | None]]]:
    """Per partition: the replicas as Metadata lists them, and the dir each broker holds its current copy in
    (None: no copy, or a future copy still being made)."""
    states, _ = partition_states(client, [topic])
    where: dict[tuple[int, int], str | None] = {}
    for b in BROKERS:
        for d in describe_broker(client, b, {topic: sorted(p for _, p in states)}):
            for p in d.partitions:
                if p.is_future:
                    where[(b, p.partition)] = None  # moving: not there yet
                elif (b, p.partition) not in where:
                    where[(b, p.partition)] = d.path
    return {p: (list(s.replicas), [where.get((b, p)) for b in s.replicas]) for (_, p), s in states.items()}


def throttles_left(client: Client, topic: str) -> dict[str, object]:
    brokers = own_configs(client, BROKER_RESOURCE, [str(b) for b in BROKERS], BROKER_KEYS)
    topics = own_configs(client, TOPIC_RESOURCE, [topic], TOPIC_KEYS)
    return {k: v for k, v in {**brokers, **topics}.items() if v}


class Load:
    """An idempotent acks=all producer (kafka-python's default) and a consumer on every partition of `topic`."""

    def __init__(self, cluster: KafkaCluster, topic: str, n: int, prefill_records: int, *,
                 flush_timeout: float | None = None) -> None:
        self.cluster = cluster
        self.tps: list[TP] = [(topic, p) for p in range(n)]
        self.acked = prefill(cluster.bootstrap, self.tps, prefill_records, pad=1000)
        self.producer = PyProducer("load", cluster.bootstrap, self.tps, rate=40, pad=200,
                                   flush_timeout=flush_timeout).start()
        self.consumer = PyConsumer("reader", cluster.bootstrap, self.tps).start()

    def serving(self, tps: list[TP], message: str) -> None:
        """Each of `tps` takes new acknowledged writes and the consumer reads past them."""
        acked = {tp: self.producer.acked_count([tp]) for tp in tps}
        wait_for(lambda: all(self.producer.acked_count([tp]) >= acked[tp] + 5 for tp in tps), 60,
                 f"{message}: writes acknowledged on {tps}", interval=0.2)
        read = self.consumer.next_offsets()
        wait_for(lambda: all(self.consumer.next_offsets().get(tp, 0) > read.get(tp, 0) for tp in tps), 60,
                 f"{message}: the consumer reading {tps}", interval=0.2)

    def check(self, *, failures_allowed: bool = False) -> None:
        self.producer.stop()
        acked, failed = self.producer.snapshot()
        assert failures_allowed or not failed, f"{len(failed)} sends failed, e.g. {failed[0]}"
        assert acked
        ends = end_offsets(self.cluster.bootstrap, self.tps)
        wait_caught_up([self.consumer], ends)
        assert_clean(check("reader", self.consumer.stop(), ends, self.acked + acked))


class DirSampler(Worker):
    """Every 100 ms, where `broker` holds any copy of topic-partition: the dirs whose files name it (its current
    copy, a future copy being made, a deleted one waiting to go) and the dirs DescribeLogDirs lists it in."""

    kind = "dir-sampler"

    def __init__(self, bootstrap: str, broker: int, dirs: list[Path], topic: str, partition: int) -> None:
        super().__init__(f"{topic}-{partition}@{broker}")
        self.bootstrap, self.broker, self.dirs = bootstrap, broker, dirs
        self.topic, self.partition = topic, partition
        self.on_disk: list[set[str]] = []
        self.described: list[set[str]] = []

    def stop(self) -> None:
        self.close()
        self._check_stopped()

    def _run(self) -> None:
        name = f"{self.topic}-{self.partition}"
        with Client(self.bootstrap, timeout=5) as client:
            while not self._stop.is_set():
                self.on_disk.append({str(d) for d in self.dirs for f in os.listdir(d)
                                     if f == name or f.startswith(name + ".")})
                try:
                    self.described.append({d.path for d in describe_broker(client, self.broker,
                                                                            {self.topic: [self.partition]})
                                           if d.partitions})
                except (ClientError, AdminError):
                    pass  # the broker busy for a moment: the disk's sample stands for this one
                self._stop.wait(0.1)  # the sampling cadence, not a condition to wait for

    def seen(self) -> set[str]:
        return set().union(*self.on_disk, *self.described)


def test_a_new_replica_is_created_in_its_log_dir(cluster: KafkaCluster, tmp_path: Path) -> None:
    topic = "placed"
    # Kafka puts a new replica in the dir holding the fewest: a partition of another topic in one of broker 4's
    # dirs makes the other one Kafka's choice, so the file asks for the dir Kafka would not pick.
    cluster.create_topic("filler", assignment={0: [4]})
    requested = cluster.dir_of(4, "filler", 0)
    assert requested is not None
    other = next(d for d in cluster.log_dirs(4) if d != requested)
    cluster.create_topic(topic, assignment={0: [1, 2, 3]}, configs={"min.insync.replicas": 2})
    load = Load(cluster, topic, 1, prefill_records=2000)
    f = write_file(tmp_path / "r.json", topic, {0: ([2, 3, 4], ["any", "any", str(requested)])})
    sampler = DirSampler(cluster.bootstrap, 4, cluster.log_dirs(4), topic, 0).start()
    try:
        run = mover_reassign(tmp_path / "state", "--bootstrap-server", cluster.bootstrap, "--execute",
                             "--reassignment-json-file", str(f), "--throttle", "2000000", "--poll-interval", "0.3")
        assert run.returncode == 0, run.stdout + run.stderr
        with Client(cluster.bootstrap, timeout=10) as client:
            # Broker 4 holds one current copy and no future one: where it ends, wherever that is.
            wait_for(lambda: placement(client, topic)[0][1][2] is not None, 60, "broker 4's copy settled")
    finally:
        sampler.stop()
    # Never anywhere else, on the disk or in the broker's answers, from the first sample to the end of the run.
    assert sampler.seen() == {str(requested)}, (sampler.on_disk, sampler.described, other)
    assert len(sampler.on_disk) >= 10 and any(sampler.on_disk) and any(sampler.described)
    load.check()


def next_broker(b: int) -> int:
    return BROKERS[(BROKERS.index(b) + 1) % len(BROKERS)]


def test_1b_every_replica_to_the_unused_log_dir_of_the_next_broker(cluster: KafkaCluster, tmp_path: Path) -> None:
    topic = "kip113b"
    n = 4
    cluster.create_topic(topic, assignment={p: [BROKERS[(p + i) % 4] for i in range(3)] for p in range(n)},
                         configs={"min.insync.replicas": 2})
    load = Load(cluster, topic, n, prefill_records=1000)
    with Client(cluster.bootstrap, timeout=10) as client:
        before = wait_for(lambda: (lambda pl: pl if all(None not in d for _, d in pl.values()) else None)(
            placement(client, topic)), 30, "every replica in a log dir")
    targets: dict[int, tuple[list[int], list[str]]] = {}
    for p, (replicas, dirs) in before.items():
        # The replica on broker b in b's dir i goes to broker b+1's other dir (1 - i): the one it does not use.
        moved = [next_broker(b) for b in replicas]
        targets[p] = (moved, [str(cluster.log_dirs(nb)[1 - cluster.log_dirs(b).index(Path(d))])
                              for b, nb, d in zip(replicas, moved, dirs, strict=True)])
    f = write_file(tmp_path / "r.json", topic, targets)
    run = mover_reassign(tmp_path / "state", "--bootstrap-server", cluster.bootstrap, "--execute",
                         "--reassignment-json-file", str(f), "--throttle", "20000000", "--poll-interval", "0.3")
    assert run.returncode == 0, run.stdout + run.stderr
    # The placement the cluster reports, not --verify's wording; moves between the dirs of a broker (replicas that
    # stayed on theirs) finish after the run.
    def at_target(client: Client) -> bool:
        return placement(client, topic) == targets

    restarted = False
    with Client(cluster.bootstrap, timeout=10) as client:
        try:
            wait_for(lambda: at_target(client), 90, "the cluster at the target placement", interval=0.5)
        except AssertionError:
            # Kafka 3.7.0 may never swap in a finished copy whose new dir the controller did not acknowledge
            # (KAFKA-16365, docs/kafka-compat.md), until the broker restarts. Only that is forgiven: each copy left is
            # complete (offset lag 0), and its broker, restarted, swaps it in.
            left = future_copies(client, BROKERS, {topic: list(targets)})
            stuck = sorted({c.broker for c in left})
            if not stuck or any(c.offset_lag for c in left):
                raise AssertionError(f"not at the target: {placement(client, topic)}\ntarget: {targets}\n"
                                     f"future copies: {left}\n{run.stdout}") from None
            print(f"Kafka 3.7.0 left complete copies unswapped on brokers {stuck}: {left}; restarting them")
            for b in stuck:
                cluster.restart(b)
            restarted = True
    # After a restart, a client of its own: the one above holds connections the restarted brokers closed (CI saw
    # DescribeLogDirs answered by a closed connection there, 2026-12-07).
    with Client(cluster.bootstrap, timeout=10) as client:
        if restarted:
            wait_for(lambda: at_target(client), 90, "the cluster at the target placement after the restarts",
                     interval=0.5)
        assert throttles_left(client, topic) == {}
    load.check()


def log_bytes(partition_dir: Path) -> int:
    return sum(f.stat().st_size for f in partition_dir.glob("*.log"))


def remove_recreated(cluster: KafkaCluster, failed: dict[int, Path]) -> tuple[list[str], list[str]]:
    """Kafka 3.7.0 re-creates, in another dir of the same broker, a replica whose dir went offline, at its next metadata
    change (KAFKA-16234, fixed in 3.7.1; docs/kafka-compat.md), and refuses to start while both copies are there
    ("Duplicate log directories ... delete the partition in the log directory that is known to have failed
    recently"). With the broker stopped, the copy holding fewer bytes goes: the failed dir's, as the message says,
    when the new copy was filled from a leader; the new, empty one when no replica was left to fill it (all of the
    partition's replicas were on failed dirs), where deleting the failed dir's copy would lose its records.
    Returns (replicas whose failed dir's copy went, replicas whose failed dir's copy stayed)."""
    removed, kept = [], []
    for b, bad in failed.items():
        others = [d for d in cluster.log_dirs(b) if d != bad]
        for entry in sorted(bad.iterdir()):
            twin = next((d / entry.name for d in others if (d / entry.name).is_dir()), None)
            if not entry.is_dir() or twin is None:
                continue
            if log_bytes(twin) >= log_bytes(entry):
                shutil.rmtree(entry)
                removed.append(f"{entry.name} on broker {b}")
            else:
                shutil.rmtree(twin)
                kept.append(f"{entry.name} on broker {b}")
    return removed, kept


def offline_dirs(client: Client, broker: int) -> set[str]:
    return {d.path for d in describe_broker(client, broker) if d.error_code == ErrorCode.KAFKA_STORAGE_ERROR}


def test_2_failed_log_dirs_then_repair(cluster: KafkaCluster) -> None:
    topic = "kip113f"
    n = 8
    cluster.create_topic(topic, partitions=n, replication_factor=3, configs={"min.insync.replicas": 2})
    load = Load(cluster, topic, n, prefill_records=200, flush_timeout=5)
    with Client(cluster.bootstrap, timeout=10) as client:
        before = wait_for(lambda: (lambda pl: pl if all(None not in d for _, d in pl.values()) else None)(
            placement(client, topic)), 30, "every replica in a log dir")

        def serving_with(bad: set[tuple[int, str]]) -> list[TP]:
            """The partitions keeping min.insync.replicas (2) replicas outside the `bad` dirs."""
            return [(topic, q) for q, (rs, ds) in sorted(before.items())
                    if sum((b, d) not in bad for b, d in zip(rs, ds, strict=True)) >= 2]

        # Partition 0's follower's dir, then its leader's (auto.leader.rebalance is off and nothing moved it: the
        # preferred leader leads); then its last replica's, so that it has none left on a good dir, and a dir of the
        # other broker, the one that leaves the most partitions serving (Kafka chose where the replicas went: a
        # broker may hold all of this topic's in one dir).
        replicas, dirs = before[0]
        leader, follower, last = replicas
        assert None not in dirs
        second = {follower: Path(str(dirs[1])), leader: Path(str(dirs[0])), last: Path(str(dirs[2]))}
        for b in BROKERS:
            if b not in second:
                chosen = {(x, str(d)) for x, d in second.items()}
                second[b] = max(cluster.log_dirs(b), key=lambda d, b=b: len(serving_with(chosen | {(b, str(d))})))
        failed: set[tuple[int, str]] = set()
        try:
            for stage, brokers in (("a follower's", [follower]), ("the leader's", [leader]),
                                   ("every broker's", [b for b in BROKERS if b not in (leader, follower)])):
                for b in brokers:
                    second[b].chmod(0)
                    failed.add((b, str(second[b])))
                for b in brokers:
                    # Kafka finds out at its next write there: the high-watermark checkpoint (HW_CHECKPOINT_MS).
                    wait_for(lambda b=b: str(second[b]) in offline_dirs(client, b), 60,
                             f"{second[b]} of broker {b} offline")
                good = serving_with(failed)
                assert good, f"no partition keeps 2 replicas on good dirs once {stage} second dir failed: {before}"
                load.serving(good, f"{stage} second dir offline")
            # Every broker's second dir is offline, each reported with error 56 and nothing in it.
            for b in BROKERS:
                dirs_of_b = {d.path: d for d in describe_broker(client, b)}
                assert dirs_of_b[str(second[b])].error_code == ErrorCode.KAFKA_STORAGE_ERROR
                assert not dirs_of_b[str(second[b])].partitions
            # Kafka 3.7.0 re-creates each replica of a failed dir in the broker's other dir and fills it from the
            # leader (KAFKA-16234, docs/kafka-compat.md): then every partition with a leader serves again.
            lost = {(b, q) for q, (rs, ds) in before.items() for b, d in zip(rs, ds, strict=True) if (b, d) in failed}

            def on_good_dirs() -> set[tuple[int, int]]:
                return {(b, p.partition) for b in BROKERS for d in describe_broker(client, b, {topic: list(range(n))})
                        if d.path != str(second[b]) for p in d.partitions if not p.is_future}

            late: set[tuple[int, int]] = set()
            try:
                wait_for(lambda: lost <= on_good_dirs(), 60, "the failed dirs' replicas re-created on good dirs")
            except WaitTimeout:
                # A replica is re-created only at a change of its partition that its broker applies after the dir
                # failed (docs/kafka-compat.md): one whose partition had already dropped it from the ISR, and has
                # not changed since, stays absent, and is forgiven only while its partition serves without it.
                missing = lost - on_good_dirs()
                states, _ = partition_states(client, [topic])
                unserved = sorted((b, q) for b, q in missing if (s := states[(topic, q)]).leader < 0
                                  or b in s.isr or len(s.isr) < 2)
                if unserved or missing >= lost:
                    raise AssertionError(f"not re-created: {sorted(missing)}; now {states}") from None
                print(f"Kafka 3.7.0 did not re-create {sorted(missing)}; their partitions serve without them: "
                      f"{ {q: states[(topic, q)] for _, q in missing} }")
                late = missing
            # Those with a replica left on a good dir: one with all its replicas on failed dirs has no leader to fill
            # its new copies from, and waits for the repair.
            stranded = {q for q, (rs, _) in before.items() if all((b, q) in lost for b in rs)}
            try:
                load.serving([tp for tp in load.tps if tp[1] not in stranded], "every replica re-created on a good dir")
            except AssertionError as e:
                states, _ = partition_states(client, [topic])
                raise AssertionError(f"{e}\n{ {p: (s.replicas, s.isr, s.leader) for (_, p), s in states.items()} }\n"
                                     f"{ {tp: load.producer.acked_count([tp]) for tp in load.tps} }\n"
                                     f"{load.producer.snapshot()[1][-5:]}") from None
        finally:
            for b in BROKERS:
                second[b].chmod(0o755)
    # Repair: the dirs readable again, the brokers restarted (a dir once offline stays so until then).
    for b in BROKERS:
        cluster.stop_broker(b)
    removed, kept = (sorted(r for r in side if r.startswith(f"{topic}-")) for side in remove_recreated(cluster, second))
    # Kafka re-created copies (the failed dir's went), and kept a failed dir's copy only where no leader was left, or
    # where the copy came too late to be seen filled (it may still be re-created, short, after the wait gave up: met
    # in CI with partition 6 on broker 4); the restarted broker then fills the failed dir's copy from its leader.
    assert removed and set(removed) <= {f"{topic}-{q} on broker {b}" for b, q in lost}, (removed, lost)
    allowed = {f"{topic}-{q} on broker {b}" for b, q in lost if q in stranded or (b, q) in late}
    assert set(kept) <= allowed, (kept, stranded, late)
    for b in BROKERS:
        cluster.broker(b).start()
    for b in BROKERS:
        cluster.broker(b).wait_started()
    cluster.wait_brokers()
    with Client(cluster.bootstrap, timeout=10) as client:
        wait_for(lambda: not any(offline_dirs(client, b) for b in BROKERS), 60, "every dir online")
    load.serving(load.tps, "after repair")
    load.check(failures_allowed=True)
