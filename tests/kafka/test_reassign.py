"""mover-reassign on a real Kafka 3.7 (KRaft: a controller and 5 brokers, topics with replication factor 3 and
min.insync.replicas=2), with idempotent acks=all producers and consumers running: KIP-435 steps under small limits,
limits changed mid-run, Ctrl-C and resume, --cancel mid-way, a broker killed mid-step and restarted, bad input.

Afterwards: the assignment is the target (or where --cancel left it), every acknowledged record is read back once,
no throttle config is left, and no sample of the cluster (ListPartitionReassignments, polled on a thread) ever saw
more partitions moving, or more replicas added per partition, than the limits allowed."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from mover.admin.client import Client, ClientError
from mover.admin.common import ClusterUnavailable
from mover.admin.log_dir_state import describe_broker
from mover.admin.reassign.kip455 import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    alter_configs,
    alter_reassignments,
    list_reassignments,
    own_configs,
    partition_states,
)
from mover.admin.reassign.replication_throttle import (
    BROKER_KEYS,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    TOPIC_KEYS,
)
from mover.admin.replica_assignment import assign_replicas
from mover.testing import prefork
from mover.testing.consumers import PyConsumer, end_offsets, wait_caught_up
from mover.testing.exactly_once import assert_clean, check, read_back
from mover.testing.kafka_cluster import CONTROLLER_ID, KafkaCluster
from mover.testing.producers import PyProducer, prefill
from mover.testing.wait import wait_for

BROKERS = 5
HEAP = "-Xmx200m -Xms64m"
# Kafka's replication quota is measured over 11 one-second windows (docs/kafka-compat.md): a fresh throttle lets
# about 11 s worth of its rate through before it bites, so a copy of 15 s worth must take at least the other 4
# (unthrottled it takes about a second here). One fetch (replica.fetch.max.bytes, 1 MiB) may pass the quota.
RATE = 1_000_000
THROTTLED_BYTES = 15 * RATE
FREE_WINDOWS_S = 11
FETCH_BYTES = 1 << 20


@pytest.fixture(scope="module")
def cluster(kafka_cluster: Callable[..., KafkaCluster]) -> KafkaCluster:
    return kafka_cluster(brokers=BROKERS, log_dirs=1, controller=True, heap=HEAP,
                         props={"auto.leader.rebalance.enable": "false"})


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def _env(state_dir: Path) -> dict[str, str]:
    return {**os.environ, "MOVER_REASSIGN_STATE_DIR": str(state_dir)}


def mover_reassign(state_dir: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return prefork.run([sys.executable, "-m", "mover.cli.reassign_partitions", *args], capture_output=True,
                       text=True, env=_env(state_dir), timeout=timeout, stdin=subprocess.DEVNULL)


def start_reassign(state_dir: Path, *args: str) -> subprocess.Popen[str]:
    return prefork.Popen([sys.executable, "-m", "mover.cli.reassign_partitions", *args], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(state_dir),
                         stdin=subprocess.DEVNULL)


class Lines:
    """A running mover-reassign's stdout, read on a thread, so a test can wait for a line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait(self, text: str, timeout: float = 120) -> str:
        def found() -> str | None:
            hit = next((line for line in self.lines if text in line), None)
            if hit is None and self.proc.poll() is not None:
                self._thread.join(5)
                hit = next((line for line in self.lines if text in line), None)
                if hit is None:
                    raise AssertionError(f"mover-reassign exited {self.proc.returncode} before {text!r}:\n"
                                         + "\n".join(self.lines) + self.proc.stderr.read())  # type: ignore[union-attr]
            return hit
        return wait_for(found, timeout, f"a line with {text!r}", interval=0.05)

    def finish(self, timeout: float = 240) -> tuple[int, str]:
        rc = self.proc.wait(timeout)
        self._thread.join(10)
        return rc, "\n".join(self.lines)


def request_id(run: Lines) -> int:
    return int(run.wait("Request id: ").split()[2])


