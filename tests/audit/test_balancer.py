"""mover-audit balance against fake Kafka brokers (mover/testing/fake_kafka/) and a real moverd: the loop brings
skewed disks into band and leaves no throttle; it pauses, saying why, on an offline dir, someone else's log-dir move
or reassignment, produce latency above the bound, and resumes after; a stop finishes (first signal) or cancels
(second) the moves in flight, and puts the throttles back; a balancer killed mid-plan is resumed by the next."""

from __future__ import annotations

import io
import os
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from mover.admin.client import Client
from mover.admin.limits import DiskLimits, RunLimits
from mover.admin.reassign import status_store
from mover.admin.reassign.steps import Limits
from mover.audit import planner
from mover.audit.balance import Thresholds
from mover.audit.balancer import gates
from mover.audit.balancer.canary import Canary
from mover.audit.balancer.lease import LEASE
from mover.audit.balancer.loop import FINISHED, Balancer, Settings
from mover.audit.balancer.unswapped import NOTE
from mover.audit.cli import build_parser, main
from mover.audit.errors import AuditError
from mover.audit.fleet import ClusterSource
from mover.cli.common import EXIT_INTERRUPTED
from mover.config.broker import CORDONED_KEY, THROTTLE_KAFKA_KEY
from mover.testing.execute_plan import execute, where, write_plan
from mover.testing.fake_kafka import KAFKA_3_9, KAFKA_4_3, FakeCluster, KafkaVersion, Move
from mover.testing.moverd import Moverd
from mover.testing.throttle_holds import log_dir_holds
from mover.testing.wait import wait_for

DIRS = ["/d1", "/d2", "/d3"]
# Broker 0's replicas all on /d1 (Kafka places by count, not size: this is what it leaves); broker 1 balanced.
SIZES = [4000, 3000, 2000, 2000, 1000, 1000, 1000, 1000, 500, 500]


def skewed(brokers: int = 2, version: KafkaVersion = KAFKA_3_9) -> FakeCluster:
    cluster = FakeCluster(version, brokers=brokers, dirs=DIRS, move_step=250)
    for b in range(brokers):
        for p, size in enumerate(SIZES):
            cluster.add_replica(b, "/d1" if b == 0 else DIRS[p % 3], f"t{b}", p, size)
    return cluster


def settings(tmp_path: Path, **kw: Any) -> Settings:
    base: dict[str, Any] = dict(
        rules=planner.Rules(Thresholds(0.8, 1.10, 1.0)), state_dir=tmp_path / "state",
        limits=RunLimits(Limits(), 5000, DiskLimits(1, 2, 10)), interval_s=0.01, check_s=0.0, poll_s=0.002,
        max_cycles=4, settle_s=0.2)
    base.update(kw)
    return Settings(**base)


def balancer(cluster: FakeCluster, tmp_path: Path, spark: Any, on_line: Callable[[Balancer, str], None] | None = None,
             **kw: Any) -> tuple[Balancer, list[str]]:
    lines: list[str] = []
    holder: list[Balancer] = []

    def say(text: str) -> None:
        lines.append(text)
        if on_line is not None:
            on_line(holder[0], text)

    b = Balancer([ClusterSource("east", bootstrap=cluster.bootstrap)], settings(tmp_path, **kw), lambda: spark, say)
    holder.append(b)
    return b, lines


def usage(cluster: FakeCluster, broker: int) -> dict[str, int]:
    with cluster.lock:
        return {d: sum(cluster.brokers[broker].replicas[d].values()) for d in DIRS}


def in_band(used: dict[str, int], band: float = 0.10) -> bool:
    mean = sum(used.values()) / len(used)
    return all(abs(u - mean) <= band * mean for u in used.values())


