"""The per-broker planner, called directly (no Spark): hard rules on any input, the lower bound, and balance on
inputs known to be solvable."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mover.audit.balance import Thresholds
from mover.audit.planner import Rules, lower_bound, plan_broker

EPS = 1e-6


@dataclass
class Broker:
    disks: pd.DataFrame
    replicas: pd.DataFrame
    rules: Rules
    drain: frozenset[str]


def frames(dirs: list[dict], replicas: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    r = pd.DataFrame(replicas, columns=["log_dir", "topic", "partition", "size_bytes", "is_future"])
    r = r.astype({"partition": "int64", "size_bytes": "int64", "is_future": bool})
    used = r.groupby("log_dir")["size_bytes"].sum()
    d = pd.DataFrame(dirs)
    d["used_bytes"] = d["log_dir"].map(used).fillna(0).astype("int64")
    return d, r


@st.composite
def brokers(draw: st.DrawFn) -> Broker:
    """Any broker: offline dirs, moves running, excluded topics, tight usable space, drains and byte budgets."""
    n = draw(st.integers(2, 6))
    dirs, replicas = [], []
    serial = 0
    for k in range(n):
        name = f"/d{k}"
        offline = draw(st.booleans()) if k > 0 and draw(st.integers(0, 5)) == 0 else False
        total = draw(st.integers(1_000, 20_000))
        sizes = draw(st.lists(st.integers(1, 3_000), max_size=25))
        for size in sizes:
            if not offline:
                replicas.append({"log_dir": name, "topic": f"t{serial % 7}", "partition": serial,
                                 "size_bytes": size, "is_future": False})
            serial += 1
        used = sum(sizes) if not offline else 0
        other = draw(st.integers(0, max(0, total - used))) if total > used else 0
        dirs.append({"log_dir": name, "error": "KAFKA_STORAGE_ERROR" if offline else None,
                     "total_bytes": None if offline else float(max(total, used)),
                     "usable_bytes": None if offline else float(max(0, max(total, used) - used - other))})
    online = [d["log_dir"] for d in dirs if d["error"] is None]
    current = [r for r in replicas if not r["is_future"]]
    for r in draw(st.lists(st.sampled_from(current), max_size=3, unique_by=lambda r: r["partition"])
                  if current else st.just([])):
        others = [d for d in online if d != r["log_dir"]]
        if others:  # a move running: a future copy, partly copied, in another dir
            replicas.append({**r, "log_dir": draw(st.sampled_from(others)),
                             "size_bytes": draw(st.integers(0, r["size_bytes"])), "is_future": True})
    disks, frame = frames(dirs, replicas)
    t = Thresholds(capacity=draw(st.sampled_from([0.8, 0.9, 1.0])), balance=draw(st.sampled_from([1.05, 1.1, 1.3])),
                   margin=draw(st.sampled_from([0.5, 0.9, 1.0])))
    exclude = draw(st.sampled_from([None, re.compile(r"t[01]$")]))
    max_bytes = draw(st.one_of(st.none(), st.integers(1, 20_000)))
    drain = frozenset(draw(st.lists(st.sampled_from([d["log_dir"] for d in dirs]), max_size=1)))
    headroom = draw(st.sampled_from([0.0, 0.05]))
    return Broker(disks, frame, Rules(t, headroom, max_bytes, exclude), drain)


@st.composite
def solvable(draw: st.DrawFn) -> Broker:
    """Brokers a plan can always balance: every replica small against the band's width, all movable, space to
    spare. Then some disk below the average can always take a replica from a disk above its band and stay in band."""
    n = draw(st.integers(2, 6))
    total = 100_000
    # Hundreds of replicas per disk: their sizes come from a seeded generator so the example stays small to draw.
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dirs, replicas = [], []
    serial = 0
    for k in range(n):
        # Usage between 10% and 60%: the average stays low enough that the capacity threshold never binds.
        fill = draw(st.integers(10_000, 60_000))
        used = 0
        while used < fill:
            size = int(rng.integers(1, 401))  # the band is at least +-9% of 10% of 100,000 = 900 bytes wide
            replicas.append({"log_dir": f"/d{k}", "topic": f"t{serial % 5}", "partition": serial,
                             "size_bytes": size, "is_future": False})
            used += size
            serial += 1
        dirs.append({"log_dir": f"/d{k}", "error": None, "total_bytes": float(total),
                     "usable_bytes": float(total - used)})
    disks, frame = frames(dirs, replicas)
    return Broker(disks, frame, Rules(Thresholds(), headroom=0.05), frozenset())


def replay(b: Broker, moves: pd.DataFrame) -> dict[str, float]:
    """What each dir receives, checked move by move against the replicas that exist."""
    current = b.replicas[~b.replicas["is_future"]]
    where = {(t, p): (d, s) for t, p, d, s in zip(current["topic"], current["partition"], current["log_dir"],
                                                  current["size_bytes"], strict=True)}
    received: dict[str, float] = {}
    for m in moves.itertuples():
        assert where[(m.topic, m.partition)] == (m.from_dir, m.size_bytes), f"{m} moves a replica that is not there"
        received[m.to_dir] = received.get(m.to_dir, 0) + m.size_bytes
    return received


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(brokers())
def test_never_breaks_a_hard_rule(b: Broker) -> None:
    p = plan_broker(b.disks, b.replicas, b.rules, b.drain)
    moves = p.moves
    if p.status in ("refused", "capacity unknown"):
        assert moves.empty
        return
    disks = b.disks.set_index("log_dir")
    online = set(disks.index[disks["error"].isna()])
    moving = set(zip(b.replicas.loc[b.replicas["is_future"], "topic"],
                     b.replicas.loc[b.replicas["is_future"], "partition"], strict=True))
    assert moves["step"].tolist() == list(range(1, len(moves) + 1))
    assert not moves.duplicated(["topic", "partition"]).any(), "a replica moved twice"
    for m in moves.itertuples():
        assert m.to_dir in online and m.from_dir in online and m.to_dir != m.from_dir
        assert m.to_dir not in b.drain, "moved into a disk being drained"
        assert (m.topic, m.partition) not in moving, "moved a partition that is already moving"
        if b.rules.exclude_topics is not None:
            assert not b.rules.exclude_topics.search(m.topic)
    if b.rules.max_bytes is not None:
        assert p.moved_bytes <= b.rules.max_bytes
    received = replay(b, moves)
    after = p.disks.set_index("log_dir")
    for d, inbound in received.items():
        total = disks.at[d, "total_bytes"]
        assert inbound <= disks.at[d, "usable_bytes"] - b.rules.headroom * total + EPS, "does not fit usable space"
        assert after.at[d, "used_after"] <= b.rules.thresholds.capacity * total + 1, "destination over capacity"
    for d in b.drain:
        assert after.at[d, "used_after"] == 0, "a drain that was not refused left bytes behind"
    targets = after[after["online"] & ~after["drained"]]
    in_band = ((targets["used_after"] >= targets["band_low"] - 1) & (targets["used_after"] <= targets["band_high"] + 1))
    if in_band.all():
        assert p.moved_bytes >= p.lower_bound - 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(solvable())
def test_solvable_brokers_end_in_band_and_move_near_the_lower_bound(b: Broker) -> None:
    p = plan_broker(b.disks, b.replicas, b.rules)
    after = p.disks
    assert ((after["used_after"] >= after["band_low"] - 1) & (after["used_after"] <= after["band_high"] + 1)).all(), \
        after.to_string()
    assert p.reason == ""
    used = b.disks["used_bytes"].to_numpy(dtype="float64")
    avg = used.sum() / b.disks["total_bytes"].sum()
    low, high = Thresholds().band(avg)
    bound = lower_bound(used, low * b.disks["total_bytes"].to_numpy(), high * b.disks["total_bytes"].to_numpy())
    assert bound == p.lower_bound
    assert p.moved_bytes >= bound
    replay(b, p.moves)


def test_largest_replicas_are_not_moved_when_a_fitting_one_exists() -> None:
    # /d0 is 860 bytes over the upper edge: the 2,000-byte replica fixes it in one move; the 5,000-byte one would
    # overshoot and the 44,000-byte one cannot move at all.
    dirs = [{"log_dir": "/d0", "error": None, "total_bytes": 100_000.0, "usable_bytes": 50_000.0},
            {"log_dir": "/d1", "error": None, "total_bytes": 100_000.0, "usable_bytes": 50_000.0}]
    replicas = [{"log_dir": "/d0", "topic": "big", "partition": 0, "size_bytes": 5_000, "is_future": False},
                {"log_dir": "/d0", "topic": "fit", "partition": 0, "size_bytes": 2_000, "is_future": False},
                {"log_dir": "/d0", "topic": "fill", "partition": 0, "size_bytes": 44_000, "is_future": False},
                {"log_dir": "/d1", "topic": "rest", "partition": 0, "size_bytes": 41_000, "is_future": False}]
    disks, frame = frames(dirs, replicas)
    p = plan_broker(disks, frame)
    assert p.moves["topic"].tolist() == ["fit"]
    assert p.lower_bound <= p.moved_bytes


def test_drain_that_cannot_fit_is_refused_with_the_numbers() -> None:
    dirs = [{"log_dir": "/d0", "error": None, "total_bytes": 1_000.0, "usable_bytes": 100.0},
            {"log_dir": "/d1", "error": None, "total_bytes": 1_000.0, "usable_bytes": 300.0}]
    replicas = [{"log_dir": "/d0", "topic": "a", "partition": 0, "size_bytes": 700, "is_future": False},
                {"log_dir": "/d1", "topic": "b", "partition": 0, "size_bytes": 600, "is_future": False}]
    disks, frame = frames(dirs, replicas)
    p = plan_broker(disks, frame, drain=frozenset({"/d0"}))
    assert p.status == "refused" and p.moves.empty
    assert "700" in p.reason


def test_unknown_capacity_is_not_planned() -> None:
    dirs = [{"log_dir": "/d0", "error": None, "total_bytes": np.nan, "usable_bytes": np.nan},
            {"log_dir": "/d1", "error": None, "total_bytes": np.nan, "usable_bytes": np.nan}]
    replicas = [{"log_dir": "/d0", "topic": "a", "partition": 0, "size_bytes": 700, "is_future": False}]
    disks, frame = frames(dirs, replicas)
    p = plan_broker(disks, frame)
    assert p.status == "capacity unknown" and p.moves.empty


def test_drain_that_fits_under_the_hard_rules_is_planned_even_past_the_band() -> None:
    """The reported refusal: 3 x 10 GiB dirs holding 300 MiB each, --drain of one. Its 300 MiB fit the other two many
    times over, but each could take only ~190 MiB within its band (9% around the average): the drain was refused
    with "do not fit" because the band, a soft goal, was used as a hard limit."""
    gib, mib = 1 << 30, 1 << 20
    for sizes in ([300 * mib], [100 * mib] * 3):
        dirs, replicas = [], []
        for k in range(3):
            dirs.append({"log_dir": f"/d{k}", "error": None, "total_bytes": float(10 * gib),
                         "usable_bytes": float(10 * gib - sum(sizes))})
            replicas += [{"log_dir": f"/d{k}", "topic": "t", "partition": len(replicas), "size_bytes": size,
                          "is_future": False} for size in sizes]
        disks, frame = frames(dirs, replicas)
        p = plan_broker(disks, frame, drain=frozenset({"/d0"}))
        assert p.status == "planned", p.reason
        after = p.disks.set_index("log_dir")["used_after"]
        assert after["/d0"] == 0
        assert after["/d1"] + after["/d2"] == 900 * mib
        # Spread as evenly as the replicas allow: the emptiest receiver takes each next replica.
        assert abs(after["/d1"] - after["/d2"]) <= max(sizes)
        assert set(p.moves["from_dir"]) == {"/d0"} and set(p.moves["to_dir"]) <= {"/d1", "/d2"}


def test_equal_sizes_in_a_dir_are_chosen_by_partition_key_whatever_the_row_order() -> None:
    # The driver's scan and Spark's tasks hand a broker's rows over in different orders: with ties in size (empty or
    # even partitions), the moves must still be the same ones.
    from mover.audit.planner import BrokerDirs, BrokerReplicas, plan_arrays

    sizes = np.array([1_000] * 40 + [30_000], dtype="int64")
    keys = np.arange(len(sizes), dtype="int64") * 7919 % 1009
    dirs = np.zeros(len(sizes), dtype="int64")
    dirs[-1] = 1
    disks = BrokerDirs(["/d0", "/d1"], np.array([True, True]), np.array([100_000.0, 100_000.0]),
                       np.array([90_000.0, 90_000.0]), np.array([40_000, 30_000], dtype="int64"),
                       np.array([False, False]))
    chosen = []
    for seed in range(6):
        order = np.random.default_rng(seed).permutation(len(sizes))
        none = np.zeros(len(sizes), dtype=bool)
        p = plan_arrays(disks, BrokerReplicas(dirs[order], keys[order], sizes[order], none, none), Rules())
        assert p.rows, p.reason
        chosen.append(sorted(keys[order][p.rows].tolist()))
    assert all(c == chosen[0] for c in chosen), chosen


@pytest.mark.parametrize("seed", range(4))
def test_replicas_ordered_by_dir_and_size_packed_or_not_as_lexsort(seed: int) -> None:
    # by_dir_and_size packs (dir, size) in one int64 when the sizes fit PACKED_SIZE_BITS, else sorts twice: either
    # way the stable order of lexsort((size, dir)), ties in size included.
    from mover.audit.planner import PACKED_SIZE_BITS, by_dir_and_size

    rng = np.random.default_rng(seed)
    n = 400
    dirs = rng.integers(0, 8, n).astype("int64")
    for top in (50_000, (1 << PACKED_SIZE_BITS) - 1, 1 << 62):  # the last does not fit: two sorts
        sizes = rng.choice([0, 1_000, 5_000, top, *rng.integers(1, top, 20).tolist()], n).astype("int64")
        rows = rng.permutation(n)[: n - 50]
        want = rows[np.lexsort((sizes[rows], dirs[rows]))]
        assert (by_dir_and_size(rows, dirs, sizes, 8) == want).all()


def test_a_disk_no_single_move_fixes_swaps_a_replica_for_a_smaller_one() -> None:
    # Band +-7% of 900 = [837, 963]. /d0 must shed 37-163 bytes and /d1 gain as much, but either replica of /d0 is
    # too big to move alone: 400 for 300 puts both at 900, the cheapest pair (600 for 500 moves 1,100 bytes).
    dirs = [{"log_dir": f"/d{k}", "error": None, "total_bytes": 10_000.0, "usable_bytes": 9_000.0} for k in range(2)]
    replicas = [{"log_dir": d, "topic": "t", "partition": p, "size_bytes": s, "is_future": False}
                for d, p, s in [("/d0", 0, 600), ("/d0", 1, 400), ("/d1", 2, 500), ("/d1", 3, 300)]]
    disks, frame = frames(dirs, replicas)
    p = plan_broker(disks, frame, Rules(Thresholds(margin=0.7)))
    assert p.status == "planned" and p.reason == "", p.reason
    assert sorted(zip(p.moves["partition"], p.moves["from_dir"], p.moves["to_dir"], strict=True)) == \
        [(1, "/d0", "/d1"), (3, "/d1", "/d0")]
    assert p.disks["used_after"].tolist() == [900, 900]
    replay(Broker(disks, frame, Rules(), frozenset()), p.moves)


def test_whole_partitions_against_a_narrow_band_end_in_band() -> None:
    """A broker of tests/kafka/test_audit_cluster.py as Kafka placed it (24 partitions, 4 of 420-480 KB piled on one
    dir), planned at margin 0.7. The moves alone left /d0 19 KB over its edge: what is left on it are three replicas
    of 420-474 KB, each too big for another disk to take, and the replicas moved in cannot move again. One of them
    goes for two smaller ones of another disk (an exact plan, found by an integer program, moves 845 KB)."""
    on_disk = {"/d0": [39631, 40379, 81299, 118376, 420631, 424450, 474204, 483856],
               "/d1": [39843, 80233, 80240, 80586, 81407, 117764, 160031, 161568],
               "/d2": [39310, 39432, 40001, 79014, 121054, 121689, 157063, 162359]}
    dirs = [{"log_dir": d, "error": None, "total_bytes": 250e9, "usable_bytes": 200e9} for d in on_disk]
    replicas = [{"log_dir": d, "topic": "skew", "partition": 8 * k + i, "size_bytes": s, "is_future": False}
                for k, (d, sizes) in enumerate(on_disk.items()) for i, s in enumerate(sizes)]
    disks, frame = frames(dirs, replicas)
    p = plan_broker(disks, frame, Rules(Thresholds(margin=0.7)))
    after = p.disks
    assert ((after["used_after"] >= after["band_low"]) & (after["used_after"] <= after["band_high"])).all(), \
        after.to_string()
    assert p.reason == "" and p.moved_bytes <= 1.25 * 845_081, p.moved_bytes
    replay(Broker(disks, frame, Rules(), frozenset()), p.moves)
