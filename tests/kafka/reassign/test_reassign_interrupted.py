"""mover-reassign --execute interrupted on a real Kafka 3.7 (tests/kafka/reassign/conftest.py: a controller and 5
brokers, topics with replication factor 3 and min.insync.replicas=2), with idempotent acks=all producers and
consumers running: Ctrl-C and resume, Ctrl-C twice and a rerun that follows the running step, --cancel mid-way (and
--progress of the running request), a broker killed mid-step and restarted, the only controller killed mid-step.

Afterwards: the assignment is the target (or where --cancel left it), every acknowledged record is read back once,
and no throttle config is left."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import psutil
import pytest

from mover.admin.client import Client, ClientError
from mover.admin.common import ClusterUnavailable
from mover.admin.reassign.kip455 import list_reassignments
from mover.testing.exactly_once import read_back
from mover.testing.kafka_cluster import CONTROLLER_ID, KafkaCluster
from mover.testing.producers import prefill
from mover.testing.reassign_checks import Load, create_topic, partitions, throttles_left
from mover.testing.reassign_process import Lines, mover_reassign, reassignment_file, request_id, start_reassign
from mover.testing.wait import wait_for


def test_ctrl_c_then_resume(cluster: KafkaCluster, topic: str, state_dir: Path, tmp_path: Path) -> None:
    create_topic(cluster, topic, 4, [2, 3, 4])
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
    create_topic(cluster, topic, 1, [2, 3, 4])
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
    create_topic(cluster, topic, 3, [1, 3, 5])
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
    create_topic(cluster, topic, 2, [1, 2, 3])
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
    create_topic(cluster, topic, 2, [1, 2, 3])
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