@pytest.mark.timeout(300)
def test_skewed_disks_come_into_band_and_no_throttle_is_left(tmp_path: Path, spark: Any) -> None:
    cluster = skewed()
    assert not in_band(usage(cluster, 0))
    with cluster:
        b, lines = balancer(cluster, tmp_path, spark, max_cycles=3)
        b.run()
    text = "\n".join(lines)
    assert in_band(usage(cluster, 0)), (usage(cluster, 0), text)
    assert in_band(usage(cluster, 1))
    assert "cycle 1: 5 disk(s) out of band; 6 move(s)" in text, text
    assert "nothing to move (0 disk(s) out of band)" in text
    assert b.moved_bytes > 0
    for broker in cluster.brokers.values():
        assert broker.configs == {}  # the run's throttle gone
        assert not broker.moves
    # Observed on the broker: the throttle was set while moving, and taken away after.
    assert cluster.brokers[0].config_history[0] == (THROTTLE_KAFKA_KEY, "5000")
    assert cluster.brokers[0].config_history[-1] == (THROTTLE_KAFKA_KEY, None)
    metrics = generate_latest(b.metrics.registry).decode()
    assert 'balance_disks_out_of_band{cluster="east"} 0.0' in metrics
    assert f'balance_bytes_moved_total{{cluster="east"}} {float(b.moved_bytes)}' in metrics
    assert 'balance_last_cycle_result{result="balanced"} 1.0' in metrics
    assert 'balance_paused{cluster="east",reason="dir_offline"} 0.0' in metrics


@pytest.mark.timeout(300)
def test_an_offline_dir_pauses_and_the_balancer_resumes_after(tmp_path: Path, spark: Any) -> None:
    cluster = skewed()
    cluster.brokers[1].offline.add("/d3")
    seen: list[str] = []

    def on_line(b: Balancer, text: str) -> None:
        if text.startswith("paused east"):
            seen.append(generate_latest(b.metrics.registry).decode())
            with cluster.lock:  # the operator replaces the disk
                cluster.brokers[1].offline.clear()

    with cluster:
        b, lines = balancer(cluster, tmp_path, spark, on_line, max_cycles=3)
        b.run()
    text = "\n".join(lines)
    assert lines[0] == "paused east: log dir /d3 of broker 1 is offline (KAFKA_STORAGE_ERROR)", text
    assert 'balance_paused{cluster="east",reason="dir_offline"} 1.0' in seen[0]
    assert lines[1] == "resumed east", text
    # No move began while paused: the first start comes after the resume.
    assert min(i for i, line in enumerate(lines) if line.startswith("started ")) > 1
    assert in_band(usage(cluster, 0)), text


@pytest.mark.timeout(300)
def test_a_pause_mid_cycle_lets_the_running_moves_end_and_leaves_the_rest_to_a_fresh_plan(
        tmp_path: Path, spark: Any) -> None:
    cluster = skewed()
    failed: list[bool] = []

    def on_line(b: Balancer, text: str) -> None:
        with cluster.lock:
            if text.startswith("started ") and not failed:
                failed.append(True)
                cluster.brokers[1].offline.add("/d3")  # a disk fails while the first moves run
            elif text.startswith("executed: "):  # the end of cycle 1: the disk is replaced
                cluster.brokers[1].offline.clear()

    with cluster:
        b, lines = balancer(cluster, tmp_path, spark, on_line, max_cycles=4)
        b.run()
    text = "\n".join(lines)
    paused = lines.index("paused east: log dir /d3 of broker 1 is offline (KAFKA_STORAGE_ERROR)")
    first = [i for i, line in enumerate(lines) if line.startswith("started ")]
    done = [i for i, line in enumerate(lines) if line.startswith("done ")]
    cycle2 = next(i for i, line in enumerate(lines) if line.startswith("cycle 2"))
    # The moves running when it paused ended; none started until the next cycle's plan.
    assert [i for i in first if i < cycle2] and all(i < paused for i in first if i < cycle2), text
    assert len([i for i in done if i < cycle2]) == len([i for i in first if i < cycle2]), text
    assert "4 move(s) of east left to the next cycle's plan" in text and "executed: 1 done, 4 skipped, 1 failed" in text
    assert paused < lines.index("resumed east") < cycle2, text
    assert in_band(usage(cluster, 0)), text