class Sampler:
    """ListPartitionReassignments every 100 ms: how many partitions were moving at once, how many replicas were
    being added to one partition at once."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        client = None
        while not self._stop.is_set():
            try:
                if client is None:
                    client = Client(self.bootstrap, timeout=5)
                ongoing = {tp: og for tp, og in list_reassignments(client).items() if tp[0] == self.topic}
                self.samples.append((time.monotonic(), len(ongoing),
                                     max((len(og.adding) for og in ongoing.values()), default=0)))
            except Exception:  # noqa: BLE001 - a broker being killed: sample again
                if client is not None:
                    client.close()
                client = None
            self._stop.wait(0.1)
        if client is not None:
            client.close()

    def max_partitions(self, since: float = 0.0, until: float = float("inf")) -> int:
        return max((n for t, n, _ in self.samples if since <= t <= until), default=0)

    def max_adding(self) -> int:
        return max((a for _, _, a in self.samples), default=0)


def reassignment_file(path: Path, topic: str, targets: dict[int, list[int]]) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in sorted(targets.items())]}))
    return path


def partitions(cluster: KafkaCluster, topic: str) -> dict[int, tuple[list[int], int]]:
    with Client(cluster.bootstrap, timeout=10) as client:
        states, _ = partition_states(client, [topic])  # from any live broker
    return {p: (list(s.replicas), s.leader) for (_, p), s in states.items()}


def throttles_left(cluster: KafkaCluster, topic: str) -> dict[str, Any]:
    with Client(cluster.bootstrap, timeout=10) as client:
        brokers = own_configs(client, BROKER_RESOURCE, [str(b) for b in cluster.broker_ids
                                                        if cluster.broker(b).running], BROKER_KEYS)
        topics = own_configs(client, TOPIC_RESOURCE, [topic], TOPIC_KEYS)
    return {k: v for k, v in {**brokers, **topics}.items() if v}


class Load:
    """An idempotent acks=all producer and a consumer on every partition of `topic`, while a reassignment runs."""

    def __init__(self, cluster: KafkaCluster, topic: str, n: int, prefill_records: int) -> None:
        self.cluster = cluster
        self.tps = [(topic, p) for p in range(n)]
        self.acked = prefill(cluster.bootstrap, self.tps, prefill_records, pad=1000)
        self.producer = PyProducer("load", cluster.bootstrap, self.tps, rate=40, pad=200).start()
        self.consumer = PyConsumer("reader", cluster.bootstrap, self.tps).start()

    def check(self) -> None:
        self.producer.stop()
        acked, failed = self.producer.snapshot()
        assert not failed, f"{len(failed)} sends failed, e.g. {failed[0]}"
        assert len(acked) > 0
        ends = end_offsets(self.cluster.bootstrap, self.tps)
        wait_caught_up([self.consumer], ends)
        assert_clean(check("reader", self.consumer.stop(), ends, self.acked + acked))


@pytest.fixture
def topic(request: pytest.FixtureRequest, cluster: KafkaCluster) -> Iterator[str]:
    name = request.node.name.removeprefix("test_")[:40]
    yield name


def _create(cluster: KafkaCluster, name: str, n: int, on: list[int]) -> None:
    cluster.create_topic(name, assignment={p: on for p in range(n)}, configs={"min.insync.replicas": 2})


# ------------------------------------------------------------------------------------------------------- tests


def test_steps_under_load_with_limits_changed_mid_run(cluster: KafkaCluster, topic: str, state_dir: Path,
                                                      tmp_path: Path) -> None:
    _create(cluster, topic, 6, [1, 2, 3])
    load = Load(cluster, topic, 6, prefill_records=1500)
    targets = {p: [3, 4, 5] if p % 2 else [4, 5, 1] for p in range(6)}
    f = reassignment_file(tmp_path / "r.json", topic, targets)
    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({"max_partition_movements": 1}))
    with Sampler(cluster.bootstrap, topic) as sampler:
        run = Lines(start_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--execute",
                                   "--reassignment-json-file", str(f), "--max-replica-movements", "1",
                                   "--max-leader-movements", "1", "--limits", str(limits), "--throttle", "20000000",
                                   "--poll-interval", "0.3"))
        run.wait("Request id: ")
        first = run.wait("step 1 [")
        # A throttle is in place for the step that runs: the topic's follower list names its new replica.
        with Client(cluster.bootstrap, timeout=10) as client:
            during = own_configs(client, TOPIC_RESOURCE, [topic], TOPIC_KEYS)[topic]
        assert "follower.replication.throttled.replicas" in during, (first, during)
        run.wait("step 2 done")
        changed_at = time.monotonic()
        limits.write_text(json.dumps({"max_partition_movements": 3}))
        run.wait("Limits changed: max 3 partition movements")
        rc, out = run.finish()
    assert rc == 0, out + run.proc.stderr.read()  # type: ignore[union-attr]
    assert "Successfully reassigned partitions" in out
    # Never more than the limits: 1 partition before the change, 3 after; one replica added at a time.
    assert sampler.max_partitions(until=changed_at) <= 1
    assert sampler.max_partitions() <= 3
    assert sampler.max_adding() <= 1
    # The engine's own count at each poll, leader movements included (--max-leader-movements 1). The raised limit is
    # judged by it, not by the sampler: a step of these small partitions can start and end between two of the
    # sampler's polls, so the sampler can only bound from above.
    peak = next(line for line in out.splitlines() if line.startswith("Most at once: "))
    assert ", 1 leader movements," in peak or ", 0 leader movements," in peak, peak
    assert 2 <= int(peak.split()[3]) <= 3, ("the raised limit was never used", peak)
    placed = partitions(cluster, topic)
    assert {p: r for p, (r, _) in placed.items()} == targets
    assert {p: leader for p, (_, leader) in placed.items()} == {p: r[0] for p, r in targets.items()}
    assert throttles_left(cluster, topic) == {}
    load.check()


def test_ctrl_c_then_resume(cluster: KafkaCluster, topic: str, state_dir: Path, tmp_path: Path) -> None:
    _create(cluster, topic, 4, [2, 3, 4])
    load = Load(cluster, topic, 4, prefill_records=1000)
    targets = {p: [5, 1, 2] for p in range(4)}
    f = reassignment_file(tmp_path / "r.json", topic, targets)
    args = ("--bootstrap-server", cluster.bootstrap, "--execute", "--reassignment-json-file", str(f),
            "--max-partition-movements", "1", "--throttle", "20000000", "--poll-interval", "0.3")
    run = Lines(start_reassign(state_dir, *args))
    rid = request_id(run)  # the cluster's: the offset of the request's first record in its status topic
    run.wait("step 1 [")
    run.proc.send_signal(signal.SIGINT)
    rc, out = run.finish()
    assert rc == 130, out
    # No step starts after Ctrl-C; the running one is waited for; the run says how to resume or cancel.
    after = out[out.index("Interrupted: starting no more steps"):]
    assert re.search(r": step \d+ \[", after) is None, out
    assert f"Run the same --execute again to resume (request {rid})" in after and "--cancel with the same file" in after
    assert throttles_left(cluster, topic) == {}  # the running step ended, then the run put everything back
    placed = {p: r for p, (r, _) in partitions(cluster, topic).items()}
    assert any(r != targets[p] for p, r in placed.items()), "Ctrl-C stopped nothing"
    with Client(cluster.bootstrap, timeout=10) as client:
        assert list_reassignments(client) == {}
    again = mover_reassign(state_dir, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"Request id: {rid} (resumed" in again.stdout
    # Resumed from where the cluster has each partition: a partition at its target takes no step, the others'
    # first steps start from their replicas as the cluster has them.
    for p, r in placed.items():
        steps = re.findall(rf"Partition {topic}-{p}: step \d+ (\[[\d, ]*\])", again.stdout)
        if r == targets[p]:
            assert not steps and f"Partition {topic}-{p}: at its target" in again.stdout, again.stdout
        else:
            assert steps and json.loads(steps[0]) == r, (p, r, again.stdout)
    assert {p: r for p, (r, _) in partitions(cluster, topic).items()} == targets
    assert throttles_left(cluster, topic) == {}
    load.check()


def test_ctrl_c_twice_leaves_the_step_running_and_a_rerun_follows_it(cluster: KafkaCluster, topic: str,
                                                                     state_dir: Path, tmp_path: Path) -> None:
    """A second Ctrl-C leaves at once: the running step goes on in the cluster under its throttle; the next run
    finds it there (ListPartitionReassignments), follows it under its own throttle and puts every throttle back."""
    _create(cluster, topic, 1, [2, 3, 4])
    # More than the first fetch (up to replica.fetch.max.bytes, 1 MiB, before the quota has measured anything) and
    # the 11 s worth Kafka's quota lets through at 10 kB/s: the step is still copying when the second Ctrl-C comes
    # and when the next run starts.
    acked = prefill(cluster.bootstrap, [(topic, 0)], 2000, pad=1000)
    f = reassignment_file(tmp_path / "r.json", topic, {0: [5, 1, 2]})
    args = ("--bootstrap-server", cluster.bootstrap, "--execute", "--reassignment-json-file", str(f),
            "--poll-interval", "0.3")
    run = Lines(start_reassign(state_dir, *args, "--throttle", "10000"))
    rid = request_id(run)
    first = run.wait("step 1 [")
    run.proc.send_signal(signal.SIGINT)
    run.wait("Interrupted: starting no more steps")
    run.proc.send_signal(signal.SIGINT)
    rc, out = run.finish()
    assert rc == 130, out
    assert ("the running steps go on in the cluster; their throttles stay. Run the same --execute again to resume "
            f"(request {rid}), or --cancel with the same file") in out
    with Client(cluster.bootstrap, timeout=10) as client:
        running = list_reassignments(client)
    assert list(running) == [(topic, 0)], (first, out)
    assert throttles_left(cluster, topic) != {}
    again = mover_reassign(state_dir, *args, "--throttle", "50000000")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"Request id: {rid} (resumed" in again.stdout
    assert (f"Partition {topic}-0: following the running step {list(running[(topic, 0)].original)} -> "
            f"{list(running[(topic, 0)].target)}") in again.stdout
    assert {p: r for p, (r, _) in partitions(cluster, topic).items()} == {0: [5, 1, 2]}
    assert throttles_left(cluster, topic) == {}
    read_back("twice-reader", cluster.bootstrap, [(topic, 0)], acked)


def test_cancel_mid_way(cluster: KafkaCluster, topic: str, state_dir: Path, tmp_path: Path) -> None:
    _create(cluster, topic, 3, [1, 3, 5])
    before = {p: r for p, (r, _) in partitions(cluster, topic).items()}
    # Enough bytes under a small throttle that the first steps are still copying when --cancel comes.
    load = Load(cluster, topic, 3, prefill_records=4000)
    targets = {p: [2, 4, 1] for p in range(3)}
    f = reassignment_file(tmp_path / "r.json", topic, targets)
    run = Lines(start_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--execute",
                               "--reassignment-json-file", str(f), "--max-partition-movements", "2",
                               "--throttle", "100000", "--poll-interval", "0.3"))
    rid = request_id(run)
    run.wait("step 1 [")
    # KIP-179 progress of the running request: per new replica, bytes it holds of the leader's.
    progress = mover_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--progress", "--request", str(rid))
    assert progress.returncode == 3, progress.stdout + progress.stderr
    assert f"Request {rid}: running, 3 partitions" in progress.stdout
    assert re.search(rf"Replica {topic}-[01]-2: \d+ of \d+ bytes \(", progress.stdout), progress.stdout
    cancel = mover_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--cancel",
                            "--reassignment-json-file", str(f))
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert "Successfully cancelled partition reassignments for: " in cancel.stdout
    rc, out = run.finish()
    assert rc == 1 and "was cancelled" in out, out
    with Client(cluster.bootstrap, timeout=10) as client:
        assert list_reassignments(client) == {}
    placed = {p: r for p, (r, _) in partitions(cluster, topic).items()}
    for p, r in placed.items():
        assert f"Partition {topic}-{p} is left on replicas {','.join(map(str, r))}" in cancel.stdout
        # Back where its running step started: the original replicas (no step of this file had finished).
        assert r == before[p], (p, r, out)
    assert throttles_left(cluster, topic) == {}
    load.check()


def test_broker_killed_mid_step_and_restarted(cluster: KafkaCluster, topic: str, state_dir: Path,
                                              tmp_path: Path) -> None:
    _create(cluster, topic, 2, [1, 2, 3])
    # Kafka's replication quota lets about 11 s worth of bytes through at once: more than that, so the step is
    # still copying when the broker dies.
    load = Load(cluster, topic, 2, prefill_records=2000)
    targets = {p: [1, 2, 4] for p in range(2)}
    f = reassignment_file(tmp_path / "r.json", topic, targets)
    run = Lines(start_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--execute",
                               "--reassignment-json-file", str(f), "--max-partition-movements", "2",
                               "--throttle", "100000", "--poll-interval", "0.3"))
    run.wait("+[4]")
    # The partitions' leader dies while the new replica copies from it. (Not the new replica's broker: Kafka 3.7
    # then refuses to start, "does not have a topic ID", on the dir the killed copy left; a Kafka bug, not ours.)
    cluster.kill(1)
    wait_for(lambda: all(leader not in (1, -1) for _, leader in partitions(cluster, topic).values()), 60,
             "new leaders after broker 1 died")
    seen_before_restart = len(run.lines)
    cluster.start_broker(1)
    rc, out = run.finish()
    assert any("step 1 done" in line for line in run.lines[seen_before_restart:]), out  # ended after the kill
    assert rc == 0, out + run.proc.stderr.read()  # type: ignore[union-attr]
    assert {p: r for p, (r, _) in partitions(cluster, topic).items()} == targets
    assert throttles_left(cluster, topic) == {}
    load.check()


def test_controller_killed_mid_step_and_restarted(cluster: KafkaCluster, topic: str, state_dir: Path,
                                                  tmp_path: Path) -> None:
    """The cluster's only KRaft controller killed while a step copies: the brokers serve on, but what they forward
    to the controller (ListPartitionReassignments, configs) gets no answer or a retriable code. mover-reassign
    --execute and a --progress --watch beside it wait the outage out, say it once, and end once it is back. The step
    is held by a 1 B/s throttle until the controller is back, then let go through the limits file."""
    _create(cluster, topic, 2, [1, 2, 3])
    load = Load(cluster, topic, 2, prefill_records=500)
    targets = {p: [1, 2, 5] for p in range(2)}
    f = reassignment_file(tmp_path / "r.json", topic, targets)
    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({"throttle": 1}))
    run = Lines(start_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--execute",
                               "--reassignment-json-file", str(f), "--max-partition-movements", "2",
                               "--throttle", "1", "--limits", str(limits), "--poll-interval", "0.3"))
    run.wait("+[5]")
    watch = Lines(start_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--progress", "--watch",
                                 "--poll-interval", "0.3"))
    # Without a terminal the watch prints only its final frame: that it is polling shows as its connections.
    wait_for(lambda: psutil.Process(watch.proc.pid).net_connections(kind="tcp"), 60, "the watch to connect")
    cluster.kill(CONTROLLER_ID)
    # What a broker answers now (Kafka 3.7): a retriable code, or nothing before the client gives up.
    with Client(cluster.bootstrap, timeout=10) as client:
        with pytest.raises((ClusterUnavailable, ClientError)) as seen:
            list_reassignments(client)
    warned = run.wait("warning: ")
    cluster.start_broker(CONTROLLER_ID)
    run.wait("The cluster answers again")
    seen_before_release = len(run.lines)
    limits.write_text(json.dumps({"throttle": 1_000_000_000}))
    rc, out = run.finish()
    assert rc == 0, out + run.proc.stderr.read()  # type: ignore[union-attr]
    assert any("step 1 done" in line for line in run.lines[seen_before_release:]), out
    # Said once per outage, not at every poll of it: a loaded machine may see a second slow answer after the first
    # outage ended, which is a new outage, said again after its "answers again".
    said = [line for line in out.splitlines() if line == warned or line.startswith("The cluster answers again")]
    assert said[0] == warned and all(a != b for a, b in zip(said, said[1:], strict=False)), (seen.value, out)
    rc, watched = watch.finish()
    assert rc == 0, watched + watch.proc.stderr.read()  # type: ignore[union-attr]
    assert "partitions done" in watched
    assert {p: r for p, (r, _) in partitions(cluster, topic).items()} == targets
    assert throttles_left(cluster, topic) == {}, out
    load.check()


def test_bad_input_is_one_line_and_starts_nothing(cluster: KafkaCluster, state_dir: Path, tmp_path: Path) -> None:
    topic = "badinput"
    _create(cluster, topic, 2, [1, 2, 3])

    def refused(targets: dict[int, list[int]], name: str = topic) -> str:
        f = reassignment_file(tmp_path / "bad.json", name, targets)
        r = mover_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--execute",
                           "--reassignment-json-file", str(f))
        assert r.returncode == 1, r.stdout + r.stderr
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
        return r.stderr.strip()

    assert refused({0: [1, 2, 9]}).endswith("Unknown broker id 9")
    assert refused({0: [1, 2, 4]}, "nope").endswith("Topic nope not found.")
    assert "duplicate" in refused({0: [1, 2, 2]})
    assert "fewer than min.insync.replicas=2" in refused({0: [4]})
    assert "Unable to find partition: badinput-7" in refused({7: [1, 2, 4]})
    # Someone else's reassignment, heading elsewhere, held back by a 1 B/s throttle (set as Kafka's tool sets it).
    prefill(cluster.bootstrap, [(topic, 1)], 500, pad=1000)
    rates = {str(b): {"leader.replication.throttled.rate": "1", "follower.replication.throttled.rate": "1"}
             for b in (1, 2, 3, 4, 5)}
    with Client(cluster.bootstrap, timeout=10) as client:
        alter_configs(client, TOPIC_RESOURCE, {topic: {"leader.replication.throttled.replicas": "1:1,1:2,1:3",
                                                       "follower.replication.throttled.replicas": "1:4,1:5"}})
        alter_configs(client, BROKER_RESOURCE, rates)
        assert alter_reassignments(client, {(topic, 1): (3, 4, 5)}) == {}
        try:
            assert "already being reassigned to [3, 4, 5] by someone else" in refused({1: [1, 2, 4]})
        finally:
            alter_reassignments(client, {(topic, 1): None})
            alter_configs(client, TOPIC_RESOURCE, {topic: {k: None for k in TOPIC_KEYS}})
            alter_configs(client, BROKER_RESOURCE, {b: {k: None for k in BROKER_KEYS} for b in rates})
        assert list_reassignments(client) == {}
    assert not state_dir.exists() or all("requests\": {}" in p.read_text() for p in state_dir.iterdir())


def test_mover_log_dirs_execute_runs_the_same_engine(cluster: KafkaCluster, state_dir: Path, tmp_path: Path) -> None:
    topic = "logdirsexec"
    _create(cluster, topic, 1, [3, 4, 5])
    f = reassignment_file(tmp_path / "r.json", topic, {0: [3, 4, 1]})
    r = prefork.run([sys.executable, "-m", "mover.cli.log_dirs", "--bootstrap-server", cluster.bootstrap,
                     "--execute", "--reassignment-json-file", str(f)], capture_output=True, text=True,
                    env=_env(state_dir), timeout=240, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Partition {topic}-0: step 1 [3, 4, 5] -> [3, 4, 1] +[1] -[5]" in r.stdout
    assert {p: rep for p, (rep, _) in partitions(cluster, topic).items()} == {0: [3, 4, 1]}


def test_mover_audit_execute_moves_replicas_between_brokers_on_the_same_engine(cluster: KafkaCluster,
                                                                               tmp_path: Path) -> None:
    """A mover-audit plan whose rows carry `to_broker` runs in execute's loop on the step engine: KIP-435 steps under
    --max-moves, the replication throttle set for the run and removed at its end."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mover.audit.cli import build_parser
    from mover.audit.execute import run

    name = "audit_between_brokers"
    _create(cluster, name, 4, [1, 2, 3])
    acked = prefill(cluster.bootstrap, [(name, p) for p in range(4)], 50, pad=1000)
    rows = [{"cluster": "k", "broker": 3, "topic": name, "partition": p, "from_dir": "any", "to_dir": "any",
             "size_bytes": 50_000, "step": 0, "to_broker": 4} for p in range(4)]
    rows += [{"cluster": "k", "broker": 2, "topic": name, "partition": p, "from_dir": "any", "to_dir": "any",
              "size_bytes": 50_000, "step": 0, "to_broker": 5} for p in range(2)]
    schema = pa.schema([("cluster", pa.string()), ("broker", pa.int32()), ("topic", pa.string()),
                        ("partition", pa.int32()), ("from_dir", pa.string()), ("to_dir", pa.string()),
                        ("size_bytes", pa.int64()), ("step", pa.int32()), ("to_broker", pa.int32())])
    (tmp_path / "plan" / "moves").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "plan" / "moves" / "part-0.parquet")
    argv = ["execute", "--plan", str(tmp_path / "plan"), "--bootstrap-server", cluster.bootstrap, "--cluster", "k",
            "--max-moves", "2", "--throttle", "50000000", "--poll-interval", "0.2"]
    parser, _ = build_parser(argv)
    out = io.StringIO()
    with Sampler(cluster.bootstrap, name) as sampler:
        rc = run(parser.parse_args(argv), out)
    text = out.getvalue()
    assert rc == 0, text
    assert {p: r for p, (r, _) in partitions(cluster, name).items()} == {0: [1, 5, 4], 1: [1, 5, 4], 2: [1, 2, 4],
                                                                          3: [1, 2, 4]}, text
    assert "executed: 6 done" in text, text
    assert sampler.max_partitions() <= 2 and sampler.max_adding() <= 1, text
    assert throttles_left(cluster, name) == {}, text
    read_back("audit-reader", cluster.bootstrap, [(name, p) for p in range(4)], acked)


