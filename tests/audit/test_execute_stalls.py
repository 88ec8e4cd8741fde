"""execute against fake Kafka brokers while its moves run: live progress on a terminal, a stalled move said (and
its recovery), a complete copy Kafka 3.7.0 never swaps in named and its slot freed (KAFKA-16365), a copy the broker
drops sent again a bounded number of times, a broker that goes away given up after the stall time, and a cluster out
of reach not holding up the others."""

from __future__ import annotations

import io
import re
import threading
from pathlib import Path

from mover.audit.cli import build_parser
from mover.audit.execute import run
from mover.testing.execute_plan import SIZE, execute, make_cluster, where, write_plan
from mover.testing.wait import wait_for


def test_stalled_move_is_reported(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=1)
    plan = write_plan(tmp_path / "plan", moves)
    out = io.StringIO()
    with cluster:
        cluster.brokers[0].paused = True
        worker = threading.Thread(target=execute, args=(cluster, plan, "--stall-seconds", "0.2"),
                                  kwargs={"out": out})
        worker.start()
        wait_for(lambda: "stalled: t0-0 on broker 0 of east has made no progress" in out.getvalue(), message="stall")
        cluster.brokers[0].paused = False
        worker.join(60)
    assert "progressing again: t0-0" in out.getvalue()
    assert where(cluster, 0, "t0", 0) == "/d2"


def test_a_complete_copy_never_swapped_in_is_named_not_stalled_and_frees_its_slot(tmp_path: Path) -> None:
    # Kafka 3.7.0's KAFKA-16365: the copy is level with the replica and stays a copy until the broker restarts, and
    # from then on that broker swaps no move in. On a real broker it keeps growing with the partition's records, so
    # no stall would ever be said: the run must say what it waits on, give its slot to the next move (it copies
    # nothing more), start no other move on that broker (each would end the same way), and end.
    cluster, moves = make_cluster(brokers=2, per_broker=2)
    cluster.add_replica(0, "/d1", "t0", 2, SIZE)
    moves.append({"cluster": "east", "broker": 0, "topic": "t0", "partition": 2, "from_dir": "/d1", "to_dir": "/d2",
                  "size_bytes": SIZE, "step": 1})
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        cluster.brokers[0].unswapped = True
        ended: list[tuple[int, str]] = []
        # One move at a time in the cluster: broker 1's start only once t0-0 (first in the plan) gave its slot up.
        worker = threading.Thread(target=lambda: ended.append(execute(
            cluster, plan, "--stall-seconds", "0.2", "--max-moves", "1")), daemon=True)
        worker.start()
        worker.join(60)
        assert ended, "the run waits on copies only a broker restart swaps in"
        rc, text = ended[0]
        assert rc == 1, text
        line = "not swapped in: t0-0 on broker 0 of east has had its copy caught up (offset lag 0)"
        assert text.count(line) == 1, text
        assert "KAFKA-16365 (fixed in 3.7.1) and swaps them in when broker 0 restarts" in text, text
        assert "stalled:" not in text, text
        assert "started t0-1" not in text and "started t0-2" not in text, text
        for p in (1, 2):
            assert (f"pending: t0-{p} on broker 0 of east: not started: broker 0 swaps no move in until it restarts "
                    f"(t0-0 on broker 0 of east is not swapped in)") in text, text
        assert "executed: 2 pending, 2 done, 1 not swapped in" in text, text
        assert [where(cluster, 0, "t0", p) for p in range(3)] == ["/d1"] * 3, text
        assert all(where(cluster, 1, "t1", p) == m["to_dir"] for p, m in enumerate(moves[2:4])), text
        cluster.brokers[0].unswapped = False  # the broker restarted: it swaps the copy in
        rc, text = execute(cluster, plan)
    assert rc == 0, text
    assert [where(cluster, 0, "t0", p) for p in range(3)] == ["/d2", "/d3", "/d2"], text


