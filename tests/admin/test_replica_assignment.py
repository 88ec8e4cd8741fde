"""mover/admin/replica_assignment.py: Kafka's AdminUtils.assignReplicasToBrokers, --generate's proposal. The worked
examples of Kafka's documentation of the method, then what it promises for any brokers, racks and random draws."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mover.admin.replica_assignment import AssignmentError, assign_replicas, rack_alternated


def test_rack_unaware_table_from_kafkas_documentation() -> None:
    # 5 brokers, 10 partitions, RF 3, start 0 and shift 0: first replicas round robin, the second round's
    # followers shifted by one more.
    placed = assign_replicas([0, 1, 2, 3, 4], {}, 10, 3, start=0, shift=0)
    assert placed == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                      5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


def test_rack_alternated_list_and_rack_aware_example_from_kafkas_documentation() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({0: "r1", 1: "r1", 2: "r1", 3: "r2", 4: "r2", 5: "r2", 6: "r3", 7: "r3", 8: "r3"}) == [
        0, 3, 6, 1, 4, 7, 2, 5, 8]
    placed = assign_replicas(sorted(racks), racks, 7, 3, start=0, shift=0)
    assert placed == {0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3],
                      6: [0, 4, 2]}  # partition 6: the followers shifted, not 0,3,1 again


def test_start_and_shift_are_random_and_seedable() -> None:
    brokers = [1, 2, 3, 4, 5]
    first = assign_replicas(brokers, {}, 8, 3, random.Random(7))
    assert assign_replicas(brokers, {}, 8, 3, random.Random(7)) == first
    seen = {tuple(map(tuple, assign_replicas(brokers, {}, 8, 3, random.Random(seed)).values()))
            for seed in range(60)}
    assert len(seen) > 10  # 25 (start, shift) pairs, not one fixed proposal
    leaders_of_0 = {assign_replicas(brokers, {}, 8, 3, random.Random(seed))[0][0] for seed in range(60)}
    assert leaders_of_0 == set(brokers)


def test_kafkas_errors() -> None:
    with pytest.raises(AssignmentError, match=r"^Replication factor: 4 larger than available brokers: 3\.$"):
        assign_replicas([1, 2, 3], {}, 2, 4)
    with pytest.raises(AssignmentError, match="Replication factor must be larger than 0"):
        assign_replicas([1, 2, 3], {}, 2, 0)
    with pytest.raises(AssignmentError, match="Not all brokers have rack information"):
        assign_replicas([1, 2, 3], {1: "a", 2: "b"}, 2, 2)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 9), st.data())
def test_any_brokers_get_distinct_replicas_and_even_leaders(n: int, data: st.DataObject) -> None:
    brokers = sorted(data.draw(st.sets(st.integers(0, 50), min_size=n, max_size=n)))
    rf = data.draw(st.integers(1, n))
    partitions = data.draw(st.integers(1, 40))
    use_racks = data.draw(st.booleans())
    racks = {b: data.draw(st.sampled_from("abcd")) for b in brokers} if use_racks else {}
    placed = assign_replicas(brokers, racks, partitions, rf, random.Random(data.draw(st.integers(0, 1000))))
    assert sorted(placed) == list(range(partitions))
    for replicas in placed.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(brokers)
        if racks:
            # Every rack gets a replica before any rack gets a second.
            assert len({racks[b] for b in replicas}) == min(rf, len(set(racks.values())))
    leaders = Counter(r[0] for r in placed.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1
    if not racks and partitions % n == 0:
        # Whole rounds: every broker holds the same number of replicas.
        assert len(set(Counter(b for r in placed.values() for b in r).values())) == 1


class _Brokers:
    """What --generate asks of the client: the brokers and their racks (Metadata)."""

    def __init__(self, racks: dict[int, str | None]) -> None:
        self.brokers = {b: ("127.0.0.1", 9000 + b) for b in racks}
        self.racks = racks


def _generate(monkeypatch: pytest.MonkeyPatch, racks: dict[int, str | None], brokers: list[int],
              rack_aware: bool = True, seed: int = 3) -> dict[int, list[int]]:
    import io
    import json

    from mover.admin.reassign.kip455 import PartitionState
    from mover.cli import reassign_brokers

    states = {("t", p): PartitionState((1, 2, 3), (1, 2, 3), 1) for p in range(6)}
    monkeypatch.setattr(reassign_brokers, "partition_states", lambda client, topics: (states, set()))
    out = io.StringIO()
    assert reassign_brokers.generate(_Brokers(racks), ["t"], brokers, out,  # type: ignore[arg-type]
                                     rack_aware=rack_aware, rng=random.Random(seed)) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "Current partition replica assignment" and lines[3] == (
        "Proposed partition reassignment configuration")
    return {p["partition"]: p["replicas"] for p in json.loads(lines[4])["partitions"]}


def test_generate_places_replicas_on_every_rack_and_refuses_half_racked_brokers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from mover.cli.common import CliError

    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    placed = _generate(monkeypatch, racks, [6, 5, 4, 3, 2, 1])
    assert all(len({racks[b] for b in r}) == 3 for r in placed.values()), placed
    # The broker list's order does not matter (Kafka takes the cluster's), the seed does.
    assert placed == _generate(monkeypatch, racks, [1, 2, 3, 4, 5, 6])
    half = {1: "a", 2: "a", 3: "b", 4: None, 5: None, 6: None}
    with pytest.raises(CliError, match=r"^Not all brokers have rack information\. Add --disable-rack-aware"):
        _generate(monkeypatch, half, [1, 2, 3, 4, 5, 6])
    unracked = _generate(monkeypatch, half, [1, 2, 3, 4, 5, 6], rack_aware=False)
    assert unracked == assign_replicas([1, 2, 3, 4, 5, 6], {}, 6, 3, random.Random(3))
    with pytest.raises(CliError, match=r"^Broker list contains duplicate entries: 2$"):
        _generate(monkeypatch, racks, [1, 2, 2, 3])
    with pytest.raises(CliError, match=r"^Replication factor: 3 larger than available brokers: 2\.$"):
        _generate(monkeypatch, racks, [1, 2])
