"""Moves between brokers (mover/audit/plan/between.py), called directly (no Spark): a broker whose mean is above
its cluster's band sheds replicas to other brokers, into dirs chosen so that no disk is above 90% at any step of
the plan, whatever order its moves run in; the replication factor, racks, cordons and the byte budget hold."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mover.audit import cli, plan_layout
from mover.audit.balance import Thresholds
from mover.audit.plan.between import CEILING, plan_cluster
from mover.audit.planner import Rules

SIZE = 100_000.0


def fleet(fill: dict[int, list[int]], seed: int = 7, pair_bytes: int = 6_000,
          cordoned: frozenset[tuple[int, str]] = frozenset(), solo: dict[int, tuple[int, int]] | None = None
          ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Brokers with dirs /d0, /d1, ... of SIZE bytes each, filled to `fill[b][i]` bytes: replicas of 500-2,500 bytes,
    some partitions with replicas on two brokers (`pair_bytes` per dir and pair), the rest on one broker only (of
    `solo[b]`'s sizes where given)."""
    rng = np.random.default_rng(seed)
    brokers = sorted(fill)
    rows, parts = [], []
    used = {(b, i): 0 for b in brokers for i in range(len(fill[b]))}
    serial = 0

    def place(topic: str, holders: list[tuple[int, int]], size: int) -> None:
        nonlocal serial
        for b, i in holders:
            rows.append({"broker": b, "log_dir": f"/d{i}", "topic": topic, "partition": serial, "size_bytes": size,
                         "is_future": False})
            used[(b, i)] += size
        parts.append({"topic": topic, "partition": serial, "replicas": [b for b, _ in holders]})
        serial += 1

    for x in brokers:  # RF 2 partitions between every pair of brokers, on every dir
        for y in brokers:
            if x < y:
                for i in range(min(len(fill[x]), len(fill[y]))):
                    while min(used[(x, i)], used[(y, i)]) < pair_bytes:
                        place("pair", [(x, i), (y, i)], int(rng.integers(500, 2_501)))
    for (b, i), target in ((k, fill[k[0]][k[1]]) for k in sorted(used)):
        while used[(b, i)] < target:
            low, high = (solo or {}).get(b, (500, 2_500))
            place("solo", [(b, i)], int(min(rng.integers(low, high + 1), max(1, target - used[(b, i)]))))
    replicas = pd.DataFrame(rows)
    disks = pd.DataFrame([{"broker": b, "log_dir": f"/d{i}", "error": None, "total_bytes": SIZE,
                           "usable_bytes": SIZE - used[(b, i)], "used_bytes": used[(b, i)],
                           "cordoned": (b, f"/d{i}") in cordoned} for (b, i) in sorted(used)])
    return disks, replicas, pd.DataFrame(parts)


def peaks(disks: pd.DataFrame, moves: pd.DataFrame) -> pd.Series:
    """The most bytes at any step of the plan, in any order of its moves, of each disk that receives something (the
    others only lose bytes): a copy holds its bytes on both sides until it ends, so the worst is the bytes now and
    everything moved in, nothing moved out."""
    to = moves.assign(broker=moves["to_broker"].where(moves["to_broker"].notna(), moves["broker"]).astype("int64"))
    inbound = to.groupby(["broker", "to_dir"])["size_bytes"].sum()
    before = disks.set_index(["broker", "log_dir"])["used_bytes"]
    inbound = inbound.rename_axis(["broker", "log_dir"])
    return before.reindex(inbound.index) + inbound


def replay_in_order(disks: pd.DataFrame, moves: pd.DataFrame, replicas: pd.DataFrame,
                    partitions: pd.DataFrame) -> float:
    """The plan step by step in its rows' order (each copy arrives whole before its source lets go): the highest
    fraction a disk reaches as it receives; every move takes a replica that is where the plan says, to a broker
    without one."""
    used = disks.set_index(["broker", "log_dir"])["used_bytes"].astype(float).to_dict()
    where = {(r.topic, r.partition, r.broker): (r.log_dir, r.size_bytes) for r in replicas.itertuples()}
    holders = {(p.topic, p.partition): set(p.replicas) for p in partitions.itertuples()}
    worst = 0.0
    for m in moves.itertuples():
        assert where.pop((m.topic, m.partition, m.broker)) == (m.from_dir, m.size_bytes), m
        dst = int(m.to_broker) if pd.notna(m.to_broker) else m.broker
        if dst != m.broker:
            assert dst not in holders[(m.topic, m.partition)], f"{m}: a second replica on broker {dst}"
            holders[(m.topic, m.partition)] = holders[(m.topic, m.partition)] - {m.broker} | {dst}
        used[(dst, m.to_dir)] += m.size_bytes
        worst = max(worst, used[(dst, m.to_dir)] / SIZE)
        used[(m.broker, m.from_dir)] -= m.size_bytes
        where[(m.topic, m.partition, dst)] = (m.to_dir, m.size_bytes)
    return worst