@pytest.mark.timeout(300)
def test_a_cordoned_dir_takes_nothing_and_the_limits_file_is_read(tmp_path: Path, spark: Any) -> None:
    cluster = skewed(version=KAFKA_4_3)
    cluster.brokers[0].configs[CORDONED_KEY] = "/d2"
    # The cordoned dir leaves broker 0's average: its 16,000 bytes on two disks. Broker 1 holds as much per disk on
    # three, so that the cluster is in band and nothing moves between brokers here.
    for p, d in enumerate(DIRS):
        cluster.add_replica(1, d, "t1", 10 + p, 8000 // 3)
    limits = tmp_path / "limits.toml"
    limits.write_text("throttle = 7777\nmax_moves_per_broker = 1\n")
    with cluster:
        b, lines = balancer(cluster, tmp_path, spark, max_cycles=3, limits_path=limits)
        b.run()
    text = "\n".join(lines)
    started = [line for line in lines if line.startswith("started t0-")]
    assert started and not any(line.split(": ", 1)[1].startswith("/d1 -> /d2") for line in started), text
    used = usage(cluster, 0)
    assert used["/d2"] == 0 and in_band({d: used[d] for d in ("/d1", "/d3")}), (used, text)
    assert cluster.brokers[0].config_history[0] == (THROTTLE_KAFKA_KEY, "7777"), text  # the file's, not 5000
    assert "cycle 2: nothing to move (0 disk(s) out of band)" in text  # the cordoned dir has no band
    assert cluster.peak("broker") == 1
    assert "limits: at most 1 move(s) per disk, 1 per broker, 10 per cluster; throttle 7777 B/s (7.6 KiB/s)" in text


@pytest.mark.timeout(300)
def test_a_broker_above_its_clusters_band_sends_replicas_to_the_other_without_pausing_itself(
        tmp_path: Path, spark: Any) -> None:
    """Broker 0 holds 6,000 bytes per disk, broker 1 1,500: broker 0's disks together are above the cluster's band,
    so the plan moves three of its replicas to broker 1, one into each of its dirs, on the step engine. The fake
    creates each new replica in its broker's first dir and moves it to the planned one (a future copy, as Kafka
    does when it created the replica before it saw the dir): the balancer's own move, which never pauses it."""
    cluster = FakeCluster(KAFKA_3_9, brokers=2, dirs=DIRS, move_step=250)
    for p in range(9):
        cluster.add_replica(0, DIRS[p % 3], "t0", p, 2000)
        cluster.add_replica(1, DIRS[p % 3], "t1", p, 500)
    with cluster:
        b, lines = balancer(cluster, tmp_path, spark, max_cycles=3)
        b.run()
    text = "\n".join(lines)
    assert not any(line.startswith("paused") for line in lines), text
    assert lines[-1].endswith("nothing to move (0 disk(s) out of band)"), text
    assert sum(usage(cluster, 0).values()) == 12_000 and usage(cluster, 1) == {d: 3500 for d in DIRS}, text


@pytest.mark.timeout(300)
def test_a_broker_down_pauses_until_it_is_back(tmp_path: Path, spark: Any) -> None:
    cluster = skewed()

    def on_line(b: Balancer, text: str) -> None:
        if text.startswith("paused east: broker(s) 1"):
            with cluster.lock:
                cluster.brokers[1].fenced = False
            cluster.brokers[1].start()

    with cluster:
        cluster.brokers[1].fence()
        b, lines = balancer(cluster, tmp_path, spark, on_line, max_cycles=3)
        b.run()
    text = "\n".join(lines)
    assert lines[0] == "paused east: broker(s) 1 not among the live brokers (down or fenced)", text
    assert lines[1].startswith("paused east: a broker that was down answers again: no move starts for 0.2 s"), text
    assert lines[2] == "resumed east", text
    assert in_band(usage(cluster, 0)), text


@pytest.mark.timeout(300)
def test_someone_elses_log_dir_move_and_reassignment_pause_it(tmp_path: Path, spark: Any) -> None:
    cluster = skewed()
    with cluster.lock:
        cluster.brokers[1].moves[("t1", 0)] = Move("t1", 0, "/d1", "/d2", 4000, copied=3750)
        cluster.brokers[1].paused = True  # it makes no progress until the test lets it
        cluster.reassigning[("t1", 1)] = ([1], [1], 0)
        cluster.reassign_polls = 10**6

    def on_line(b: Balancer, text: str) -> None:
        with cluster.lock:
            if text.startswith("paused east: 1 partition reassignment"):
                cluster.reassigning.clear()
            elif text.startswith("paused east: 1 log-dir move"):
                cluster.brokers[1].paused = False

    with cluster:
        b, lines = balancer(cluster, tmp_path, spark, on_line, max_cycles=6)
        b.run()
    text = "\n".join(lines)
    assert lines[0] == ("paused east: 1 partition reassignment(s) running that the balancer did not start: t1-1"), text
    assert lines[1] == ("paused east: 1 log-dir move(s) running that the balancer did not start: t1-0 on broker 1 "
                        "to /d2"), text
    assert lines[2] == "resumed east", text
    assert in_band(usage(cluster, 0)), text


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signals", [1, 2])
def test_a_stop_mid_cycle_finishes_or_cancels_the_moves_and_restores_the_throttle(
        tmp_path: Path, spark: Any, signals: int) -> None:
    cluster = skewed()

    def on_line(b: Balancer, text: str) -> None:
        if text.startswith("started ") and b.signals < signals:
            for _ in range(signals - b.signals):
                try:
                    b.interrupt()
                except KeyboardInterrupt:  # the second signal, raised in the handler as execute's is
                    raise

    with cluster:
        b, lines = balancer(cluster, tmp_path, spark, on_line, max_cycles=5)
        b.run()
    text = "\n".join(lines)
    assert b.cycles == 1, text
    started = [i for i, line in enumerate(lines) if line.startswith("started ")]
    stop = next(i for i, line in enumerate(lines) if line.startswith(("stopping", "cancelled")))
    assert started and max(started) < stop, text  # nothing started after the stop
    done = [line for line in lines if line.startswith("done ")]
    if signals == 1:
        assert lines[stop] == (f"stopping: starting no more moves, finishing the {len(started)} in flight (signal "
                               f"again to cancel them)"), text
        assert len(done) == len(started), text
    else:
        assert lines[stop].startswith(f"cancelled {len(started)} move(s) in flight on east: "), text
        assert not done, text
    for broker in cluster.brokers.values():
        assert not broker.moves  # no copy left building
        assert broker.configs == {}
    assert "throttle removed on brokers 0,1 of east" in text, text


@pytest.mark.timeout(300)
def test_a_second_balancer_on_the_cluster_is_a_standby_until_the_first_stops(tmp_path: Path, spark: Any) -> None:
    """Two balancers with state dirs of their own (as on two machines) over one cluster: the lease in the cluster
    lets one act; the other pauses naming it, starts nothing, and takes the cluster over once the first stops."""
    cluster = skewed()
    with cluster:
        first, _ = balancer(cluster, tmp_path / "first", spark)
        with Client(cluster.bootstrap) as client:
            assert first.leases.check("east", client) is None  # the first holds the cluster (as its gate does)

        def on_line(b: Balancer, text: str) -> None:
            if text.startswith("paused east: another balancer"):
                first.leases.release()  # the first stops

        second, lines = balancer(cluster, tmp_path / "second", spark, on_line, max_cycles=3)
        second.run()
    text = "\n".join(lines)
    assert lines[0].startswith(f"paused east: another balancer holds this cluster: mover-audit balance pid "
                               f"{os.getpid()}"), text
    assert lines[1] == "resumed east", text  # nothing was started before
    assert in_band(usage(cluster, 0)), text


@pytest.mark.timeout(300)
def test_an_execute_and_a_balancer_never_move_one_cluster_at_once(tmp_path: Path, spark: Any,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """mover-audit execute holds the cluster's lease shared while it runs (balancer/lease.py): while a balancer
    holds it, an execute is refused in one line and changes nothing; while an execute runs, a balancer pauses the
    cluster naming it (plan_executing), starts nothing, and balances once the run ends."""
    cluster = skewed()
    plan = write_plan(tmp_path / "plan", [{"cluster": "east", "broker": 0, "topic": "t0", "partition": 9,
                                          "from_dir": "/d1", "to_dir": "/d3", "size_bytes": 500, "step": 0}])
    with cluster:
        first, _ = balancer(cluster, tmp_path / "first", spark)
        with Client(cluster.bootstrap) as client:
            assert first.leases.check("east", client) is None
        rc, said = execute(cluster, plan, "--dry-run")  # says so, changing nothing
        assert rc == 0 and (f"cluster east: a balancer moves its replicas (mover-audit balance pid {os.getpid()} "
                            in said) and "execute would be refused until it stops" in said, said
        code = main(["execute", "--plan", str(plan), "--bootstrap-server", cluster.bootstrap, "--cluster", "east"])
        err = capsys.readouterr().err
        assert code == 1
        assert err.startswith(f"mover-audit: error: cluster east: a balancer moves its replicas (mover-audit balance "
                              f"pid {os.getpid()}") and err.count("\n") == 1, err
        assert usage(cluster, 0)["/d1"] == sum(SIZES) and not cluster.running_moves()
        first.leases.release()

        cluster.brokers[0].paused = True  # the execute's move waits until the balancer has paused
        result: list[tuple[int, str]] = []
        running = threading.Thread(target=lambda: result.append(execute(cluster, plan)), daemon=True)
        running.start()
        wait_for(cluster.running_moves, message="the execute's move")

        def on_line(b: Balancer, text: str) -> None:
            if text.startswith("paused east: a plan is being carried out"):
                assert len(cluster.running_moves()) == 1  # the balancer started nothing
                cluster.brokers[0].paused = False

        second, lines = balancer(cluster, tmp_path / "second", spark, on_line, max_cycles=3)
        second.run()
        running.join(60)
    text = "\n".join(lines)
    assert lines[0].startswith(f"paused east: a plan is being carried out on this cluster by mover-audit execute "
                               f"pid {os.getpid()}"), text
    assert lines[1] == "resumed east", text
    assert result and result[0][0] == 0, result
    assert where(cluster, 0, "t0", 9) == "/d3"
    assert in_band(usage(cluster, 0)), text


@pytest.mark.timeout(120)
def test_an_execute_whose_share_a_balancer_took_over_starts_no_more_moves(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An execute whose heartbeats read 3 periods late (a frozen host) loses its share of the lease to a balancer:
    it says so, starts no more moves, lets the running one end, and exits as interrupted."""
    monkeypatch.setenv("MOVER_REASSIGN_HEARTBEAT_S", "0.2")
    cluster = skewed()
    plan = write_plan(tmp_path / "plan", [
        {"cluster": "east", "broker": 0, "topic": "t0", "partition": p, "from_dir": "/d1", "to_dir": "/d3",
         "size_bytes": SIZES[p], "step": 0} for p in (8, 9)])
    out = io.StringIO()
    with cluster:
        cluster.brokers[0].paused = True
        result: list[tuple[int, str]] = []
        running = threading.Thread(target=lambda: result.append(execute(cluster, plan, "--max-moves", "1", out=out)),
                                   daemon=True)
        running.start()
        wait_for(cluster.running_moves, message="the execute's first move")
        with Client(cluster.bootstrap) as client:
            # A balancer whose clock reads the execute's heartbeats as late as a frozen host's takes the cluster.
            late = status_store.StatusStore(client, tool="mover-audit balance",
                                            clock=lambda: int(time.time() * 1000) + 60_000)
            rid, holder = late.claim_lease(LEASE)
            assert rid is not None and holder is None
            wait_for(lambda: "a balancer took cluster(s) east over while this run's heartbeats were late: starting "
                             "no more moves; the running ones end" in out.getvalue(), message="the execute to stop")
        cluster.brokers[0].paused = False
        running.join(60)
    assert result and result[0][0] == EXIT_INTERRUPTED, out.getvalue()
    assert sorted(where(cluster, 0, "t0", p) for p in (8, 9)) == ["/d1", "/d3"], out.getvalue()  # one moved


@pytest.mark.timeout(300)
def test_a_killed_balancer_is_resumed_by_the_next_and_its_throttle_put_back(tmp_path: Path, spark: Any,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = skewed()
    holding: list[Any] = []

    class Killed(BaseException):
        pass

    def on_line(b: Balancer, text: str) -> None:
        if text.startswith("started "):
            assert b.executor is not None
            holding.extend([*b.executor.throttles._stores.values(), *b.leases._held.values()])
            raise Killed  # as kill -9: nothing of the balancer's own clean-up runs

    with cluster:
        b, _ = balancer(cluster, tmp_path, spark, on_line)
        with pytest.raises(Killed):
            b.run()
        assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "5000"} and cluster.brokers[0].moves
        # What kill -9 leaves in the cluster: the run's request holding the throttle, its heartbeat stopped, its
        # process gone (a balancer started again on this host takes it over at once).
        assert holding and log_dir_holds(cluster.bootstrap) == {0: {}, 1: {}}
        for store in holding:
            store._stop_heartbeat()
        monkeypatch.setattr(status_store, "process_gone", lambda owner: True)
        b2, lines = balancer(cluster, tmp_path, spark, max_cycles=2)
        b2.run()
    text = "\n".join(lines)
    assert lines[0].startswith("resuming the unfinished plan "), text
    assert lines[1].startswith("already running: t0-"), text  # the killed run's move, adopted
    assert in_band(usage(cluster, 0)), text
    assert cluster.brokers[0].configs == {} and not cluster.brokers[0].moves
    assert ("taking over the throttle of brokers 0,1 of east from an earlier run of this plan (mover-audit balance "
            "pid") in text, text


@pytest.mark.timeout(300)
def test_a_throttle_a_cycle_could_not_put_back_is_put_back_before_the_next_reads_it(tmp_path: Path,
                                                                                     spark: Any) -> None:
    cluster = skewed()
    stopped: list[bool] = []

    def on_line(b: Balancer, text: str) -> None:
        if text.startswith("throttle set to") and not stopped:
            stopped.append(True)
            cluster.brokers[0].stop()  # down after its throttle was set, before a move started: the cycle ends
        elif text.startswith("cannot remove the throttle on broker 0"):
            cluster.brokers[0].start()

    with cluster:
        b, lines = balancer(cluster, tmp_path, spark, on_line, max_cycles=3)
        b.run()
    text = "\n".join(lines)
    assert "cannot remove the throttle on broker 0 of east" in text, text
    # The next cycle found the first one's throttle on broker 0: not the broker's own, but a leftover put back.
    assert "has its own throttle" not in text, text
    assert text.count("taking over the throttle of brokers 0 of east") == 1, text
    # Put back, the first cycle is finished: the later cycles do not look at it again.
    assert all((d / FINISHED).exists() for d in (tmp_path / "state").glob("cycle-*") if (d / "plan").exists()), text
    assert in_band(usage(cluster, 0)), text
    assert cluster.brokers[0].configs == {} and not cluster.brokers[0].moves, text


def test_the_canary_measures_acks_all_produces_and_pauses_above_the_bound(tmp_path: Path) -> None:
    with Moverd(tmp_path, n_dirs=2) as broker:
        source = ClusterSource("one", bootstrap=broker.bootstrap)
        canary = Canary(source, broker.bootstrap, topic="canary")
        with Client(broker.bootstrap) as client:  # no p99 yet: no move may start on an unknown latency
            assert gates.check(client, [0], [], set(), canary, 10_000.0) == gates.Pause(
                gates.PRODUCE_LATENCY, "waiting for the canary's first 5 produces")
        for _ in range(5):
            assert canary.produce_one() > 0
        assert canary.created and canary.sent == 5
        assert canary.p99_ms() is not None
        with Client(broker.bootstrap) as client:
            assert gates.check(client, [0], [], set(), canary, 10_000.0) is None
            pause = gates.check(client, [0], [], set(), canary, 0.0001)
        assert pause is not None and pause.kind == gates.PRODUCE_LATENCY
        assert pause.text.startswith("produce p99 ") and "is above 0.0001 ms" in pause.text
        canary.stop()


def test_the_command_line_and_its_metrics_endpoint(tmp_path: Path, spark: Any) -> None:
    cluster = skewed()
    from mover.audit.balancer import command
    from mover.testing.ports import free_port

    port = free_port()
    argv = ["balance", "--bootstrap-server", "", "--cluster", "east", "--state-dir", str(tmp_path / "s"),
            "--band", "10%", "--max-cycles", "2", "--interval", "0.01", "--poll-interval", "0.002",
            "--metrics-listener", f"http://127.0.0.1:{port}"]
    with cluster:
        argv[2] = cluster.bootstrap
        parser, _ = build_parser(argv)
        args = parser.parse_args(argv)
        out = io.StringIO()
        scraped: list[str] = []

        class Out(io.StringIO):
            def write(self, s: str) -> int:
                if s.startswith("cycle 2"):
                    scraped.append(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode())
                return out.write(s)

        assert command.run(args, Out()) == 0
    text = out.getvalue()
    assert text.startswith("metrics on http://127.0.0.1:"), text
    assert "balancing east: band +-10.0% of each broker's average" in text
    assert "stopped after 2 cycle(s)" in text
    assert 'balance_cycles_total{result="moved"} 1.0' in scraped[0], scraped
    assert in_band(usage(cluster, 0))


@pytest.mark.parametrize("band, message", [("0%", "above 0%"), ("five", "expected a percentage")])
def test_a_bad_band_is_a_usage_error(band: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from mover.audit.cli import main

    assert main(["balance", "--bootstrap-server", "127.0.0.1:1", "--state-dir", "x", "--band", band]) == 2
    assert message in capsys.readouterr().err


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    from mover.audit.cli import main

    assert main(["balance", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "every disk within avg x (1 +- PCT) of its broker's average usage (default 5%)" in text
    assert "--max-produce-p99-ms" in text and "--metrics-listener" in text and "--state-dir" in text


def test_the_canarys_record_batch_reads_back_in_an_independent_decoder() -> None:
    from kafka.record.default_records import DefaultRecordBatch

    from mover.audit.balancer.canary import p99, record_batch

    batch = DefaultRecordBatch(record_batch(b"x" * 300, 1_700_000_000_123))  # kafka-python's reader
    assert batch.validate_crc() and batch.magic == 2 and batch.producer_id == -1
    [record] = list(batch)
    assert record.value == b"x" * 300 and record.key is None and record.timestamp == 1_700_000_000_123
    assert p99([1.0] * 4) is None and p99([float(i) for i in range(1, 101)]) == 99.0


def test_a_reassignment_only_zookeeper_knows_of_pauses_it(zookeeper: Any) -> None:
    """A ZooKeeper-mode cluster's `/admin/reassign_partitions` (what a controller before Kafka 2.4 carries out, and
    no API of its brokers lists) pauses the balancer as a listed reassignment does; once the znode is gone (the
    controller deletes it when done), nothing pauses it; one of its own moves between brokers never does."""
    from mover.admin.common import TopicPartitionReplica
    from mover.storage.names import TopicPartition
    from mover.testing.zk_cluster import new_chroot, zk_client
    from mover.zk import znodes

    cluster = skewed()
    connect = new_chroot(zookeeper)
    with cluster, Client(cluster.bootstrap) as client, zk_client(connect) as zk:
        assert gates.check(client, [0, 1], [], set(), zookeeper=connect) is None
        zk.create(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment(
            [znodes.ReassignmentEntry(TopicPartition("t1", 3), (1,), None)]), makepath=True)
        assert gates.check(client, [0, 1], [], set()) is None  # the brokers alone do not know of it
        pause = gates.check(client, [0, 1], [], set(), zookeeper=connect)
        assert pause == gates.Pause(gates.REASSIGNMENT, "1 partition reassignment(s) running that the balancer did "
                                                        "not start: t1-3")
        assert gates.check(client, [0, 1], [], {(TopicPartitionReplica("t1", 3, 0), "/d1")}, zookeeper=connect) \
            is None
        zk.delete(znodes.REASSIGN_PARTITIONS)
        assert gates.check(client, [0, 1], [], set(), zookeeper=connect) is None


@pytest.mark.timeout(300)
def test_copies_a_broker_never_swaps_in_end_the_cycle_and_leave_the_broker_out_until_it_restarts(
        tmp_path: Path, spark: Any) -> None:
    # Kafka 3.7.0's KAFKA-16365 on broker 0: every copy completes and is never swapped in until the broker restarts.
    # The cycle names the copy and ends (a restart is the operator's); the next cycles neither pause on that copy
    # (the balancer started it) nor send broker 0 more moves, and take broker 0 back once it swapped the copy in.
    cluster = skewed()
    restarted: list[str] = []

    def on_line(b: Balancer, text: str) -> None:
        if text.startswith("leaving broker(s) 0 of east out") and not restarted:
            restarted.append(text)
            cluster.brokers[0].unswapped = False  # the operator restarts broker 0: it swaps the copy in

    with cluster:
        cluster.brokers[0].unswapped = True
        b, lines = balancer(cluster, tmp_path, spark, on_line, max_cycles=5, stall_s=0.2)
        worker = threading.Thread(target=b.run, daemon=True)
        worker.start()
        worker.join(240)
        assert not worker.is_alive(), "\n".join(lines)
    text = "\n".join(lines)
    named = re.findall(r"not swapped in: (t0-\d+) on broker 0 of east has had its copy caught up", text)
    assert len(named) == 1, text  # one copy, then no other move on broker 0 until it restarted
    assert "paused east" not in text, text
    assert restarted and named[0] in restarted[0], text
    assert "broker 0 of east has no copy left unswapped" in text, text
    assert in_band(usage(cluster, 0)) and in_band(usage(cluster, 1)), text
    assert not b.left, b.left


@pytest.mark.timeout(300)
def test_what_the_balancer_leaves_says_which_brokers_to_restart_and_the_next_holder_knows_it(tmp_path: Path,
                                                                                            spark: Any) -> None:
    cluster = skewed()
    with cluster:
        cluster.brokers[0].unswapped = True
        b, lines = balancer(cluster, tmp_path, spark, max_cycles=2, stall_s=0.2)
        b.run()
        assert any(t.startswith("1 copy(ies) of east complete but not swapped in (Kafka 3.7.0, KAFKA-16365) until "
                                "broker(s) 0 restart: t0-") for t in b.left), (b.left, lines)
        # The next balancer to hold the cluster, on another state dir (another machine, a standby): the cluster
        # recorded the copy, so it is still the balancer's own, not someone else's move to pause on, and broker 0
        # is still left out.
        def stop_at_a_pause(b: Balancer, text: str) -> None:  # a pause is no cycle: it would wait on
            if text.startswith("paused"):
                b.interrupt()

        b2, lines2 = balancer(cluster, tmp_path / "elsewhere", spark, stop_at_a_pause, max_cycles=1, stall_s=0.2)
        b2.run()
        text = "\n".join(lines2)
        assert "paused east" not in text, text
        assert "leaving broker(s) 0 of east out" in text, text
        assert b2.left == [t for t in b.left if "KAFKA-16365" in t], (b2.left, b.left)
        # A record that does not read is said, and the copy is then a move the balancer cannot account for.
        with Client(cluster.bootstrap) as client:
            status_store.StatusStore(client, tool="test").write_note(NOTE, {"version": 1, "copies": "t0-0"})
        b3, lines3 = balancer(cluster, tmp_path, spark, stop_at_a_pause, max_cycles=1, stall_s=0.2)
        b3.run()
    text = "\n".join(lines3)
    assert lines3[0].startswith("ignoring the record of copies not swapped in of east: "), text
    assert "paused east: 1 log-dir move(s) running that the balancer did not start" in text, text


@pytest.mark.timeout(300)
def test_a_second_balancer_on_the_same_state_dir_is_refused_while_the_first_runs(tmp_path: Path, spark: Any) -> None:
    cluster = skewed()
    refused: list[str] = []

    def on_line(b: Balancer, text: str) -> None:
        if text.startswith("started ") and not refused:
            second, _ = balancer(cluster, tmp_path, spark)
            with pytest.raises(AuditError) as e:
                second.run()
            refused.append(str(e.value))

    with cluster:
        b, lines = balancer(cluster, tmp_path, spark, on_line, max_cycles=1)
        b.run()
        assert refused == [f"another balancer (pid {os.getpid()}) runs on the state dir {tmp_path / 'state'}: stop it "
                           f"first, or give this one a state dir of its own"], refused
        # Once the first has stopped, the state dir is free.
        again, _ = balancer(cluster, tmp_path, spark, max_cycles=1)
        assert again.run() == 1