def test_a_copy_the_broker_drops_is_sent_again_a_bounded_number_of_times(tmp_path: Path) -> None:
    # Kafka 3.7.0 drops a copy when the leader epoch changes under it (a broker dying or coming back): the replica
    # stays in its old dir with no future. Sent again, it finishes; a copy dropped every time ends as failed.
    cluster, moves = make_cluster(brokers=1, per_broker=2)
    plan = write_plan(tmp_path / "plan", moves)
    out = io.StringIO()
    with cluster:
        broker = cluster.brokers[0]
        broker.paused = True
        worker = threading.Thread(target=execute, args=(cluster, plan, "--max-moves-per-disk", "2"),
                                  kwargs={"out": out})
        worker.start()
        wait_for(lambda: len(cluster.running_moves()) == 2, message="two moves running")
        with cluster.lock:
            del broker.moves[("t0", 0)]
        wait_for(lambda: "restarted t0-0 on broker 0 of east" in out.getvalue(), message="the move sent again")
        for _ in range(2):  # the other copy dropped as often as it is sent: given up after COPY_RESTARTS
            wait_for(lambda: ("t0", 1) in broker.moves, message="t0-1 running")
            with cluster.lock:
                del broker.moves[("t0", 1)]
            wait_for(lambda: ("t0", 1) in broker.moves or "failed t0-1" in out.getvalue(), message="t0-1 again")
        wait_for(lambda: ("t0", 1) in broker.moves, message="t0-1 sent the second time")
        with cluster.lock:
            del broker.moves[("t0", 1)]
        broker.paused = False
        worker.join(60)
    text = out.getvalue()
    assert where(cluster, 0, "t0", 0) == "/d2", text
    assert "restarted t0-1 on broker 0 of east: the broker dropped its copy in /d3 (2 of 2)" in text
    assert "failed t0-1 on broker 0 of east: no copy is being built in /d3" in text
    assert where(cluster, 0, "t0", 1) == "/d1"
    assert "executed: 1 done, 1 failed" in text


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_progress_shows_bytes_rate_and_time_left_on_a_terminal(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=2)
    cluster.move_step = 20  # fifty polls a move: rich redraws (10 times a second) while they run
    plan = write_plan(tmp_path / "plan", moves)
    out = Terminal()
    with cluster:
        cluster.brokers[0].paused = True
        worker = threading.Thread(target=execute, args=(cluster, plan), kwargs={"out": out})
        worker.start()
        # rich redraws the bars in place; what it wrote shows the overall bar and the running move's.
        wait_for(lambda: "t0-0 on broker 0 of east" in out.getvalue() and "all moves" in out.getvalue(),
                 message="the live bars")
        cluster.brokers[0].paused = False
        worker.join(60)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    # Bytes done of the total, a rate and the time left, for all moves and for the running one.
    assert re.search(r"all moves +━*[╸╺━]* +\d\.\d/2\.0 KiB +[\d.]+ kB/s +0:00:\d\d", text), text[-2000:]
    assert re.search(r"t0-1 on broker 0 of east +━*[╸╺━]* +[\d,]+/1,000 bytes", text), text[-2000:]
    assert "\nexecuted: 2 done\n" in text


def test_a_broker_that_goes_away_is_given_up_after_the_stall_time(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=2, per_broker=3)
    plan = write_plan(tmp_path / "plan", moves)
    out = io.StringIO()
    result: list[int] = []
    with cluster:
        cluster.brokers[1].paused = True
        worker = threading.Thread(target=lambda: result.append(execute(
            cluster, plan, "--stall-seconds", "1", "--timeout", "1", out=out)[0]))
        worker.start()
        wait_for(lambda: any(b == 1 for b, _ in cluster.running_moves()), message="a move on broker 1")
        cluster.brokers[1].stop()
        worker.join(60)
    text = out.getvalue()
    assert result == [1], text
    assert "broker 1 of east does not answer" in text
    assert "unreachable: t1-0 on broker 1 of east: broker 1 has not answered for" in text
    assert "the move may still finish there" in text
    # Broker 0 went on: all its moves are done, and its throttle is removed although broker 1's cannot be.
    assert all(where(cluster, 0, m["topic"], m["partition"]) == m["to_dir"] for m in moves if m["broker"] == 0)
    assert cluster.brokers[0].configs == {}
    assert "cannot remove the throttle on broker 1 of east" in text


def test_a_cluster_out_of_reach_does_not_hold_up_the_others(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=2)
    moves.append({**moves[0], "cluster": "west"})
    plan = write_plan(tmp_path / "plan", moves)
    fleet = tmp_path / "fleet.toml"
    with cluster:
        fleet.write_text(f'[clusters.east]\nbootstrap = "{cluster.bootstrap}"\n'
                         '[clusters.west]\nbootstrap = "127.0.0.1:1"\n')
        out = io.StringIO()
        argv = ["execute", "--plan", str(plan), "--fleet", str(fleet), "--poll-interval", "0.005"]
        parser, _ = build_parser(argv)
        rc = run(parser.parse_args(argv), out)
    assert rc == 1, out.getvalue()
    assert "not moved: the 1 move(s) of cluster west: cluster west: cannot connect" in out.getvalue()
    assert "executed: 2 done" in out.getvalue()
