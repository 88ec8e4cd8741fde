"""mover-audit balance against a real moverd with three log dirs whose disks are skewed (three partitions of 2 MB
on one dir, six small ones on the others), a kafka-python producer (idempotent, acks=all) running throughout and the
balancer's own canary: every disk comes into band within a few cycles, no throttle is left, every acknowledged
record reads back once; a SIGTERM while a move runs lets it finish, starts no other, and leaves no throttle and no
copy building. The balancer as its own process killed -9 while a move copies: the throttle stays on moverd; started
again on the same state dir it resumes the plan, and after SIGTERM no throttle and no copy is left. moverd itself
killed -9 while one of the balancer's moves copies: the balancer pauses (its one broker does not answer), goes on once
moverd is back (moverd resumes the copy from its move requests), and stops leaving nothing behind."""

from __future__ import annotations

import io
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mover.admin import throttle
from mover.admin.client import Client
from mover.admin.log_dir_state import describe_broker
from mover.audit.balancer import command
from mover.audit.cli import build_parser
from mover.testing.audit_process import AuditProcess
from mover.testing.exactly_once import read_back
from mover.testing.log_dirs_tool import create_topics, placement
from mover.testing.moverd import Moverd
from mover.testing.producers import PyProducer, prefill

RECORD_BYTES = 1000
HEAVY = 2000  # records of RECORD_BYTES in each partition of the heavy dir: 2 MB
LIGHT = 20
RATE = 2 << 20  # the balancer's throttle: about a second per heavy move


def skewed_moverd(moverd: Callable[..., Moverd], tmp_path: Path) -> tuple[Moverd, list[tuple[str, int]], list[Any]]:
    d = moverd(n_dirs=3)
    create_topics(d.bootstrap, {"t": 9})  # moverd places by count: three partitions per dir
    where = placement(d.bootstrap)
    heavy_dir = where[("t", 0)][0][0]
    tps = [("t", p) for p in range(9)]
    counts = {tp: HEAVY if where[tp][0][0] == heavy_dir else LIGHT for tp in tps}
    return d, tps, prefill(d.bootstrap, tps, counts, RECORD_BYTES)


def dir_usage(client: Client) -> dict[str, int]:
    return {info.path: sum(p.size for p in info.partitions) for info in describe_broker(client, 0)}


def in_band(used: dict[str, int], band: float) -> bool:
    mean = sum(used.values()) / len(used)
    return all(abs(u - mean) <= band * mean for u in used.values())


def balance(d: Moverd, tmp_path: Path, *extra: str, out: io.StringIO | None = None) -> tuple[int, str]:
    argv = ["balance", "--bootstrap-server", d.bootstrap, "--cluster", "one", "--state-dir", str(tmp_path / "state"),
            "--band", "10%", "--interval", "0.05", "--check-interval", "0.5", "--poll-interval", "0.05",
            "--throttle", str(RATE), "--max-produce-p99-ms", "10000", "--canary-interval", "0.2",
            "--canary-topic", "canary", *extra]
    out = out or io.StringIO()
    rc = command.run(build_parser(argv)[0].parse_args(argv), out)
    return rc, out.getvalue()


@pytest.mark.timeout(600)
def test_skewed_disks_of_a_moverd_come_into_band_while_a_producer_runs(
        moverd: Callable[..., Moverd], tmp_path: Path, spark: Any) -> None:
    d, tps, acked = skewed_moverd(moverd, tmp_path)
    with Client(d.bootstrap) as client:
        assert not in_band(dir_usage(client), 0.10)
        producer = PyProducer("during", d.bootstrap, tps, rate=100).start()
        try:
            rc, out = balance(d, tmp_path, "--max-cycles", "3")
        finally:
            producer.stop()
        assert rc == 0, out
        used = dir_usage(client)
        assert in_band(used, 0.10), (used, out)
        assert "\ncycle 1: 3 disk(s) out of band; " in out, out
        assert "nothing to move (0 disk(s) out of band)" in out, out
        assert throttle.dynamic_throttle(client, 0) == {}, out  # the run's throttle gone, none was there before
        assert not any(future for copies in placement(d.bootstrap).values() for _, future in copies)
    assert "canary of one: created topic canary (1 partition, replication factor 1); it stays when the balancer " \
           "stops" in out, out
    assert "canary of one stopped; its topic canary stays" in out
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("cycle 1: "))
    # A pause, if any, is the canary's at the start (a loaded machine may have its first produces in before the gate
    # first looks), over before the first cycle.
    pauses = [i for i, line in enumerate(lines) if line.startswith(("paused", "resumed"))]
    assert [lines[i] for i in pauses] in ([], ["paused one: waiting for the canary's first 5 produces",
                                              "resumed one"]), out
    assert all(i < first for i in pauses), out
    during, failures = producer.snapshot()
    assert not failures and len(during) > 0
    read_back("after", d.bootstrap, tps, acked + during)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("signals", [1, 2])
