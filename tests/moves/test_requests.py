"""MoveRequests on its own: KIP-179 request ids (monotonic, persisted, the highest copy wins), live progress,
final statuses, adoption of resumed moves, expiry. Real files in real dirs."""

from __future__ import annotations

import json
from pathlib import Path

from mover.log.replica import Replica
from mover.moves import MoveRequests, MoveState, ReplicaMove
from mover.moves.requests import FILE_NAME
from mover.storage.log import LogConfig
from mover.storage.names import TopicPartition
from mover.testing.wait import wait_for
from throttle.token_bucket import TokenBucket

DAY_MS = 24 * 3600 * 1000


def a_move(tmp_path: Path, tp: TopicPartition, dest: str = "d2") -> ReplicaMove:
    # The requests table reads only the move's identity and counters: no log is needed.
    return ReplicaMove(Replica(tp, None, tmp_path / "d1"), tmp_path / "d1", tmp_path / dest, TokenBucket(None),
                       LogConfig())


def dirs(tmp_path: Path) -> list[Path]:
    out = [tmp_path / "d1", tmp_path / "d2"]
    for d in out:
        d.mkdir(exist_ok=True)
    return out


def test_ids_grow_and_survive_a_restart_and_a_lost_disk(tmp_path: Path) -> None:
    d1, d2 = dirs(tmp_path)
    reqs = MoveRequests(DAY_MS)
    reqs.load([d1, d2])
    assert reqs.begin([]) is None, "a request that starts no move gets no id"
    first = reqs.begin([a_move(tmp_path, TopicPartition("t", 0))])
    second = reqs.begin([a_move(tmp_path, TopicPartition("t", 1))])
    assert (first, second) == (1, 2)
    assert json.loads((d1 / FILE_NAME).read_text())["next_id"] == 3
    # d1 lost its copy (a replaced disk): d2's still says where ids stand.
    (d1 / FILE_NAME).unlink()
    again = MoveRequests(DAY_MS)
    again.load([d1, d2])
    assert again.latest_id() == 2
    assert again.begin([a_move(tmp_path, TopicPartition("t", 2))]) == 3
    # A stale copy (lower next_id) never wins.
    stale = json.loads((d2 / FILE_NAME).read_text())
    stale["next_id"] = 1
    (d2 / FILE_NAME).write_text(json.dumps(stale))
    third = MoveRequests(DAY_MS)
    third.load([d1, d2])
    assert third.begin([a_move(tmp_path, TopicPartition("t", 3))]) == 4


def test_live_progress_then_the_final_state_from_the_outcome(tmp_path: Path) -> None:
    d1, d2 = dirs(tmp_path)
    reqs = MoveRequests(DAY_MS)
    reqs.load([d1, d2])
    move = a_move(tmp_path, TopicPartition("p", 0))
    rid = reqs.begin([move])
    assert rid is not None
    (status,) = reqs.describe(rid)[0].replicas
    assert (status.state, status.bytes_total) == ("queued", -1)
    move.bytes_copied, move.bytes_total = 10, 40
    (status,) = reqs.describe(rid)[0].replicas
    assert (status.bytes_copied, status.bytes_total) == (10, 40)
    assert not reqs.describe(rid)[0].done
    reqs.move_ended(move, MoveState.COMPLETED)
    (req,) = reqs.describe(None)
    assert req.request_id == rid and req.done and req.end_ms >= req.start_ms
    assert req.replicas[0].state == "completed"
    # The final status is persisted, without the live move.
    reloaded = MoveRequests(DAY_MS)
    reloaded.load([d1, d2])
    assert reloaded.describe(rid)[0].replicas[0].state == "completed"


def test_an_empty_partitions_total_is_unknown_never_zero(tmp_path: Path) -> None:
    """KIP-179's denominator: -1 when the total is not known, never 0; an empty partition has no total to count."""
    reqs = MoveRequests(DAY_MS)
    reqs.load(dirs(tmp_path))
    move = a_move(tmp_path, TopicPartition("empty", 0))
    rid = reqs.begin([move])
    seen = []
    for state in (MoveState.COPYING, MoveState.SWAPPING):
        move.state = state
        seen += reqs.describe(rid)[0].replicas
    reqs.move_ended(move, MoveState.COMPLETED)
    seen += reqs.describe(rid)[0].replicas
    assert [(s.state, s.bytes_copied, s.bytes_total) for s in seen] == [
        ("copying", 0, -1), ("swapping", 0, -1), ("completed", 0, -1)]

def test_a_stopped_move_is_adopted_again_after_a_restart(tmp_path: Path) -> None:
    d1, d2 = dirs(tmp_path)
    reqs = MoveRequests(DAY_MS)
    reqs.load([d1, d2])
    tp = TopicPartition("s", 0)
    rid = reqs.begin([a_move(tmp_path, tp)])
    reqs.move_ended(a_move(tmp_path, tp), MoveState.STOPPED)  # not the live one: ignored
    restarted = MoveRequests(DAY_MS)
    restarted.load([d1, d2])
    resumed = a_move(tmp_path, tp)
    restarted.adopt(resumed)
    resumed.bytes_copied = 7
    assert restarted.describe(rid)[0].replicas[0].bytes_copied == 7
    restarted.move_ended(resumed, MoveState.FAILED)
    assert restarted.describe(rid)[0].replicas[0].state == "failed"


def test_finished_requests_expire_after_the_retention(tmp_path: Path) -> None:
    d1, d2 = dirs(tmp_path)
    reqs = MoveRequests(1)
    reqs.load([d1, d2])
    move = a_move(tmp_path, TopicPartition("e", 0))
    rid = reqs.begin([move])
    reqs.move_ended(move, MoveState.CANCELLED)
    wait_for(lambda: reqs.describe(rid) == [], message="expiry")