def in_band(after: pd.DataFrame, t: Thresholds) -> tuple[bool, bool]:
    """(every disk within its broker's band, every broker within the cluster's band), as audit judges them."""
    per = after.groupby("broker").agg(used=("used_after", "sum"), size=("total_bytes", "sum"))
    mean = per["used"] / per["size"]
    low, high = t.band(after["used_after"].sum() / after["total_bytes"].sum())
    frac = after["used_after"] / after["total_bytes"]
    b_low, b_high = t.band(after["broker"].map(mean))
    disks_ok = bool(((frac >= b_low - 1e-9) & (frac <= b_high + 1e-9)).all())
    return disks_ok, bool(((mean >= low - 1e-9) & (mean <= high + 1e-9)).all())


def test_a_broker_above_its_clusters_band_moves_replicas_to_the_others_and_every_disk_ends_in_band() -> None:
    disks, replicas, parts = fleet({0: [70_000, 66_000], 1: [30_000, 28_000], 2: [31_000, 29_000]})
    t = Thresholds()
    p = plan_cluster(disks, replicas, parts, Rules(t))
    between = p.moves[p.moves["to_broker"].notna()]
    assert len(between) > 0 and set(between["broker"]) == {0}
    assert set(between["to_broker"].astype(int)) == {1, 2}
    assert set(between["to_dir"]) <= {"/d0", "/d1"}
    assert p.between.left == [], p.between.reason
    assert in_band(p.disks, t) == (True, True), p.disks
    # At most the bytes above the cluster's upper edge, and not far over them (whole replicas of 500-2,500 bytes).
    _, high = t.band(disks["used_bytes"].sum() / disks["total_bytes"].sum())
    need = disks.loc[disks["broker"] == 0, "used_bytes"].sum() - high * 2 * SIZE
    assert need <= between["size_bytes"].sum() <= need + 2_500
    assert (peaks(disks, p.moves) <= CEILING * SIZE).all()
    assert replay_in_order(disks, p.moves, replicas, parts) <= CEILING


def test_the_receivers_plan_their_own_disks_again_with_what_they_receive() -> None:
    """Broker 0's own replicas are 9-10 KB, wider than broker 1's band (+-8.1% of about 33 KB per disk): the dir
    that takes one is pushed out of its broker's band (planned without this, it stays there), and broker 1's own
    plan, made again with it, moves small replicas of its own to its other dirs (never the one it received), every
    disk at most 90% at any step still."""
    disks, replicas, parts = fleet({0: [40_000, 40_000, 40_000], 1: [30_000, 30_000, 30_000]}, seed=1,
                                   solo={0: (9_000, 10_000)})
    t = Thresholds()
    p = plan_cluster(disks, replicas, parts, Rules(t))
    between = p.moves[p.moves["to_broker"].notna()]
    assert len(between) > 0 and p.between.left == []
    own = p.moves[p.moves["to_broker"].isna()]
    assert set(own["broker"]) == {1}, p.moves
    received = set(zip(between["topic"], between["partition"], strict=True))
    assert not received & set(zip(own["topic"], own["partition"], strict=True))
    assert in_band(p.disks, t) == (True, True), p.disks
    assert (peaks(disks, p.moves) <= CEILING * SIZE).all()
    assert replay_in_order(disks, p.moves, replicas, parts) <= CEILING


def test_no_disk_goes_above_90_percent_at_any_step_even_where_the_band_and_capacity_would_allow() -> None:
    """A narrow band and a capacity threshold of 1.0: the receiver's band would take it to 90.2%; the plan stops
    at 90% and says broker 0 stays above the cluster's band."""
    disks, replicas, parts = fleet({0: [99_000, 99_000], 1: [85_000, 85_000]})
    t = Thresholds(capacity=1.0, balance=1.02, margin=1.0)
    p = plan_cluster(disks, replicas, parts, Rules(t, headroom=0.0))
    between = p.moves[p.moves["to_broker"].notna()]
    assert len(between) > 0
    assert (peaks(disks, p.moves) <= CEILING * SIZE).all(), peaks(disks, p.moves)
    assert replay_in_order(disks, p.moves, replicas, parts) <= CEILING
    assert p.between.left == [0] and p.between.reason == "no replica fits another broker"


