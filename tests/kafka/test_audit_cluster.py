"""`mover-audit` against a real Apache Kafka 3.7 cluster (KRaft, JBOD): a controller and three brokers with three log
dirs each, one topic of replication factor 3 filled unevenly by kafka-python (mover/testing/skewed_topic.py, which
tests/kafka/test_balancer_kafka.py fills too); collect -> audit -> plan -> report -> execute while an idempotent
acks=all producer and a consumer keep working.

The skew is Kafka's own (docs/audit.md): a broker spreads new partitions evenly over its dirs by count, and a few
partitions hold most of the bytes; they are chosen from where Kafka put them so that every broker has one disk far
above its mean. The data is not piled with AlterReplicaLogDirs right after the topic is created: on Kafka 3.7.0 a
move started while the broker is still reporting its new replicas' dirs to the controller can leave that broker's
AssignmentsManager without the acknowledgement a future copy waits for, and from then on no move on that broker is
ever swapped in until it restarts (KAFKA-16365, fixed in 3.7.1). Measured here: 3 of 4 piles started at once after
creation left broker 1 so (every later move on it stuck with its copy complete), none of 3 started 20 s later.

While execute runs, a balancer asking for the cluster's lease finds the plan being executed (plan_executing).
During execute a MoveWatcher polls every broker's DescribeLogDirs and DescribeConfigs: each broker with moves must be
seen building future copies while Kafka's own key `replica.alter.log.dirs.io.max.bytes.per.second` holds the run's
throttle, and only then; afterwards each broker has its own back (broker 2 its per-broker value, the others none),
with no other throttle key left behind (Kafka 3.7 stores an unknown key it is sent, kafka-facts).

Broker 3 is killed (-9) once its last move started and its future copy holds its topic id (Kafka 3.7.0 killed
before that does not start again): execute says it does not answer and goes on with the others;
once the controller fenced it, Metadata no longer lists it, and a collect then records it as a failed broker
(fleet.py's `missing`: before, it vanished from the snapshot). It is started again (without root's DAC override, for
the second test), Kafka resumes the interrupted move itself, and execute, asking again at every poll, sees it done.
Afterwards every disk is in band, a second plan is empty, and every acknowledged record is read back exactly once at
its offset, by the consumer that ran through it all and by a fresh one.

The second test makes a log dir of broker 3 unreadable (chmod 000; the broker runs without CAP_DAC_OVERRIDE): Kafka
takes it offline at its next write there (the high-watermark checkpoint, every 5 s), and the next snapshot lists it
with KAFKA_STORAGE_ERROR and no replicas, and audit --fail-on offline exits 3.

Sizes: 24 partitions, 4 of 300-480 KB and 20 of 40-160 KB: about 3.6 MB per broker, 11 MB on disk; each broker
moves up to 1 MB at THROTTLE. Kafka's quota lets about 10 s worth of bytes through before it bites (kafka-facts),
and then paces the copy fetch by fetch (64 KB fetches here), so the later moves last seconds: long enough to be seen.
The first test takes 2-4 minutes on a loaded 2-core machine (Spark and four JVMs, one restarted), hence its timeout.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from kafka.admin import ConfigResource, ConfigResourceType

from mover.admin.client import Client
from mover.audit.balancer import gates
from mover.audit.balancer.lease import ClusterLeases
from mover.audit.cli import main
from mover.audit.collect import MISSING_BROKER
from mover.audit.snapshot import list_snapshots
from mover.config.broker import THROTTLE_KAFKA_KEY, THROTTLE_KEY
from mover.testing.audit_process import AuditProcess
from mover.testing.consumers import PyConsumer, end_offsets, wait_caught_up
from mover.testing.exactly_once import assert_clean, check
from mover.testing.history import TP
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.move_watcher import MoveWatcher
from mover.testing.moverd import SETPRIV
from mover.testing.producers import PyProducer
from mover.testing.skewed_topic import BROKERS, CLUSTER, TOPIC, TPS, admin_configs, fill_unevenly
from mover.testing.throttle_holds import log_dir_holds
from mover.testing.wait import wait_for

KILLED = 3
THROTTLE = 64_000  # B/s, the run's
OWN_THROTTLE = {2: "50000000"}  # broker 2's own per-broker throttle, from before the run
LIVE_RATE = 12  # records per second over all partitions, during execute
LIVE_BYTES = 100
# A broker restart on the loaded 2-core machine takes 15-40 s; execute must keep waiting for it.
STALL_S = 240
EXECUTE_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def cluster(kafka_cluster: Callable[..., KafkaCluster]) -> KafkaCluster:
    # A move copies in fetches of replica.fetch.max.bytes (1 MiB by default: a whole partition here) and the quota
    # is checked between them: smaller fetches let the throttle pace each move, not only the next.
    return kafka_cluster(brokers=3, log_dirs=3, controller=True, props={"replica.fetch.max.bytes": 65536})


def set_own_throttles(cluster: KafkaCluster) -> None:
    admin = cluster.admin()
    try:
        # raise_on_unknown=False: kafka-python's check of the key against DescribeConfigs' "dynamic" filter does not
        # know this dynamic key (the broker takes it).
        result = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(b), configs={THROTTLE_KAFKA_KEY: v})
                                      for b, v in OWN_THROTTLE.items()], incremental=True, raise_on_unknown=False)
    finally:
        admin.close()
    assert all(r == "OK" for r in result["broker"].values()), result


class Execute(AuditProcess):
    """`mover-audit execute` as an operator runs it, in its own process; its output lines as they come."""

    def __init__(self, *args: str) -> None:
        super().__init__("execute", *args, timeout=EXECUTE_TIMEOUT_S)


def planned(plan: Path) -> dict[int, set[TP]]:
    out: dict[int, set[TP]] = {b: set() for b in BROKERS}
    for m in pq.read_table(plan / "moves").to_pylist():
        assert m["cluster"] == CLUSTER
        out[m["broker"]].add((m["topic"], m["partition"]))
    return out


def unswapped(code: int, out: str, total: int) -> list[int]:
    """The brokers whose complete copies execute left unswapped (Kafka 3.7.0's KAFKA-16365), when that is all that
    went wrong in a run of `total` moves: it exited 1 and its last line counts only moves done and those copies.
    Else none."""
    named = re.findall(rf"^not swapped in: \S+ on broker (\d+) of {CLUSTER} has had its copy caught up "
                       r"\(offset lag 0\) .*KAFKA-16365", out, re.M)
    last = re.search(r"^executed: (\d+) done, (\d+) not swapped in$", out, re.M)
    if code != 1 or not named or last is None or (int(last[1]), int(last[2])) != (total - len(named), len(named)):
        return []
    return sorted({int(b) for b in named})


def findings(path: Path) -> dict[str, Any]:
    return json.loads((path / "findings.json").read_text())


@pytest.mark.timeout(900)
def test_collect_audit_plan_execute_report_under_load_with_a_broker_killed(
        cluster: KafkaCluster, tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    acked = fill_unevenly(cluster)
    set_own_throttles(cluster)
    source = ["--bootstrap-server", cluster.bootstrap, "--cluster", CLUSTER]

    assert main(["collect", "--local", *source, "--out", str(tmp_path / "before")]) == 0
    [before] = list_snapshots(tmp_path / "before")
    assert main(["audit", "--snapshot", str(before), "--out", str(tmp_path / "audit-before")]) == 0
    fleet = findings(tmp_path / "audit-before")["fleet"]
    assert fleet["disks"] == 9 and fleet["disks_offline"] == 0 and fleet["disks_out_of_band"] > 0, fleet
    # Planned into a band of +-7% (margin 0.7), audited afterwards at the default +-9%: the records the live producer
    # writes while execute runs land unevenly (a disk planned onto the band's edge was once pushed just past it).
    assert main(["plan", "--snapshot", str(before), "--out", str(tmp_path / "plan"), "--balance-margin", "0.7"]) == 0
    summary = json.loads((tmp_path / "plan" / "summary.json").read_text())
    assert summary["disks_out_of_band_after"] == 0 and summary["moves_dropped_not_in_metadata"] == 0, summary
    moves = planned(tmp_path / "plan")
    assert all(moves.values()), moves
    assert main(["report", "--audit", str(tmp_path / "audit-before"), "--plan", str(tmp_path / "plan"),
                 "--out", str(tmp_path / "report.html")]) == 0
    assert (tmp_path / "report.html").stat().st_size > 0
    capsys.readouterr()

    producer = PyProducer("live", cluster.bootstrap, TPS, rate=LIVE_RATE, pad=LIVE_BYTES)  # idempotent, acks=all
    consumer = PyConsumer("live", cluster.bootstrap, TPS)
    watcher = MoveWatcher("cluster", cluster.bootstrap, brokers=BROKERS, config_key=THROTTLE_KAFKA_KEY,
                          interval=0.1)
    execute = None
    try:
        producer.start()
        consumer.start()
        wait_for(lambda: producer.acked_count() > 0 and consumer.count() > 0, message="first live records")
        watcher.start()
        execute = Execute("--plan", str(tmp_path / "plan"), *source, "--throttle", str(THROTTLE),
                          "--max-moves-per-broker", "1", "--poll-interval", "0.2", "--stall-seconds", str(STALL_S))
        # Killed once its last move started (one at a time per broker): Kafka resumes that move when the broker is
        # back, and no move starts on it while it registers its replicas' dirs with the controller (Kafka 3.7.0
        # can lose a move started then: KAFKA-16365, module docstring).
        def started_on_killed() -> int:
            return sum(bool(re.search(rf"^started {TOPIC}-\d+ on broker {KILLED} of {CLUSTER}", line))
                       for line in execute.lines)

        execute.wait_until(lambda: started_on_killed() == len(moves[KILLED]),
                           f"execute to start every move of broker {KILLED}")
        # A balancer started now, from any machine, finds the plan being executed (execute's share of the cluster's
        # lease in the status topic) and pauses the cluster instead of moving beside it.
        leases = ClusterLeases(lambda _: None)
        with Client(cluster.bootstrap) as client:
            try:
                pause = leases.check(CLUSTER, client)
            finally:
                leases.release()
        assert pause is not None and pause.kind == gates.PLAN_EXECUTING, pause
        assert f"by mover-audit execute pid {execute.proc.pid} " in pause.text, pause
        plan_moves = pq.read_table(tmp_path / "plan" / "moves").to_pylist()
        destinations = {m["partition"]: Path(m["to_dir"]) for m in plan_moves if m["broker"] == KILLED}

        def future_has_topic_id() -> bool:
            """The running move's future dir holds its topic id (partition.metadata), or the move is over. Kafka 3.7.0
            killed between creating a future dir and writing its partition.metadata does not start again: "does not
            have a topic ID, which is not allowed when running in KRaft mode" (LogManager.findStrayReplicas; seen
            once in CI, the kill right after the move was started)."""
            futures = [f for d in cluster.log_dirs(KILLED) for f in d.glob(f"{TOPIC}-*-future")]
            if futures:
                return all((f / "partition.metadata").exists() for f in futures)
            return all((d / f"{TOPIC}-{p}").is_dir() for p, d in destinations.items())

        execute.wait_until(future_has_topic_id, f"broker {KILLED}'s future copy to hold its topic id")
        cluster.kill(KILLED)
        execute.wait_said(rf"^broker {KILLED} of {CLUSTER} does not answer")

        # Once the controller fenced it, Metadata no longer lists it: the snapshot still records it, as failed.
        def fenced() -> bool:
            with Client(cluster.broker(1).address) as client:
                return KILLED not in client.brokers

        wait_for(fenced, message=f"the controller to fence broker {KILLED}")
        assert main(["collect", "--local", *source, "--out", str(tmp_path / "during")]) == 0
        assert "2 broker(s) answered, 1 failed" in capsys.readouterr().out
        [during] = list_snapshots(tmp_path / "during")
        rows = {r["broker"]: r["error"] for r in pq.read_table(during / "brokers").to_pylist()}
        assert rows == {1: None, 2: None, KILLED: MISSING_BROKER}

        cluster.start_broker(KILLED, prefix=SETPRIV)
        code = execute.wait()
        out = execute.output
        print(out)
        watcher.stop()  # what it checks is the run's; a broker restarted below moves without the run's throttle
        total = sum(len(v) for v in moves.values())
        stuck = unswapped(code, out, total)
        if stuck:
            # Kafka 3.7.0 may never swap in a complete copy until its broker restarts (KAFKA-16365, fixed in 3.7.1;
            # docs/kafka-compat.md), on any broker whose move started at the wrong moment: seen once in CI on
            # broker 1, while broker 3 was away. Only that is forgiven: execute named each such copy and nothing
            # else failed; the operator's remedy it prints, restart the broker and run execute again, then ends it.
            print(f"Kafka 3.7.0 left complete copies unswapped on brokers {stuck}; restarting them")
            for b in stuck:
                cluster.restart(b)
            again = Execute("--plan", str(tmp_path / "plan"), *source, "--throttle", str(THROTTLE),
                            "--max-moves-per-broker", "1", "--poll-interval", "0.2", "--stall-seconds", str(STALL_S))
            try:
                code = again.wait()
            finally:
                again.close()
            print(again.output)
            assert code == 0, again.output
            assert re.search(r"^executed: (\d+ (done|already done)(, |$))+", again.output, re.M), again.output
        else:
            assert code == 0, out
            assert f"executed: {total} done" in out, out
        assert re.search(rf"^broker {KILLED} of {CLUSTER} answers again", out, re.M), out
        producer.stop()

        ok, failed = producer.snapshot()
        assert not failed, f"{len(failed)} records failed, e.g. {failed[:3]}"
        assert len(ok) == producer.sent
        moving = watcher.written_while_moving(ok)
        print(f"{len(ok)} acked during the run, {len(moving)} to a partition while it was being moved")
        assert moving, "no record was written to a partition while it was being moved"
        for b in BROKERS:
            seen = watcher.moved(b)
            assert seen and seen <= moves[b], f"broker {b}: moves seen {seen}, planned {moves[b]}"
            # While it built future copies, the broker held the run's throttle under Kafka's own key. A copy left
            # unswapped (above) is still a future copy once execute has ended and given the broker its own throttle
            # back (none, or broker 2's), until the watcher stops: seen so in a run of the Kafka tests.
            after_run = {None, OWN_THROTTLE.get(b)} if b in stuck else set()
            seen_configs = watcher.configs_while_moving(b)
            assert str(THROTTLE) in seen_configs and seen_configs - {str(THROTTLE)} <= after_run, (b, seen_configs)
        acked += ok
        ends = end_offsets(cluster.bootstrap, TPS)
        wait_caught_up([consumer], ends)
        assert_clean(check("consumer through the run", consumer.stop(), ends, acked))
    finally:
        if execute is not None:
            execute.close()
        watcher.close()
        producer.close()
        consumer.close()
        if not cluster.broker(KILLED).running:
            cluster.start_broker(KILLED, prefix=SETPRIV)

    # Each broker's own throttle is back: broker 2's per-broker value, no per-broker value on the others, and no
    # stray key anywhere.
    configs = admin_configs(cluster)
    for b in BROKERS:
        throttles = {k: v for k, v in configs[b].items() if k in (THROTTLE_KAFKA_KEY, THROTTLE_KEY)}
        want = {THROTTLE_KAFKA_KEY: (OWN_THROTTLE[b], "DYNAMIC_BROKER_CONFIG")} if b in OWN_THROTTLE else {}
        assert {k: (v, src.rsplit(".", 1)[-1]) for k, (v, src) in throttles.items()} == want, (b, configs[b])
    assert not (tmp_path / "plan" / "execute-state.json").exists()
    # The originals were held in the cluster's status topic, and every hold has ended.
    assert log_dir_holds(cluster.bootstrap) == {}

    assert main(["collect", "--local", *source, "--out", str(tmp_path / "after")]) == 0
    [after] = list_snapshots(tmp_path / "after")
    assert main(["audit", "--snapshot", str(after), "--out", str(tmp_path / "audit-after")]) == 0
    fleet = findings(tmp_path / "audit-after")["fleet"]
    assert fleet["disks"] == 9 and fleet["moves_in_progress"] == 0, fleet
    assert fleet["disks_out_of_band"] == 0, findings(tmp_path / "audit-after")["worst_brokers"]
    assert main(["plan", "--snapshot", str(after), "--out", str(tmp_path / "plan-again")]) == 0
    assert json.loads((tmp_path / "plan-again" / "summary.json").read_text())["moves"] == 0

    # A fresh consumer: every acknowledged record at its offset, and nothing nobody got an ack for.
    ends = end_offsets(cluster.bootstrap, TPS)
    fresh = PyConsumer("after", cluster.bootstrap, TPS).start()
    try:
        wait_caught_up([fresh], ends)
    finally:
        consumed = fresh.stop()
    assert sum(ends.values()) == len(acked)
    assert_clean(check("fresh consumer", consumed, ends, acked))


def test_an_unreadable_log_dir_is_offline_in_the_next_snapshot(cluster: KafkaCluster, tmp_path: Path,
                                                               spark: Any) -> None:
    node = cluster.broker(KILLED)
    if node.prefix != SETPRIV:
        # Root reads a chmod 000 dir anyway: the broker must run without DAC override (the first test restarted
        # it so; run alone, this one does).
        cluster.stop_broker(KILLED)
        cluster.start_broker(KILLED, prefix=SETPRIV)
    bad = cluster.log_dirs(KILLED)[2]
    source = ["--bootstrap-server", cluster.bootstrap, "--cluster", CLUSTER]
    bad.chmod(0)
    try:
        with Client(cluster.bootstrap) as client:
            def offline() -> bool:
                from mover.admin.log_dir_state import describe_broker

                return any(d.path == str(bad) and d.error_code for d in describe_broker(client, KILLED))

            # Kafka finds out at its next write there: the high-watermark checkpoint, every 5 s.
            wait_for(offline, message=f"{bad} to go offline")
        assert main(["collect", "--local", *source, "--out", str(tmp_path / "snap")]) == 0
        [snap] = list_snapshots(tmp_path / "snap")
        dirs = {(r["broker"], r["log_dir"]): r for r in pq.read_table(snap / "log_dirs").to_pylist()}
        assert len(dirs) == 9
        row = dirs[(KILLED, str(bad))]
        assert row["error"] == "KAFKA_STORAGE_ERROR" and row["total_bytes"] is None, row
        assert [k for k, r in dirs.items() if r["error"] is not None] == [(KILLED, str(bad))]
        replicas = pq.read_table(snap / "replicas").to_pylist()
        assert not [r for r in replicas if r["log_dir"] == str(bad)]
        assert main(["audit", "--snapshot", str(snap), "--out", str(tmp_path / "audit"),
                     "--fail-on", "offline"]) == 3
        assert findings(tmp_path / "audit")["fleet"]["disks_offline"] == 1
    finally:
        bad.chmod(0o755)


def test_only_copies_left_unswapped_and_named_so_are_forgiven() -> None:
    # The lines of the CI run that met KAFKA-16365 on broker 1 (2026-12-07), around what decides.
    said = (f"not swapped in: skew-21 on broker 1 of {CLUSTER} has had its copy caught up (offset lag 0) 240 s ago; "
            "Kafka 3.7.0 leaves copies so after KAFKA-16365 (fixed in 3.7.1) and swaps them in when broker 1 "
            "restarts; this run waits for it no longer")
    summary = (f"not swapped in: skew-21 on broker 1 of {CLUSTER}: its copy in /k/node-1/d3 has been complete "
               "(offset lag 0) for 240 s; restart broker 1 to swap it in, then run execute again")
    out = "\n".join([f"done skew-4 on broker 1 of {CLUSTER} in 5.7 s", said, summary,
                     "executed: 11 done, 1 not swapped in"])
    assert unswapped(1, out, 12) == [1]
    assert unswapped(0, out, 12) == []  # not a failure
    assert unswapped(1, out, 13) == []  # a move unaccounted for
    assert unswapped(1, out.replace("executed: 11 done, 1 not swapped in", "executed: 10 done, 1 failed, 1 not "
                                                                            "swapped in"), 12) == []
    assert unswapped(1, out.replace(said, ""), 12) == []  # not named as Kafka's bug