def test_throttle_limits_replication_and_own_values_come_back(cluster: KafkaCluster, state_dir: Path,
                                                               tmp_path: Path) -> None:
    """--throttle on a real cluster: the rates on the step's brokers only, the topic's throttled replicas are the
    step's (current replicas lead, the new one follows), the bytes arriving on the new replica's broker stay within
    what Kafka's quota lets through, and afterwards each broker and the topic have their own values back."""
    name = "throttled"
    _create(cluster, name, 1, [1, 2, 3])
    prefill(cluster.bootstrap, [(name, 0)], THROTTLED_BYTES // 10_000, pad=10_000)
    own_broker = {FOLLOWER_RATE: "999999999"}
    own_topic = {FOLLOWER_REPLICAS: "0:5"}
    with Client(cluster.bootstrap, timeout=10) as client:
        alter_configs(client, BROKER_RESOURCE, {"4": dict(own_broker)})
        alter_configs(client, TOPIC_RESOURCE, {name: dict(own_topic)})
        size = next(p.size for d in describe_broker(client, 1, {name: [0]}) for p in d.partitions
                    if not p.is_future)
    assert size >= THROTTLED_BYTES
    arrived: list[tuple[float, int]] = []  # (monotonic time, bytes of the new replica on broker 4)
    stop = threading.Event()

    def sample() -> None:
        with Client(cluster.bootstrap, timeout=10) as client:
            while not stop.is_set():
                got = [p.size for d in describe_broker(client, 4, {name: [0]}) for p in d.partitions
                       if not p.is_future]
                arrived.append((time.monotonic(), got[0] if got else 0))
                stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    f = reassignment_file(tmp_path / "r.json", name, {0: [1, 2, 4]})
    try:
        run = Lines(start_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--execute",
                                   "--reassignment-json-file", str(f), "--throttle", str(RATE),
                                   "--poll-interval", "0.3"))
        run.wait("step 1 [1, 2, 3] -> [1, 2, 4] +[4] -[3]")
        started = time.monotonic()  # after the step started: the elapsed time below is if anything too short
        with Client(cluster.bootstrap, timeout=10) as client:
            during_topic = own_configs(client, TOPIC_RESOURCE, [name], TOPIC_KEYS)[name]
            during_brokers = own_configs(client, BROKER_RESOURCE, [str(b) for b in cluster.broker_ids], BROKER_KEYS)
        rc, out = run.finish()
        assert rc == 0, out + run.proc.stderr.read()  # type: ignore[union-attr]
        wait_for(lambda: arrived and arrived[-1][1] >= size, 30, "the new replica's last bytes sampled")
    finally:
        stop.set()
        sampler.join(10)
        with Client(cluster.bootstrap, timeout=10) as client:
            after_brokers = own_configs(client, BROKER_RESOURCE, [str(b) for b in cluster.broker_ids], BROKER_KEYS)
            after_topic = own_configs(client, TOPIC_RESOURCE, [name], TOPIC_KEYS)[name]
            alter_configs(client, BROKER_RESOURCE, {"4": {k: None for k in BROKER_KEYS}})
            alter_configs(client, TOPIC_RESOURCE, {name: {k: None for k in TOPIC_KEYS}})
    # During the step: the leader side is the step's current replicas, the follower side its new one (with the
    # topic's own entry kept); the rate only on the brokers the step involves.
    assert during_topic == {LEADER_REPLICAS: "0:1,0:2,0:3", FOLLOWER_REPLICAS: "0:4,0:5"}, out
    assert during_brokers == {**{str(b): {LEADER_RATE: str(RATE), FOLLOWER_RATE: str(RATE)} for b in (1, 2, 3, 4)},
                              "5": {}}, out
    # Afterwards: each resource's own values, nothing of the run's.
    assert after_brokers == {"1": {}, "2": {}, "3": {}, "4": own_broker, "5": {}}, out
    assert after_topic == own_topic, out
    # Observed: the copy took at least what the quota's free windows leave, and at no sample had more bytes
    # arrived than the rate allows since the step started, plus the free windows and one fetch.
    done_at = next(t for t, n in arrived if n >= size)
    elapsed = done_at - started
    held_back = (size - FREE_WINDOWS_S * RATE) / RATE
    over = max(((n - (RATE * (t - started + FREE_WINDOWS_S) + FETCH_BYTES), t - started) for t, n in arrived
                if t >= started), default=(0, 0.0))
    free_end = next(((t, n) for t, n in arrived if t >= started + FREE_WINDOWS_S), None)
    after_free = (f"{(size - free_end[1]) / max(done_at - free_end[0], 1e-3) / RATE:.2f}x the rate after the free "
                  f"windows" if free_end is not None and done_at > free_end[0] else "done within the free windows")
    print(f"copied {size} B at {RATE} B/s in {elapsed:.1f} s (at least {held_back:.1f} s expected, size/rate "
          f"{size / RATE:.1f} s), {after_free}; closest to the quota's allowance: {-over[0]:.0f} B under, "
          f"{over[1]:.1f} s in")
    assert elapsed >= held_back, f"{size} B at {RATE} B/s took only {elapsed:.1f} s: the throttle did not hold"
    assert over[0] <= 0, f"{over[0]:.0f} B more than the throttle allows had arrived {over[1]:.1f} s in"
    assert {p: r for p, (r, _) in partitions(cluster, name).items()} == {0: [1, 2, 4]}