def test_the_replication_factor_racks_cordons_and_exclusions_hold() -> None:
    """Broker 3 holds a replica of every partition broker 0 has: it never receives one. Broker 1's /d0 is
    cordoned: it receives nothing. Broker 2 is in another rack than broker 0: with racks given, the pairs of 0 and 1
    (both in rack a) may go there, since their partition then spans two racks; the solo partitions may not leave
    rack a. Excluded topics stay."""
    disks, replicas, parts = fleet({0: [70_000, 70_000], 1: [30_000, 30_000], 2: [30_000, 30_000],
                                    3: [30_000, 30_000]}, cordoned=frozenset({(1, "/d0")}))
    on_0 = set(replicas.loc[replicas["broker"] == 0, "partition"])
    # Broker 3 gets a replica of each of broker 0's partitions that it lacks (tiny, so it stays the emptiest).
    extra = [{"broker": 3, "log_dir": "/d1", "topic": t, "partition": q, "size_bytes": 1, "is_future": False}
             for t, q, reps in parts[["topic", "partition", "replicas"]].itertuples(index=False)
             if q in on_0 and 3 not in reps]
    replicas = pd.concat([replicas, pd.DataFrame(extra)], ignore_index=True)
    parts["replicas"] = [reps + [3] if q in on_0 and 3 not in reps else reps
                         for q, reps in zip(parts["partition"], parts["replicas"], strict=True)]
    disks.loc[(disks["broker"] == 3) & (disks["log_dir"] == "/d1"), "used_bytes"] += len(extra)
    t = Thresholds()
    p = plan_cluster(disks, replicas, parts, Rules(t), racks={0: "a", 1: "a", 2: "b", 3: "b"})
    between = p.moves[p.moves["to_broker"].notna()]
    assert len(between) > 0
    assert 3 not in set(between["to_broker"].astype(int))
    assert not ((between["to_broker"] == 1) & (between["to_dir"] == "/d0")).any()
    to_2 = between[between["to_broker"] == 2]
    assert len(to_2) and set(to_2["topic"]) == {"pair"}
    held = {(r.topic, r.partition): set(r.replicas) for r in parts.itertuples()}
    assert all(1 in held[(m.topic, m.partition)] for m in to_2.itertuples())  # the pairs of 0 and 1
    assert replay_in_order(disks, p.moves, replicas, parts) <= CEILING

    p = plan_cluster(disks, replicas, parts, Rules(t, exclude_topics=re.compile("^solo$")))
    between = p.moves[p.moves["to_broker"].notna()]
    assert len(between) and set(between["topic"]) == {"pair"}


def test_the_byte_budget_counts_both_kinds_of_moves() -> None:
    disks, replicas, parts = fleet({0: [80_000, 60_000], 1: [30_000, 30_000], 2: [30_000, 30_000]})
    p = plan_cluster(disks, replicas, parts, Rules(Thresholds(), max_bytes=20_000))
    per_broker = pd.concat([p.moves[["broker", "size_bytes"]],
                            p.moves.loc[p.moves["to_broker"].notna(), ["to_broker", "size_bytes"]]
                            .rename(columns={"to_broker": "broker"})]).astype({"broker": int})
    assert (per_broker.groupby("broker")["size_bytes"].sum() <= 20_000).all()
    assert p.between.left == [0] and p.between.reason == "the byte budget ran out"


def test_within_brokers_moves_none_to_another_broker() -> None:
    disks, replicas, parts = fleet({0: [70_000, 66_000], 1: [30_000, 28_000], 2: [31_000, 29_000]})
    p = plan_cluster(disks, replicas, parts, Rules(Thresholds(), between_brokers=False))
    assert p.moves["to_broker"].isna().all() and not p.between.rows


def test_a_cluster_in_band_moves_nothing_between_brokers() -> None:
    disks, replicas, parts = fleet({0: [40_000, 36_000], 1: [38_000, 37_000], 2: [39_000, 35_000]})
    p = plan_cluster(disks, replicas, parts)
    assert p.moves["to_broker"].isna().all()


