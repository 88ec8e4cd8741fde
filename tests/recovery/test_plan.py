"""Planning (scan + plan) over a fake file system: every recovery rule, decided without touching the disks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mover.storage.names import TopicPartition
from recovery import (
    DeleteNow,
    KeepUntouched,
    MarkOffline,
    Observation,
    Promote,
    RenameKafkaFuture,
    ResumeMove,
    ScheduleDelete,
    plan,
    scan,
)

TP = TopicPartition("my.topic-x", 3)  # '.' and '-' in the topic: names are parsed from their end
D1, D2, D3 = Path("/data/d1"), Path("/data/d2"), Path("/data/d3")
U1 = "0123456789abcdef0123456789abcdef"
U2 = "fedcba9876543210fedcba9876543210"
CUR = "my.topic-x-3"
MOVE = "my.topic-x-3.move"
DEL1 = f"my.topic-x-3.{U1}.delete"
DEL2 = f"my.topic-x-3.{U2}.delete"
FUTURE = f"my.topic-x-3.{U1}-future"
KDEL = f"my.topic-x-3.{U2}-delete"
STRAY = f"my.topic-x-3.{U1}-stray"


class Leo:
    """A fake leo_of: offsets by path; records every call."""

    def __init__(self, **by_name: int) -> None:
        self.by_path: dict[Path, int | None] = {}
        self.calls: list[Path] = []

    def set(self, path: Path, leo: int | None) -> Leo:
        self.by_path[path] = leo
        return self

    def __call__(self, path: Path) -> int | None:
        self.calls.append(path)
        return self.by_path.get(path, 0)


def make(fs, layout: dict[Path, list[str]]) -> None:  # type: ignore[no-untyped-def]
    for d, names in layout.items():
        fs.create_dir(d)
        for name in names:
            fs.create_file(d / name / "00000000000000000000.log")


def observe(fs, layout: dict[Path, list[str]], leo: Leo | None = None,  # type: ignore[no-untyped-def]
            dirs: tuple[Path, ...] = (D1, D2, D3)) -> Observation:
    make(fs, layout)
    return scan(list(dirs), leo or Leo())


def tree() -> set[str]:
    return {os.path.join(root, n) for root, dirs, files in os.walk("/data") for n in dirs + files}


def actions(obs: Observation) -> list[object]:
    return list(plan(obs).actions)


# ---------------------------------------------------------------- rule 1

def test_rule1_live_copy_and_move_on_other_dir_resumes(fs) -> None:  # type: ignore[no-untyped-def]
    obs = observe(fs, {D1: [CUR], D2: [MOVE], D3: []})
    assert actions(obs) == [ResumeMove(TP, D1, D2 / MOVE)]


def test_rule1_kafka_future_is_renamed_to_move_then_resumed(fs) -> None:  # type: ignore[no-untyped-def]
    obs = observe(fs, {D1: [CUR], D2: [FUTURE], D3: []})
    assert actions(obs) == [
        RenameKafkaFuture(TP, D2 / FUTURE, D2 / MOVE),
        ResumeMove(TP, D1, D2 / MOVE),
    ]


def test_rule1_retired_copies_are_scheduled_too(fs) -> None:  # type: ignore[no-untyped-def]
    obs = observe(fs, {D1: [CUR, DEL1], D2: [MOVE, KDEL], D3: []})
    assert actions(obs) == [
        ResumeMove(TP, D1, D2 / MOVE),
        ScheduleDelete(TP, D1 / DEL1),
        ScheduleDelete(TP, D2 / KDEL),
    ]


def test_move_in_same_dir_as_live_copy_is_deleted(fs) -> None:  # type: ignore[no-untyped-def]
    obs = observe(fs, {D1: [CUR, MOVE], D2: [], D3: []})
    (only,) = actions(obs)
    assert isinstance(only, DeleteNow) and only.path == D1 / MOVE
    assert "same dir" in only.reason


def test_same_dir_move_deleted_other_dir_move_resumed(fs) -> None:  # type: ignore[no-untyped-def]
    obs = observe(fs, {D1: [CUR, MOVE], D2: [MOVE], D3: []})
    got = actions(obs)
    assert [type(a) for a in got] == [DeleteNow, ResumeMove]
    assert got[0].path == D1 / MOVE
    assert got[1] == ResumeMove(TP, D1, D2 / MOVE)


def test_two_moves_elsewhere_keeps_the_furthest_along(fs) -> None:  # type: ignore[no-untyped-def]
    leo = Leo().set(D2 / MOVE, 10).set(D3 / MOVE, 50)
    obs = observe(fs, {D1: [CUR], D2: [MOVE], D3: [MOVE]}, leo)
    got = actions(obs)
    assert [type(a) for a in got] == [DeleteNow, ResumeMove]
    assert got[0].path == D2 / MOVE
    assert got[1] == ResumeMove(TP, D1, D3 / MOVE)


def test_our_move_is_preferred_over_a_kafka_future(fs) -> None:  # type: ignore[no-untyped-def]
    leo = Leo().set(D2 / MOVE, 10).set(D2 / FUTURE, 99)
    obs = observe(fs, {D1: [CUR], D2: [MOVE, FUTURE], D3: []}, leo)
    got = actions(obs)
    assert [type(a) for a in got] == [DeleteNow, ResumeMove]
    assert got[0].path == D2 / FUTURE
    assert got[1] == ResumeMove(TP, D1, D2 / MOVE)


def test_kafka_future_kept_after_same_dir_move_deleted_first(fs) -> None:  # type: ignore[no-untyped-def]
    # The .move next to the live copy goes first; then the -future may take the .move name in its own dir.
    obs = observe(fs, {D1: [CUR, MOVE], D2: [FUTURE], D3: []})
    got = actions(obs)
    assert [type(a) for a in got] == [DeleteNow, RenameKafkaFuture, ResumeMove]


def test_live_copy_with_bad_dir_and_no_move_is_left_alone(fs) -> None:  # type: ignore[no-untyped-def]
    obs = observe(fs, {D1: [CUR], D2: []})  # D3 is configured but missing: bad
    assert actions(obs) == []
    assert D3 in plan(obs).bad_dirs


# ---------------------------------------------------------------- rule 2

def test_rule2_move_without_live_copy_is_promoted(fs) -> None:  # type: ignore[no-untyped-def]
    obs = observe(fs, {D1: [], D2: [MOVE], D3: []})
    assert actions(obs) == [Promote(TP, D2 / MOVE, D2 / CUR)]


def test_rule2_kafka_future_without_live_copy_is_promoted(fs) -> None:  # type: ignore[no-untyped-def]
    obs = observe(fs, {D1: [], D2: [FUTURE], D3: []})
    assert actions(obs) == [Promote(TP, D2 / FUTURE, D2 / CUR)]


def test_rule2_move_with_shorter_delete_promotes_move(fs) -> None:  # type: ignore[no-untyped-def]
    leo = Leo().set(D1 / DEL1, 40).set(D2 / MOVE, 41)
    got = actions(observe(fs, {D1: [DEL1], D2: [MOVE], D3: []}, leo))
    assert [type(a) for a in got] == [Promote, ScheduleDelete]
    assert (got[0].path, got[0].new_path) == (D2 / MOVE, D2 / CUR)
    assert got[1].path == D1 / DEL1


def test_rule2_tie_goes_to_the_move(fs) -> None:  # type: ignore[no-untyped-def]
    leo = Leo().set(D1 / DEL1, 40).set(D2 / MOVE, 40)
    got = actions(observe(fs, {D1: [DEL1], D2: [MOVE], D3: []}, leo))
    assert got[0].path == D2 / MOVE and isinstance(got[0], Promote)


def test_rule2_delete_with_highest_leo_wins_and_nothing_is_lost(fs) -> None:  # type: ignore[no-untyped-def]
    leo = Leo().set(D1 / DEL1, 70).set(D1 / DEL2, 10).set(D2 / MOVE, 40)
    got = actions(observe(fs, {D1: [DEL1, DEL2], D2: [MOVE], D3: []}, leo))
    # The winner is live before any other copy is removed.
    assert [type(a) for a in got] == [Promote, DeleteNow, ScheduleDelete]
    assert (got[0].path, got[0].new_path) == (D1 / DEL1, D1 / CUR)
    assert "highest log end offset" in got[0].reason
    assert got[1].path == D2 / MOVE
    assert got[2].path == D1 / DEL2


def test_rule2_a_delete_in_kafkas_form_is_a_candidate(fs) -> None:  # type: ignore[no-untyped-def]
    # moverd's swap retires the source under Kafka's `-delete` name: after a power cut between its two renames that
    # copy may be the longer one, and it must win as our old `.delete` did.
    leo = Leo().set(D1 / KDEL, 99).set(D2 / MOVE, 40)
    got = actions(observe(fs, {D1: [KDEL], D2: [MOVE], D3: []}, leo))
    assert [type(a) for a in got] == [Promote, DeleteNow]
    assert (got[0].path, got[0].new_path) == (D1 / KDEL, D1 / CUR)
    assert got[1].path == D2 / MOVE


def test_rule2_a_delete_in_kafkas_form_loses_a_tie_to_the_move(fs) -> None:  # type: ignore[no-untyped-def]
    leo = Leo().set(D1 / KDEL, 40).set(D2 / MOVE, 40)
    got = actions(observe(fs, {D1: [KDEL], D2: [MOVE], D3: []}, leo))
    assert got == [Promote(TP, D2 / MOVE, D2 / CUR, got[0].reason), ScheduleDelete(TP, D1 / KDEL)]
    assert "highest log end offset" in got[0].reason


def test_rule2_offsets_are_read_for_a_delete_in_kafkas_form(fs) -> None:  # type: ignore[no-untyped-def]
    leo = Leo()
    observe(fs, {D1: [KDEL], D2: [MOVE], D3: []}, leo)
    assert sorted(leo.calls) == [D1 / KDEL, D2 / MOVE]


def test_rule2_unreadable_offset_refuses_to_choose(fs) -> None:  # type: ignore[no-untyped-def]
    leo = Leo().set(D1 / DEL1, None).set(D2 / MOVE, 40)
    (only,) = actions(observe(fs, {D1: [DEL1], D2: [MOVE], D3: []}, leo))
    assert isinstance(only, MarkOffline)
    assert set(only.paths) == {D1 / DEL1, D2 / MOVE}


# ---------------------------------------------------------------- rule 3

def test_rule3_bad_dir_makes_partition_offline_and_untouched(fs) -> None:  # type: ignore[no-untyped-def]
    fs.create_file(D3)  # configured log dir is a file: listing it fails -> bad dir
    obs = observe(fs, {D1: [DEL1], D2: [MOVE]})
    p = plan(obs)
    assert list(p.actions) == [MarkOffline(TP, (D1 / DEL1, D2 / MOVE), p.actions[0].reason)]
    assert "rule 3" in p.actions[0].reason and str(D3) in p.actions[0].reason
    assert set(p.bad_dirs) == {D3} and p.bad_dirs[D3].startswith("NotADirectoryError")


def test_rule3_does_not_stop_rule4_of_other_partitions(fs) -> None:  # type: ignore[no-untyped-def]
    other = f"b-0.{U1}.delete"
    got = actions(observe(fs, {D1: [other], D2: [MOVE]}))  # D3 missing
    assert got[0] == ScheduleDelete(TopicPartition("b", 0), D1 / other)
    assert isinstance(got[1], MarkOffline) and got[1].tp == TP


# ---------------------------------------------------------------- rule 4

def test_rule4_retired_copies_are_scheduled(fs) -> None:  # type: ignore[no-untyped-def]
    got = actions(observe(fs, {D1: [DEL1], D2: [KDEL, DEL2], D3: []}))
    # Within a dir, copies come in name order (U2 is the same uuid, so "-delete" sorts before ".delete").
    assert got == [ScheduleDelete(TP, D1 / DEL1), ScheduleDelete(TP, D2 / KDEL), ScheduleDelete(TP, D2 / DEL2)]


# ---------------------------------------------------------------- beyond the rules

def test_two_live_copies_stay_offline_and_untouched(fs) -> None:  # type: ignore[no-untyped-def]
    leo = Leo().set(D1 / CUR, 5).set(D2 / CUR, 7)
    (only,) = actions(observe(fs, {D1: [CUR], D2: [CUR, DEL1], D3: []}, leo))
    assert isinstance(only, MarkOffline)
    assert only.paths == (D1 / CUR, D2 / CUR, D2 / DEL1)
    assert "2 live copies" in only.reason and "leo=5" in only.reason and "leo=7" in only.reason


def test_kafka_stray_is_kept_untouched(fs) -> None:  # type: ignore[no-untyped-def]
    got = actions(observe(fs, {D1: [CUR, STRAY], D2: [], D3: []}))
    assert got == [KeepUntouched(TP, D1 / STRAY, got[0].reason)]
    assert "stray" in got[0].reason


def test_non_partition_entries_are_ignored(fs) -> None:  # type: ignore[no-untyped-def]
    make(fs, {D1: [], D2: [], D3: []})
    for name in ("recovery-point-offset-checkpoint.tmp", "replication-offset-checkpoint.tmp",
                 "recovery-point-offset-checkpoint", "meta.properties", ".lock", "t-0.move.tmp"):
        fs.create_file(D1 / name)
    fs.create_file(D2 / MOVE)  # a *file* with a partition name is not a partition directory
    fs.create_dir(D2 / "not a topic!-0.move")
    obs = scan([D1, D2, D3], Leo())
    assert all(d.copies == () for d in obs.dirs)
    assert actions(obs) == []


def test_unlistable_dir_is_recorded_not_raised(fs) -> None:  # type: ignore[no-untyped-def]
    make(fs, {D1: [CUR]})
    obs = scan([D1, D2], Leo(), offline_dirs={D3})
    assert obs.bad_dirs[D2].startswith("FileNotFoundError")
    obs = scan([D1, D3], Leo(), offline_dirs={D3})
    assert obs.bad_dirs == {D3: "offline before recovery"}


def test_leo_is_read_only_where_a_decision_needs_it(fs) -> None:  # type: ignore[no-untyped-def]
    layout = {D1: [f"t-{p}" for p in range(200)] + ["m-0", f"d-0.{U1}.delete", "r-0"],
              D2: ["m-0.move", "r-0.move", f"r-0.{U2}.delete"], D3: [f"r-0.{U1}.delete"]}
    # m-0: rule 1, no choice.  d-0: rule 4.  r-0: live copy + move + retired copies, no choice.
    leo = Leo()
    observe(fs, layout, leo)
    assert leo.calls == []

    leo = Leo()
    e1, e2 = Path("/other/e1"), Path("/other/e2")
    observe(fs, {e1: ["q-0.move"], e2: [f"q-0.{U1}.delete"]}, leo, dirs=(e1, e2))
    assert sorted(leo.calls) == [e1 / "q-0.move", e2 / f"q-0.{U1}.delete"]


def test_plan_is_pure_and_deterministic(fs) -> None:  # type: ignore[no-untyped-def]
    leo = Leo().set(D1 / DEL1, 70).set(D2 / MOVE, 40)
    make(fs, {D1: [DEL1, "a-0", "b-1", f"c-0.{U2}.delete"], D2: [MOVE, "b-1.move"], D3: ["z-9", FUTURE]})
    before = tree()
    obs = scan([D1, D2, D3], leo)
    first = plan(obs)
    assert tree() == before  # scan and plan change nothing
    assert len(first) == 5  # b-1: resume; c-0: schedule; my.topic-x-3: promote + 2 deletes
    # Plan reads nothing: with the disks gone it decides exactly the same, every time.
    fs.remove_object("/data")
    assert plan(obs) == first and list(plan(obs)) == list(first)
    assert [a.tp for a in first] == sorted(a.tp for a in first)


@pytest.mark.parametrize("order", [(D1, D2, D3), (D3, D2, D1)])
def test_configured_dir_order_breaks_ties(fs, order: tuple[Path, ...]) -> None:  # type: ignore[no-untyped-def]
    leo = Leo().set(D2 / MOVE, 30).set(D3 / MOVE, 30)
    got = actions(observe(fs, {D1: [CUR], D2: [MOVE], D3: [MOVE]}, leo, dirs=order))
    expected = D2 if order[0] == D1 else D3
    assert got[-1] == ResumeMove(TP, D1, expected / MOVE)