def test_generate_proposes_what_kafkas_tool_proposes(cluster: KafkaCluster, state_dir: Path,
                                                     tmp_path: Path) -> None:
    """--generate against Kafka 3.7's own: the same current block, and a proposal from Kafka's algorithm (random
    start and follower shift: Kafka's proposal and ours are each one of the 25 that 5 brokers allow)."""
    name = "generated"
    _create(cluster, name, 7, [1, 2, 3])
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": name}]}))
    possible = {tuple(tuple(r) for _, r in sorted(assign_replicas([1, 2, 3, 4, 5], {}, 7, 3, start=i,
                                                                   shift=j).items()))
                for i in range(5) for j in range(5)}

    def proposal(text: str) -> tuple[str, tuple[tuple[int, ...], ...]]:
        lines = text.splitlines()
        assert lines[0] == "Current partition replica assignment" and lines[3] == (
            "Proposed partition reassignment configuration"), text
        parts = json.loads(lines[4])["partitions"]
        assert [p["partition"] for p in parts] == list(range(7)) and {p["topic"] for p in parts} == {name}
        return lines[1], tuple(tuple(p["replicas"]) for p in parts)

    theirs = cluster.tool("kafka-reassign-partitions.sh", "--bootstrap-server", cluster.bootstrap, "--generate",
                          "--topics-to-move-json-file", str(topics), "--broker-list", "1,2,3,4,5").stdout
    ours = mover_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--generate",
                          "--topics-to-move-json-file", str(topics), "--broker-list", "5,4,3,2,1")
    assert ours.returncode == 0, ours.stdout + ours.stderr
    their_current, their_proposal = proposal(theirs)
    our_current, our_proposal = proposal(ours.stdout)
    assert our_current == their_current
    assert their_proposal in possible, theirs
    assert our_proposal in possible, ours.stdout


