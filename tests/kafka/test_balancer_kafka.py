"""mover-audit balance against a real Apache Kafka 3.7 cluster (KRaft, a controller and three brokers of three log
dirs, the topic of tests/kafka/test_audit_cluster.py filled so that every broker has one disk far above its mean),
with an idempotent acks=all producer and the balancer's canary (replication factor 3, acks=all: Kafka checks the
canary's hand-written record batch, CRC included) running: within three cycles every disk is in band, no throttle
key is left on any broker, no future copy remains, and every acknowledged record reads back once.

The second test runs the balancer as an operator does, `python -m mover.audit balance` in a process of its own, with
no end, over a second skewed topic, under skewed producers (a few hot partitions written fast, the rest slowly) and a
consumer. An operator's execute on the cluster is refused once the balancer holds it. A broker is killed -9 while
one of the balancer's moves is copying on it (a future dir holding its topic id is seen: Kafka 3.7.0 killed before
that does not start again, tests/kafka/test_audit_cluster.py): the balancer says it pauses and why, and its
balance_paused metric says broker_down; restarted, the broker is seen, given 30 s to settle (broker_settling), and
the balancer resumes. Then the balancer itself is killed -9 while a move of its is copying: its throttle stays on
the brokers. Started again on the same state dir it says it resumes the unfinished plan, the disks come into band (a
broker that Kafka 3.7.0 left with a finished copy it never swaps in, KAFKA-16365, is restarted:
mover/testing/unswapped.py), and on SIGTERM it stops leaving no throttle key and no future copy; every acknowledged
record reads back once."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mover.admin.client import Client
from mover.admin.log_dir_state import describe_broker
from mover.audit.balancer import command
from mover.audit.cli import build_parser
from mover.config.broker import THROTTLE_KAFKA_KEY
from mover.testing.audit_process import AuditProcess
from mover.testing.consumers import PyConsumer, end_offsets, wait_caught_up
from mover.testing.exactly_once import assert_clean, check, read_back
from mover.testing.execute_plan import write_plan
from mover.testing.history import Acked
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.move_watcher import MoveWatcher
from mover.testing.producers import PyProducer, prefill
from mover.testing.skewed_topic import (
    BROKERS,
    CLUSTER,
    HEAVY,
    PARTITIONS,
    RECORD_BYTES,
    TPS,
    admin_configs,
    dir_index,
    fill_unevenly,
)
from mover.testing.unswapped import Unswapped, future_copies

BAND = 0.09


@pytest.fixture(scope="module")
def cluster(kafka_cluster: Callable[..., KafkaCluster]) -> KafkaCluster:
    return kafka_cluster(brokers=3, log_dirs=3, controller=True, props={"replica.fetch.max.bytes": 65536})


def usage(client: Client, broker: int) -> dict[str, int]:
    return {d.path: sum(p.size for p in d.partitions if not p.is_future) for d in describe_broker(client, broker)}


def in_band(used: dict[str, int], band: float) -> bool:
    mean = sum(used.values()) / len(used)
    return all(abs(u - mean) <= band * mean for u in used.values())


@pytest.mark.timeout(900)
def test_the_balancer_brings_every_disk_of_a_real_kafka_into_band(cluster: KafkaCluster, tmp_path: Path,
                                                                  spark: Any) -> None:
    acked = fill_unevenly(cluster)
    with Client(cluster.bootstrap) as client:
        assert not any(in_band(usage(client, b), BAND) for b in BROKERS)
    producer = PyProducer("during", cluster.bootstrap, TPS, rate=12, pad=100).start()
    argv = ["balance", "--bootstrap-server", cluster.bootstrap, "--cluster", CLUSTER, "--state-dir",
            str(tmp_path / "state"), "--band", f"{BAND:.0%}", "--interval", "0.1", "--check-interval", "1",
            "--poll-interval", "0.2", "--throttle", "1000000", "--max-produce-p99-ms", "5000",
            "--canary-interval", "0.2", "--max-cycles", "3"]
    out = io.StringIO()
    try:
        rc = command.run(build_parser(argv)[0].parse_args(argv), out)
    finally:
        producer.stop()
    text = out.getvalue()
    assert rc == 0, text
    with Client(cluster.bootstrap) as client:
        for b in BROKERS:
            used = usage(client, b)
            # The plan's band is on the snapshot's sizes; the producer adds ~1 KB/s meanwhile.
            assert in_band(used, BAND + 0.01), (b, used, text)
            assert not any(p.is_future for d in describe_broker(client, b) for p in d.partitions), text
    assert "nothing to move (0 disk(s) out of band)" in text, text
    assert all(THROTTLE_KAFKA_KEY not in configs for configs in admin_configs(cluster).values()), text
    assert "canary of k: created topic __mover_balance_canary (1 partition, replication factor 3)" in text, text
    # The only pause there may be: at the start, until the canary has a p99 (no move starts on a latency not known
    # yet). On a loaded machine the first snapshot takes long enough for the canary's first produces to be in
    # before the gate first looks, and then there is no pause at all.
    pauses = [line for line in text.splitlines() if line.startswith(("paused", "resumed"))]
    assert pauses in ([], ["paused k: waiting for the canary's first 5 produces", "resumed k"]), text
    during, failures = producer.snapshot()
    assert not failures and during
    read_back("after", cluster.bootstrap, TPS, acked + during)


LIVE_TOPIC = "skew_live"  # VALUE_RE (mover/testing/history.py) takes a topic without dashes
LIVE_TPS = [(LIVE_TOPIC, p) for p in range(PARTITIONS)]
# Slow enough that a move of a few hundred KB is seen copying (Kafka's quota lets ~10 s worth through first).
SLOW_THROTTLE = 32_000
# Disk budgets of every broker's first and second dir, below the throttle: every move touches one of them (it moves
# between two of three dirs), so while a broker moves, its quota is one of these, never SLOW_THROTTLE.
BUDGETS = (24_000, 28_000)
RESTART_S = 240  # a broker restart on the loaded 2-core machine takes 15-40 s, Spark's first start as long


def fill_skewed(cluster: KafkaCluster) -> tuple[list[Acked], list[int]]:
    """A second topic, made skewed after the first test balanced the disks: Kafka then places the new partitions by
    the dirs' partition counts, no longer evenly, so fill_unevenly's choice does not apply. The HEAVY partitions
    that broker 1's fullest dir (by count) holds get many records: that dir, and wherever the other brokers put
    them, fill faster. Returns the acknowledged records and the heavy partitions."""
    cluster.create_topic(LIVE_TOPIC, partitions=PARTITIONS, replication_factor=3)
    with Client(cluster.bootstrap) as client:
        where = dir_index(cluster, client, LIVE_TOPIC)
    fullest = max(range(3), key=lambda d: sum(i == d for i in where[1].values()))
    heavy = sorted(p for p, d in where[1].items() if d == fullest)[:HEAVY]
    counts = {tp: 75 + 15 * (tp[1] % 4) if tp[1] in heavy else 10 + 10 * (tp[1] % 4) for tp in LIVE_TPS}
    return prefill(cluster.bootstrap, LIVE_TPS, counts, RECORD_BYTES, name="fill"), heavy


def copying(cluster: KafkaCluster, topic: str) -> int | None:
    """A broker where a move of `topic` is copying now: its future dir holds its topic id (partition.metadata)."""
    for b in BROKERS:
        if any((f / "partition.metadata").exists() for d in cluster.log_dirs(b) for f in d.glob(f"{topic}-*-future")):
            return b
    return None


def refused_execute(cluster: KafkaCluster, tmp_path: Path) -> None:
    """An operator's mover-audit execute on a cluster the balancer holds is refused in one line: the lease in the
    cluster's status topic, as a second machine sees it."""
    with Client(cluster.bootstrap) as client:
        where = dir_index(cluster, client, LIVE_TOPIC)
    dirs = [str(d) for d in cluster.log_dirs(1)]
    partition, at = sorted(where[1].items())[0]
    plan = write_plan(tmp_path / "operator-plan", [
        {"cluster": CLUSTER, "broker": 1, "topic": LIVE_TOPIC, "partition": partition, "from_dir": dirs[at],
         "to_dir": dirs[(at + 1) % 3], "size_bytes": 1, "step": 0}])
    run = subprocess.run([sys.executable, "-m", "mover.audit", "execute", "--plan", str(plan), "--bootstrap-server",
                          cluster.bootstrap, "--cluster", CLUSTER], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert re.match(rf"mover-audit: error: cluster {CLUSTER}: a balancer moves its replicas \(mover-audit balance "
                    rf"pid \d+", run.stderr) and run.stderr.count("\n") == 1, run.stderr


def paused_metric(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(
        rf'^balance_paused{{cluster="{CLUSTER}",reason="(\w+)"}} (\S+)$', text, re.M)}


@pytest.mark.timeout(900)
def test_the_balancer_goes_on_after_a_broker_and_itself_are_killed(cluster: KafkaCluster, tmp_path: Path) -> None:
    acked, hot = fill_skewed(cluster)  # the heavy partitions are written fastest too: their disks grow most
    with Client(cluster.bootstrap) as client:
        assert not in_band(usage(client, 1), BAND)
    hot_producer = PyProducer("hot", cluster.bootstrap, [(LIVE_TOPIC, p) for p in hot], rate=2, pad=1000)
    cold_producer = PyProducer("cold", cluster.bootstrap, [tp for tp in LIVE_TPS if tp[1] not in hot], rate=1,
                               pad=100)
    consumer = PyConsumer("live", cluster.bootstrap, LIVE_TPS)
    args = ["--bootstrap-server", cluster.bootstrap, "--cluster", CLUSTER, "--state-dir", str(tmp_path / "state"),
            "--band", f"{BAND:.0%}", "--interval", "2", "--check-interval", "1", "--poll-interval", "0.2",
            "--throttle", str(SLOW_THROTTLE), "--stall-seconds", str(RESTART_S),
            "--metrics-listener", "http://127.0.0.1:0", "--master", "local[1]", "--driver-memory", "512m",
            "--shuffle-partitions", "2"]
    for b in BROKERS:
        for d, budget in zip(cluster.log_dirs(b), BUDGETS, strict=False):
            args += ["--disk-budget", f"{d}={budget}"]
    watcher = MoveWatcher("quota", cluster.bootstrap, brokers=BROKERS, config_key=THROTTLE_KAFKA_KEY, interval=0.2)
    balancer = second = None
    try:
        for w in (hot_producer, cold_producer, consumer, watcher):
            w.start()
        balancer = AuditProcess("balance", *args)
        balancer.wait_said(r"^metrics on http://")
        port = int(re.search(r":(\d+)/metrics", balancer.output).group(1))  # type: ignore[union-attr]
        balancer.wait_said(r"^cycle 1: ")  # it holds the cluster's lease from its first gate
        refused_execute(cluster, tmp_path)

        # A broker killed -9 while one of the balancer's moves copies on it.
        balancer.wait_until(lambda: copying(cluster, LIVE_TOPIC) is not None, "a move copying on some broker",
                            timeout=RESTART_S)
        killed = copying(cluster, LIVE_TOPIC)
        assert killed is not None
        cluster.kill(killed)
        balancer.wait_said(rf"^paused {CLUSTER}: (broker {killed} does not answer|broker\(s\) {killed} not among)")
        assert paused_metric(port)["broker_down"] == 1.0, balancer.output
        cluster.start_broker(killed)
        # Back, it is given the default 30 s to report its replicas' dirs before any move starts (KAFKA-16365).
        balancer.wait_said(rf"^paused {CLUSTER}: a broker that was down answers again: no move starts for 30 s")
        assert paused_metric(port)["broker_settling"] == 1.0, balancer.output
        balancer.wait_said(rf"^resumed {CLUSTER}$")
        assert paused_metric(port)["broker_down"] == 0.0, balancer.output

        # The balancer killed -9 while a move of its copies: its throttle stays behind, until it is started again.
        balancer.wait_until(lambda: copying(cluster, LIVE_TOPIC) is not None, "a move copying after the restart",
                            timeout=RESTART_S)
        balancer.proc.send_signal(signal.SIGKILL)
        balancer.wait()
        first = balancer.output
        assert any(THROTTLE_KAFKA_KEY in c for c in admin_configs(cluster).values()), first
        second = AuditProcess("balance", *args)
        second.wait_said(r"^resuming the unfinished plan ")

        # A broker Kafka 3.7.0 left with a finished copy it never swaps in (KAFKA-16365: a race inside the broker,
        # most often just after it restarted) is restarted, as an operator would; nothing else is forgiven.
        unswapped, looked = Unswapped(cluster.restart), [0.0]

        def balanced() -> bool:
            if time.monotonic() - looked[0] < 1.0:
                return False
            with Client(cluster.bootstrap) as client:
                unswapped.check(future_copies(client, BROKERS))
                looked[0] = time.monotonic()
                return second.said(r"^cycle \d+: nothing to move") and all(
                    in_band(usage(client, b), BAND + 0.01) for b in BROKERS)

        second.wait_until(balanced, "every disk in band", timeout=RESTART_S + unswapped.most * unswapped.grace_s)
        second.proc.send_signal(signal.SIGTERM)
        assert second.wait() == 0, second.output
        out = second.output
        assert "SIGTERM received" in out
        assert "no throttle or move of the balancer's left" in out, out
        for w in (hot_producer, cold_producer):
            w.stop()
        ends = end_offsets(cluster.bootstrap, LIVE_TPS)
        wait_caught_up([consumer], ends)
        live = consumer.stop()
        watcher.stop()
    finally:
        for w in (hot_producer, cold_producer, consumer, watcher):
            w.close()
        for b in (balancer, second):
            if b is not None:
                b.close()
        for b in BROKERS:
            if not cluster.broker(b).running:
                cluster.start_broker(b)
    print(first, "\n--- restarted ---\n", out, sep="")
    # No cycle took a throttle the balancer had set (and, with the broker down, could not put back) for a broker's own.
    assert "has its own throttle" not in first + out, first + out
    # Each broker's quota while it built future copies: the smallest budget of the dirs its moves touched.
    quotas = {b: watcher.configs_while_moving(b) for b in BROKERS}
    assert set().union(*quotas.values()) <= {str(v) for v in BUDGETS} and str(BUDGETS[0]) in set().union(
        *quotas.values()), quotas
    assert all(THROTTLE_KAFKA_KEY not in configs for configs in admin_configs(cluster).values()), out
    with Client(cluster.bootstrap) as client:
        assert not any(p.is_future for b in BROKERS for d in describe_broker(client, b) for p in d.partitions), out
    during: list = []
    for w in (hot_producer, cold_producer):
        ok, failed = w.snapshot()
        assert not failed, f"{w.name}: {len(failed)} records failed, e.g. {failed[:3]}"
        during += ok
    acked += during
    assert_clean(check("consumer through it all", live, ends, acked))
    read_back("after", cluster.bootstrap, LIVE_TPS, acked)