def write_snapshot(root: Path, disks: pd.DataFrame, replicas: pd.DataFrame, partitions: pd.DataFrame) -> Path:
    """The frames as a snapshot of cluster `east` in the snapshot layout (the declared columns and types)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mover.audit import snapshot

    path = root / "20260101T000000Z"
    at = pd.Timestamp("2026-01-01", tz="UTC")
    frames = {
        "log_dirs": disks.assign(cluster="east", collected_at=at).astype({"usable_bytes": "int64",
                                                                          "total_bytes": "int64"}),
        "replicas": replicas.assign(cluster="east", offset_lag=0, collected_at=at),
        "partitions": partitions.assign(cluster="east"),
    }
    for name, frame in frames.items():
        columns = snapshot.DATASETS[name]
        schema = plan_layout.arrow_schema({c: k for c, k in columns.items() if k != "timestamp"})
        table = pa.Table.from_pandas(frame[[c for c in columns if columns[c] != "timestamp"]], schema=schema,
                                     preserve_index=False)
        if "collected_at" in columns:
            table = table.append_column("collected_at", pa.array(frame["collected_at"], pa.timestamp("us", "UTC")))
        (path / name).mkdir(parents=True)
        pq.write_table(table, path / name / "part-00000.parquet")
    return path


def test_plan_on_spark_moves_between_brokers_and_plans_the_receivers_again(
        tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`mover-audit plan` (the pass on Spark's session, then between.py on the driver) on the fleet above: moves
    between brokers named in the reassignment JSON (the new broker in the old one's place, its dir), broker 1's own
    moves planned again with what it receives, every disk in band after by the plan's own judgement; the same plan
    when Spark reads the replicas (as with a cluster's master) instead of the driver."""
    disks, replicas, parts = fleet({0: [40_000, 40_000, 40_000], 1: [30_000, 30_000, 30_000]}, seed=1,
                                   solo={0: (9_000, 10_000)})
    snap = write_snapshot(tmp_path / "snapshots", disks.drop(columns="used_bytes").assign(is_cordoned=None),
                          replicas, parts)
    assert cli.main(["plan", "--snapshot", str(snap), "--out", str(tmp_path / "plan"), "--shuffle-partitions",
                     "2"]) == 0
    assert "of the moves go to another broker" in capsys.readouterr().out
    moves = pd.read_parquet(tmp_path / "plan" / "moves")
    between = moves[moves["to_broker"].notna()]
    assert len(between) and set(between["broker"]) == {0} and set(between["to_broker"]) == {1}
    assert 1 in set(moves.loc[moves["to_broker"].isna(), "broker"])
    after = pd.read_parquet(tmp_path / "plan" / "disks.parquet")
    assert not after["out_of_band_after"].any(), after
    entries = {(e["topic"], e["partition"]): e for e in
               json.loads((tmp_path / "plan" / "east.reassignment.json").read_text())["partitions"]}
    for m in between.itertuples():
        e = entries[(m.topic, m.partition)]
        assert e["replicas"] == [1] and e["log_dirs"] == [m.to_dir]

    from mover.audit import snapshot as layout

    monkeypatch.setattr(layout, "footer_schema", lambda *args, **kwargs: None)  # no driver reads: Spark reads all
    assert cli.main(["plan", "--snapshot", str(snap), "--out", str(tmp_path / "spark"), "--shuffle-partitions",
                     "2"]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "spark" / "moves"), moves)