def test_sigterm_mid_cycle_finishes_or_cancels_the_move_in_flight_and_leaves_no_throttle(
        moverd: Callable[..., Moverd], tmp_path: Path, spark: Any, signals: int) -> None:
    d, tps, acked = skewed_moverd(moverd, tmp_path)
    started, stopping = threading.Event(), threading.Event()

    class Out(io.StringIO):
        def write(self, text: str) -> int:
            if text.startswith("started "):
                started.set()
            elif text.startswith("stopping: "):
                stopping.set()
            return super().write(text)

    def kill_at_first_move() -> None:
        if started.wait(300):
            os.kill(os.getpid(), signal.SIGTERM)
        if signals == 2 and stopping.wait(60):
            os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=kill_at_first_move, daemon=True)
    killer.start()
    # Two signals: a throttle slow enough (2 MB at 128 KB/s) that the copy is still running at the second.
    rc, out = balance(d, tmp_path, "--max-moves-per-broker", "1", *(("--throttle", "131072") if signals == 2 else ()),
                      out=Out())
    killer.join(10)
    assert rc == (0 if signals == 1 else 130), out
    lines = out.splitlines()
    stop = lines.index("SIGTERM received")
    assert lines[stop + 1] == ("stopping: starting no more moves, finishing the 1 in flight (signal again to cancel "
                               "them)"), out
    assert len([line for line in lines if line.startswith("started ")]) == 1, out
    if signals == 1:
        assert any(line.startswith("done ") for line in lines[stop:]), out
    else:
        assert not any(line.startswith("done ") for line in lines), out
        assert any(line.startswith("cancelled 1 move(s) in flight on one: t-") for line in lines[stop:]), out
    assert any(line.startswith("throttle removed on brokers 0 of one") for line in lines[stop:]), out
    assert lines[-1].startswith("stopped after 1 cycle(s)") and lines[-1].endswith("no throttle or move of the "
                                                                             "balancer's left"), out
    with Client(d.bootstrap) as client:
        assert throttle.dynamic_throttle(client, 0) == {}
    assert not any(future for copies in placement(d.bootstrap).values() for _, future in copies)
    read_back("after", d.bootstrap, tps, acked)


def process_args(d: Moverd, tmp_path: Path) -> list[str]:
    """The balancer as its own process: 2 MB moves at 256 KB/s, several seconds each, long enough to be caught
    copying."""
    return ["--bootstrap-server", d.bootstrap, "--cluster", "one", "--state-dir", str(tmp_path / "state"),
            "--band", "10%", "--interval", "1", "--check-interval", "0.5", "--poll-interval", "0.1",
            "--throttle", "262144", "--max-moves-per-broker", "1", "--master", "local[1]", "--driver-memory", "512m",
            "--shuffle-partitions", "2", "--settle-seconds", "1"]  # moverd has no KAFKA-16365 to wait out


def copying(d: Moverd) -> bool:
    return any(future for copies in placement(d.bootstrap).values() for _, future in copies)


def stop_once_balanced(balancer: AuditProcess, d: Moverd) -> str:
    """Until a cycle finds nothing to move and every disk is in band, then SIGTERM as systemd stops it: the
    balancer's output, after a clean exit."""
    def balanced() -> bool:
        with Client(d.bootstrap) as client:
            return in_band(dir_usage(client), 0.10)

    balancer.wait_until(lambda: balancer.said(r"^cycle \d+: nothing to move") and balanced(), "every disk in band")
    balancer.proc.send_signal(signal.SIGTERM)
    assert balancer.wait() == 0, balancer.output
    return balancer.output


def assert_nothing_left(d: Moverd, out: str, producer: PyProducer, tps: list[tuple[str, int]],
                        acked: list[Any]) -> None:
    """No throttle and no copy building is left, the producer lost nothing, every acknowledged record reads back."""
    assert "no throttle or move of the balancer's left" in out, out
    with Client(d.bootstrap) as client:
        assert throttle.dynamic_throttle(client, 0) == {}, out
    assert not copying(d)
    during, failures = producer.snapshot()
    assert not failures and during, failures[:3]
    read_back("after", d.bootstrap, tps, acked + during)