def test_progress_table_of_a_reassignment_file(cluster: KafkaCluster, topic: str, state_dir: Path,
                                               tmp_path: Path) -> None:
    """`--progress --reassignment-json-file`: KIP-179's table, where each replica the file names stands on a real
    Kafka 3.7 (each replica's log end offset asked of its own broker as a debugging replica)."""
    _create(cluster, topic, 2, [1, 2])
    prefill(cluster.bootstrap, [(topic, 0), (topic, 1)], 50, pad=100)  # acks=all: both replicas have every record
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2, 3]},
        {"topic": topic, "partition": 1, "replicas": [1, 42]},
        {"topic": topic, "partition": 7, "replicas": [1]},
        {"topic": "no-such-topic", "partition": 0, "replicas": [1]}]}))
    r = mover_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--progress", "--reassignment-json-file",
                       str(f))
    assert r.returncode == 3, r.stdout + r.stderr  # not every replica is in sync: in progress
    rows = [line.split(None, 3) for line in r.stdout.splitlines()[2:]]
    assert rows == [[topic, "0", "1", "In sync"], [topic, "0", "2", "In sync"],
                    [topic, "0", "3", "Broker does not host this partition"],
                    [topic, "1", "1", "In sync"], [topic, "1", "42", "Unknown broker"],
                    [topic, "7", "1", "Unknown partition"], ["no-such-topic", "0", "1", "Unknown topic"]], r.stdout
