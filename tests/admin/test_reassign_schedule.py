"""mover/admin/reassign/schedule.py: the step engine's batches replayed with Kafka's per-broker throttle shares."""

from __future__ import annotations

import pytest

from mover.admin.reassign.schedule import PartitionPlan, format_duration, schedule
from mover.admin.reassign.steps import Limits

MB = 1_000_000


def test_copies_share_the_throttle_of_the_broker_they_leave_and_the_one_they_reach() -> None:
    """Two partitions led by 1 moving to 3 and one led by 4 moving to 5, all at once: 1's leader rate is shared by
    two copies (0.5 MB/s each), 4 -> 5 has its own (1 MB/s)."""
    plans = [PartitionPlan(("a", p), (1, 2), (2, 3), 1, 2 * MB) for p in range(2)]
    plans.append(PartitionPlan(("b", 0), (4, 6), (6, 5), 1, 2 * MB))
    sch = schedule(plans, Limits(5, 1, 5), MB)
    ends = {s.tp: s.end_s for s in sch.steps}
    assert ends == {("a", 0): pytest.approx(4.0), ("a", 1): pytest.approx(4.0), ("b", 0): pytest.approx(2.0)}
    assert sch.eta_s == pytest.approx(4.0) and sch.total_bytes == 6 * MB and sch.batches == 1


def test_a_batch_starts_when_a_slot_frees_and_the_shares_change_as_copies_end() -> None:
    """One partition movement at a time: the three copies run one after another, 2 s each at 1 MB/s (each partition
    also has a step that only drops its old replica, which copies nothing and takes no time)."""
    plans = [PartitionPlan(("t", p), (1,), (2,), 1, 2 * MB) for p in range(3)]
    sch = schedule(plans, Limits(1, 1, 1), MB)
    copies = sorted((s.start_s, s.end_s) for s in sch.steps if s.bytes)
    assert copies == [(0.0, pytest.approx(2.0)), (pytest.approx(2.0), pytest.approx(4.0)),
                      (pytest.approx(4.0), pytest.approx(6.0))]
    assert len(sch.steps) == 6 and len({s.batch for s in sch.steps}) == 6 and sch.eta_s == pytest.approx(6.0)


def test_kip_435s_worked_example_step_by_step_at_the_throttle() -> None:
    """(0,1,2,3,4) -> (5,6,7,8,9), one replica at a time: five copies of the partition one after another, and the
    steps that only drop a replica take no time."""
    sch = schedule([PartitionPlan(("t", 0), (0, 1, 2, 3, 4), (5, 6, 7, 8, 9), 1, 10 * MB)], Limits(5, 1, 2), MB)
    assert sch.total_bytes == 50 * MB
    assert sch.eta_s == pytest.approx(50.0)
    assert sch.steps[0].step.adding == (5,) and sch.steps[0].step.leader_movement


def test_each_step_holds_its_slot_for_the_gap_after_its_copies() -> None:
    """The engine sees a step done at its next poll, then the next one is sent: with a 1 s gap, the three copies of
    the one-at-a-time example end at 3, 6 and 9 s (2 s of copy + 1 s each), the three drop steps after them 1 s each,
    and a copy still running when another step waits out its gap keeps the whole rate."""
    plans = [PartitionPlan(("t", p), (1,), (2,), 1, 2 * MB) for p in range(3)]
    sch = schedule(plans, Limits(1, 1, 1), MB, step_gap_s=1.0)
    copies = sorted((s.start_s, s.end_s) for s in sch.steps if s.bytes)
    assert copies == [(0.0, pytest.approx(3.0)), (pytest.approx(3.0), pytest.approx(6.0)),
                      (pytest.approx(6.0), pytest.approx(9.0))]
    assert sch.eta_s == pytest.approx(12.0)
    # Two copies from one leader, one of them half the size: the large one runs alone at the full rate once the
    # small one is done, even while the small one's step waits out its gap (2 MB at 0.5 each, then 2 MB at 1).
    both = [PartitionPlan(("a", 0), (1,), (2,), 1, 2 * MB), PartitionPlan(("a", 1), (1,), (3,), 1, 4 * MB)]
    ends = {s.tp: s.end_s for s in schedule(both, Limits(5, 5, 5), MB, step_gap_s=1.0).steps if s.bytes}
    assert ends == {("a", 0): pytest.approx(5.0), ("a", 1): pytest.approx(7.0)}


def test_without_a_throttle_there_are_steps_and_bytes_but_no_times() -> None:
    sch = schedule([PartitionPlan(("t", p), (1, 2), (2, 3), 1, MB) for p in range(3)], Limits(2, 1, 2), None)
    assert [s.batch for s in sch.steps] == [1, 1, 2]
    assert sch.eta_s is None and all(s.start_s is None for s in sch.steps) and sch.total_bytes == 3 * MB


def test_durations_read_as_an_estimate() -> None:
    assert [format_duration(x) for x in (0.4, 45, 200, 3725)] == ["0 s", "45 s", "3 min 20 s", "1 h 02 min"]