@pytest.mark.timeout(600)
def test_a_balancer_killed_mid_move_is_resumed_by_the_next_and_leaves_no_throttle(
        moverd: Callable[..., Moverd], tmp_path: Path) -> None:
    d, tps, acked = skewed_moverd(moverd, tmp_path)
    producer = PyProducer("during", d.bootstrap, tps, rate=20).start()
    args = process_args(d, tmp_path)
    first = second = None
    try:
        first = AuditProcess("balance", *args)
        first.wait_until(lambda: first.said(r"^started ") and copying(d), "a move copying")
        first.proc.kill()
        first.wait()
        with Client(d.bootstrap) as client:
            assert throttle.dynamic_throttle(client, 0) != {}, first.output  # the killed run's, left behind
        second = AuditProcess("balance", *args)
        second.wait_said(r"^resuming the unfinished plan ")
        out = stop_once_balanced(second, d)
    finally:
        producer.stop()
        for b in (first, second):
            if b is not None:
                b.close()
    assert "has its own throttle" not in first.output + out, first.output + out
    assert_nothing_left(d, out, producer, tps, acked)


@pytest.mark.timeout(600)
def test_a_moverd_killed_mid_move_pauses_the_balancer_which_goes_on_once_it_is_back(
        moverd: Callable[..., Moverd], tmp_path: Path) -> None:
    d, tps, acked = skewed_moverd(moverd, tmp_path)
    # The records sent while moverd is down are retried until it is back (kafka-python's delivery timeout is 120 s).
    producer = PyProducer("during", d.bootstrap, tps, rate=20).start()
    balancer = None
    try:
        balancer = AuditProcess("balance", *process_args(d, tmp_path))
        balancer.wait_until(lambda: balancer.said(r"^started ") and copying(d), "a move copying")
        d.kill()
        balancer.wait_said(r"^paused one: ")
        d.start()
        balancer.wait_said(r"^paused one: a broker that was down answers again: no move starts for 1 s")
        balancer.wait_said(r"^resumed one$")
        out = stop_once_balanced(balancer, d)
    finally:
        producer.stop()
        if balancer is not None:
            balancer.close()
    lines = out.splitlines()
    moving = next(line for line in lines if line.startswith("started "))[len("started "):].split(":")[0]
    paused = next(i for i, line in enumerate(lines) if line.startswith("paused one: "))
    # The move copying when moverd died is carried to its end once moverd is back, not started again or dropped.
    done = next(i for i, line in enumerate(lines) if line.startswith(f"done {moving} "))
    assert paused < lines.index("resumed one") < done, out
    assert "has its own throttle" not in out, out
    assert_nothing_left(d, out, producer, tps, acked)


@pytest.mark.timeout(600)
def test_a_standby_balancer_takes_over_when_the_one_holding_the_cluster_is_killed(
        moverd: Callable[..., Moverd], tmp_path: Path) -> None:
    """Two balancer processes with state dirs of their own (two hosts' worth) on one moverd: the cluster's lease lets
    one act, the other waits naming it; killed -9, the first is taken over at once (same host, its pid gone), and
    the standby resumes nothing of its own but balances the disks and leaves no throttle."""
    d, tps, acked = skewed_moverd(moverd, tmp_path)
    producer = PyProducer("during", d.bootstrap, tps, rate=20).start()
    args = process_args(d, tmp_path)
    standby_args = [*args[:args.index("--state-dir") + 1], str(tmp_path / "standby"),
                    *args[args.index("--state-dir") + 2:]]
    first = standby = None
    try:
        first = AuditProcess("balance", *args)
        first.wait_until(lambda: first.said(r"^started ") and copying(d), "a move copying")
        standby = AuditProcess("balance", *standby_args)
        standby.wait_said(rf"^paused one: another balancer holds this cluster: mover-audit balance pid "
                          rf"{first.proc.pid} ")
        assert not standby.said(r"^started "), standby.output
        first.proc.kill()
        first.wait()
        standby.wait_said(r"^resumed one$")
        out = stop_once_balanced(standby, d)
    finally:
        producer.stop()
        for b in (first, standby):
            if b is not None:
                b.close()
    assert "has its own throttle" not in first.output + out, first.output + out
    assert_nothing_left(d, out, producer, tps, acked)
