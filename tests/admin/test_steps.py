"""KIP-435's step calculator: the specification's worked example step by step, and properties over random
reassignments (safety against min.insync.replicas, the last step is FTR, limits, termination)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mover.admin.reassign.steps import Candidate, Limits, Step, StepError, collect_batch, next_step, plan_steps


def test_worked_example_step_by_step() -> None:
    # KIP-435 "Example": (0,1,2,3,4) -> (5,6,7,8,9), leader 0, batches of two replicas.
    steps = plan_steps((0, 1, 2, 3, 4), (5, 6, 7, 8, 9), min_insync=2, max_replica_movements=2)
    assert [s.target for s in steps] == [
        (5, 0, 1, 2, 3, 4),  # +5, new leader (5) is elected
        (5, 6, 2, 3, 4),  # -[0,1] +[6]
        (5, 6, 7, 8, 4),  # -[2,3] +[7,8]
        (5, 6, 7, 8, 9),  # -[4] +[9], requested order is matched
    ]
    assert [(s.adding, s.removing) for s in steps] == [((5,), ()), ((6,), (0, 1)), ((7, 8), (2, 3)), ((9,), (4,))]
    assert [s.leader_movement for s in steps] == [True, False, False, False]
    assert [s.final for s in steps] == [False, False, False, True]


def test_min_insync_exception_adds_over_the_limit() -> None:
    # The specification's own case: min.insync.replicas=3 and one replica in sync: the first step adds two at once.
    step = next_step((0, 1, 2), (3, 4, 5), isr=[0], min_insync=3, max_replica_movements=1)
    assert step is not None and step.adding == (3, 4) and step.removing == ()


def test_reorder_only_is_one_final_step() -> None:
    step = next_step((0, 1, 2), (2, 0, 1), isr=[0, 1, 2], min_insync=2, max_replica_movements=1)
    assert step == Step((0, 1, 2), (2, 0, 1), (), (), final=True)
    assert step.leader_movement
    assert next_step((2, 0, 1), (2, 0, 1), isr=[0, 1, 2], min_insync=2, max_replica_movements=1) is None


def test_out_of_sync_excess_goes_first_and_in_sync_floor_is_kept() -> None:
    # 1 is out of sync: it goes before 0; 2 stays, as dropping it would leave one in-sync replica < min 2.
    step = next_step((0, 1, 2), (0, 3, 4), isr=[0, 2], min_insync=2, max_replica_movements=2)
    assert step is not None and step.removing == (1,)
    assert len(set(step.target) & {0, 2}) >= 2


def test_identical_step_means_wait() -> None:
    # Only in-sync replica left is one that must go, and min.insync 2 cannot be kept by dropping it: wait.
    step = next_step((0, 1, 2), (0, 1), isr=[2], min_insync=2, max_replica_movements=1)
    assert step is not None and step.identical


@pytest.mark.parametrize("bad", [((0, 0, 1), 1), ((), 1), ((0,), 2)])
def test_impossible_targets_are_refused(bad: tuple[tuple[int, ...], int]) -> None:
    target, min_insync = bad
    with pytest.raises(StepError):
        next_step((0, 1, 2), target, isr=[0, 1, 2], min_insync=min_insync, max_replica_movements=1)


def test_batch_is_filled_with_leader_movements_first() -> None:
    lead = Step((0, 1), (2, 0, 1), (2,), (), False)
    other = Step((0, 1), (0, 1, 3), (3,), (), False)
    cands = [Candidate("o1", other), Candidate("l1", lead), Candidate("o2", other), Candidate("l2", lead),
             Candidate("l3", lead)]
    keys = [c.key for c in collect_batch(cands, Limits(3, 1, 2))]
    assert keys == ["l1", "l2", "o1"]
    # Leader slots already in use: only steps that move no leader start.
    assert [c.key for c in collect_batch(cands, Limits(3, 1, 2), leaders_in_flight=2)] == ["o1", "o2"]
    assert collect_batch(cands, Limits(3, 1, 2), partitions_in_flight=3) == []


def test_limits_must_be_positive() -> None:
    with pytest.raises(StepError):
        Limits(0, 1, 1)


# ------------------------------------------------------------------------------------------------- properties


@st.composite
def reassignments(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int]:
    brokers = list(range(draw(st.integers(3, 12))))
    cr = tuple(draw(st.permutations(brokers)))[: draw(st.integers(1, min(6, len(brokers))))]
    min_insync = draw(st.integers(1, 3))
    ftr = tuple(draw(st.permutations(brokers)))[: draw(st.integers(max(1, min_insync), min(6, len(brokers))))]
    isr = tuple(b for b in cr if draw(st.booleans())) or cr[:1]
    r = draw(st.integers(1, 4))
    return cr, ftr, isr, min_insync, r


@settings(max_examples=400, deadline=None)
@given(reassignments())
def test_steps_properties(case: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int]) -> None:
    cr, ftr, isr, min_insync, r = case
    steps = plan_steps(cr, ftr, min_insync, r, isr=isr)  # ends (raises StepError when stuck)
    if cr == ftr:
        assert steps == []
        return
    assert steps[-1].target == ftr and steps[-1].final  # the last step is FTR in FTR's order
    assert all(not s.final for s in steps[:-1])
    in_sync = set(isr)
    for s in steps:
        waited = next_step(s.current, ftr, in_sync, min_insync, r)
        if waited is not None and waited.identical:  # plan_steps waited for the replicas to be back in sync
            in_sync = set(s.current)
        live = in_sync & set(s.current)
        # Never fewer in-sync replicas kept than min(min.insync.replicas, what there was).
        assert len(live & set(s.target)) >= min(min_insync, len(live))
        # Limits: R replicas per step, except what min.insync.replicas needs; drops at most max(R, growth).
        assert len(s.adding) <= max(r, min_insync - len(live))
        assert len(s.removing) <= max(r, len(ftr) - len(s.current))
        assert set(s.target) == (set(s.current) | set(s.adding)) - set(s.removing)
        assert not set(s.adding) & set(s.current) and set(s.removing) <= set(s.current)
        assert not s.identical
        # The new preferred leader comes first whenever it is in.
        if ftr[0] in s.target:
            assert s.target[0] == ftr[0]
        in_sync = (in_sync | set(s.adding)) & set(s.target)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=30), st.integers(1, 6), st.integers(1, 4),
       st.integers(0, 6), st.integers(0, 4))
def test_batch_never_exceeds_limits(flags: list[tuple[bool, int]], p: int, leaders: int, running: int,
                                    leaders_running: int) -> None:
    lead = Step((0, 1), (2, 0), (2,), (1,), False)
    other = Step((0, 1), (0, 2), (2,), (1,), False)
    cands = [Candidate(i, lead if is_leader else other) for i, (is_leader, _) in enumerate(flags)]
    batch = collect_batch(cands, Limits(p, 1, leaders), running, leaders_running)
    assert len(batch) <= max(0, p - running)
    assert sum(c.step.leader_movement for c in batch) <= max(0, leaders - leaders_running)
    # Filled: nothing left out that a free slot could have taken.
    free = max(0, p - running)
    n_leaders = sum(c.step.leader_movement for c in cands)
    expected = min(free, min(n_leaders, max(0, leaders - leaders_running)) + (len(cands) - n_leaders))
    assert len(batch) == expected