def test_a_broker_above_the_band_with_nothing_to_send_keeps_its_own_moves(tmp_path: Path, spark: Any,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Broker 0 is above its cluster's band, but its replicas are excluded or held by broker 1 too: nothing goes
    between brokers, and its moves between its own dirs are planned and named as before (an empty set of moves
    between brokers once turned every plan's keys to floats, and every move was dropped)."""
    disks, replicas, parts = fleet({0: [70_000, 40_000], 1: [30_000, 30_000]})
    snap = write_snapshot(tmp_path / "snapshots", disks.drop(columns="used_bytes"), replicas, parts)
    assert cli.main(["plan", "--snapshot", str(snap), "--out", str(tmp_path / "plan"), "--exclude-topics", "^solo$",
                     "--shuffle-partitions", "2"]) == 0
    out = capsys.readouterr().out
    assert "dropped" not in out, out
    moves = pd.read_parquet(tmp_path / "plan" / "moves")
    assert len(moves) and set(moves["broker"]) == {0} and moves["to_broker"].isna().all(), moves
    brokers = pd.read_parquet(tmp_path / "plan" / "brokers.parquet").set_index("broker")
    assert brokers.at[0, "reason"].endswith("above its cluster's band (no replica fits another broker)"), brokers


def test_holders_made_on_first_use_answer_as_the_dict_of_every_partition() -> None:
    """plan_fleet's Holders against the dict it replaced (a set per listed key, the union where two partitions share
    a key, an empty set for a null replica list), also once the plan updates it."""
    from mover.audit.plan.between import Holders

    rng = np.random.default_rng(3)
    keys = rng.integers(-50, 50, 400).astype("int64")
    lists: list[Any] = [None if i % 37 == 0 else np.array(rng.integers(0, 9, 3), dtype="int32") for i in range(400)]
    held: dict[int, set[int]] = {}
    for key, reps in zip(keys.tolist(), lists, strict=True):
        held.setdefault(key, set()).update(int(b) for b in (reps if reps is not None else []))
    lazy = Holders(keys, lists)
    probe = np.arange(-60, 60, dtype="int64")
    assert lazy.contains(probe).tolist() == [k in held for k in probe.tolist()]
    many = rng.integers(-70, 70, 10_000).astype("int64")  # hashed, not searched
    assert lazy.contains(many).tolist() == [k in held for k in many.tolist()]
    for key in probe.tolist():
        assert (key in lazy) == (key in held)
        assert lazy.get(key, {-1}) == held.get(key, {-1})
    for key, (src, dst) in zip(probe.tolist(), rng.integers(0, 9, (len(probe), 2)).tolist(), strict=True):
        for h in (held, lazy):
            h.setdefault(key, {src}).discard(src)
            h[key].add(dst)
    assert all(lazy[key] == held[key] for key in probe.tolist())
    with pytest.raises(KeyError):
        Holders(keys, lists)[1000]


@pytest.mark.parametrize("brokers", [[0, 5, 11, 1, -1], [0, 5, 11, 1, 2], [0, 5, 11, 1, 1 << 20]],
                         ids=["negative-searched", "table", "large-searched"])
def test_the_brokers_rows_are_found_as_a_merge_on_cluster_and_broker_finds_them(tmp_path: Path,
                                                                                  brokers: list[int]) -> None:
    """plan/outputs.py's rows of (cluster, broker) pairs, in two row groups with dictionaries of their own, a null
    broker and a null cluster, a negative broker, a pair's cluster the data lacks: the rows a pandas merge keeps, in
    order; looked up in a table of small broker ids or searched (a negative or large id)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mover.audit.plan.outputs import _rows_of_pairs

    rng = np.random.default_rng(5)
    n = 3_000
    cluster = [None if i % 101 == 0 else f"c{v}" for i, v in enumerate(rng.integers(0, 4, n))]
    broker = [None if i % 97 == 0 else int(v) for i, v in enumerate(rng.integers(-2, 12, n))]
    pq.write_table(pa.table({"cluster": pa.array(cluster, pa.string()), "broker": pa.array(broker, pa.int32())}),
                   tmp_path / "r.parquet", row_group_size=1_000)
    table = pq.read_table(tmp_path / "r.parquet", read_dictionary=["cluster"])
    pairs = pd.DataFrame({"cluster": ["c1", "c1", "c3", "c9", "c2"], "broker": brokers})
    merged = (pd.DataFrame({"cluster": cluster, "broker": pd.array(broker, dtype="Int64"), "row": np.arange(n)})
              .merge(pairs.astype({"broker": "Int64"}), on=["cluster", "broker"]))
    assert np.flatnonzero(_rows_of_pairs(table, pairs)).tolist() == sorted(merged["row"].tolist())


@pytest.mark.parametrize("values", [["a", "a", "b", "c", "c"], ["b", "a", "b"], ["a", None, "a"], [3, 3, 1], []])
def test_groups_are_groupbys_frames(values: list[Any]) -> None:
    """between.groups: runs of a sorted column taken as slices, anything else grouped; either way what
    groupby(sort=False) gives, index and order included."""
    from mover.audit.plan.between import groups

    frame = pd.DataFrame({"k": pd.Series(values, dtype=object), "v": np.arange(len(values))},
                         index=np.arange(len(values)) * 7)
    want = dict(tuple(frame.groupby("k", sort=False))) if len(frame) else {}
    got = groups(frame, "k")
    assert list(got) == list(want)
    for k, g in want.items():
        pd.testing.assert_frame_equal(got[k], g)
