"""forecast_members: the copies' history rows found on packed category codes (partition_rows) are the rows a
MultiIndex of their names finds, the disks grouped on packed codes (_packed) are groupby's (pure logic), and
members_of leaves out a copy of a dir that is not listed (a snapshot written to a temp dir)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mover.audit.forecast import codes as forecast_codes
from mover.audit.forecast import members as forecast_members
from mover.audit.forecast import partition_sizes as forecast_partition_sizes


def test_rows_found_on_codes_are_those_found_by_name() -> None:
    rng = np.random.default_rng(5)
    clusters, topics = ["c1", "c2", "c3"], [f"t{i}" for i in range(40)]
    keys = pd.DataFrame({"cluster": rng.choice(clusters, 400), "topic": rng.choice(topics, 400),
                         "partition": rng.integers(0, 30, 400)}).drop_duplicates(ignore_index=True)
    # Copies of the history's partitions, of partitions it lacks (a name it never had, a partition past its
    # largest), in an order of their own; their categories hold names the history lacks and miss some it has.
    copies = pd.concat([keys.sample(frac=2.5, replace=True, random_state=1),
                        pd.DataFrame({"cluster": ["c9", "c1"], "topic": ["t1", "new"], "partition": [0, 3]}),
                        keys.iloc[:5].assign(partition=99)], ignore_index=True)
    copies = copies[~copies["topic"].eq("t7")]
    by_code = copies.astype({"cluster": "category", "topic": "category", "partition": "int32"})
    found = forecast_partition_sizes.partition_rows(keys, by_code)
    by_name = pd.MultiIndex.from_frame(keys).get_indexer(pd.MultiIndex.from_frame(copies))
    assert found.tolist() == by_name.tolist()
    assert (found >= 0).sum() > len(keys) and (found == -1).sum() == 7
    # The history's own names as categoricals (as the driver reads them): the same rows.
    by_keys = keys.astype({"cluster": "category", "topic": "category"})
    assert forecast_partition_sizes.partition_rows(by_keys, by_code).tolist() == by_name.tolist()
    # The history's partitions in its own order (the rows at once, no hash), and the same with two swapped.
    same = keys.astype({"cluster": "category", "topic": "category", "partition": "int32"})
    assert forecast_partition_sizes.partition_rows(keys, same).tolist() == list(range(len(keys)))
    swapped = same.iloc[[1, 0, *range(2, len(keys))]].reset_index(drop=True)
    assert forecast_partition_sizes.partition_rows(keys, swapped).tolist() == [1, 0, *range(2, len(keys))]


@pytest.mark.parametrize("chunk", [1 << 20, 7])
@pytest.mark.parametrize("direct", [True, False])
def test_disks_grouped_on_codes_as_by_groupby(direct: bool, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """_packed groups the disks as groupby does (counted in an array of the packed values, numbered in their order;
    or hashed, numbered as groupby(sort=False).ngroup() numbers them), with their names decoded as they were, whether
    packed in one chunk or many; a frame it cannot pack (a null name, a column of strings) is left to the groupby."""
    monkeypatch.setattr(forecast_codes, "PACK_CHUNK", chunk)
    rng = np.random.default_rng(8)
    frame = pd.DataFrame({"cluster": rng.choice(["a", "b", "c"], 500), "broker": rng.integers(-3, 900, 500),
                          "log_dir": rng.choice([f"/d{i}" for i in range(7)], 500)})
    if not direct:  # 3 x 903 x 7 packed values, past twice the rows: hashed
        monkeypatch.setattr(forecast_codes, "DIRECT_ROOM", 0)
    coded = frame.astype({"cluster": "category", "log_dir": "category", "broker": "int32"})
    names = ["cluster", "broker", "log_dir"]
    packed = forecast_codes._packed(coded, names)
    assert packed is not None
    group, found = packed
    expected = frame.groupby(names, sort=False).ngroup().to_numpy()
    # The same partition of the rows, each row's group named as the row is.
    assert len(found) == expected.max() + 1 and not found.duplicated().any()
    assert len(set(zip(group.tolist(), expected.tolist(), strict=True))) == len(found)
    pd.testing.assert_frame_equal(found.iloc[group].reset_index(drop=True), frame.astype({"broker": "int32"}))
    if direct:  # numbered in the packed codes' order: the cluster's code, then the broker, then the dir's code
        def code(name: str) -> np.ndarray:
            return pd.Categorical(found[name], categories=coded[name].cat.categories).codes

        order = np.lexsort((code("log_dir"), found["broker"].to_numpy(), code("cluster")))
        assert order.tolist() == list(range(len(found)))
    else:
        assert group.tolist() == expected.tolist()
    assert forecast_codes._packed(frame, names) is None
    with_null = coded.copy()
    with_null.loc[3, "cluster"] = None
    assert forecast_codes._packed(with_null, names) is None


def test_copies_of_a_dir_not_listed_are_left_out_and_each_disk_keeps_its_size(tmp_path: Path) -> None:
    """members_of: a copy on a dir its snapshot's log dirs do not list is left out, the listed disks numbered as
    they first appear with no gap, and each disk's size is its own (per disk, not per copy)."""
    replicas = pd.DataFrame({
        "cluster": ["c"] * 6, "broker": np.array([1, 9, 2, 1, 2, 1], dtype="int32"),
        "log_dir": ["/a", "/x", "/a", "/b", "/a", "/a"], "topic": ["t", "u", "u", "t", "v", "v"],
        "partition": np.array([0, 0, 0, 1, 0, 0], dtype="int32"),
        "size_bytes": np.array([10, 40, 30, 20, 50, 60], dtype="int64"), "is_future": [False] * 6})
    snap = tmp_path / "20260101T000000Z"
    (snap / "replicas").mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(replicas, preserve_index=False), snap / "replicas" / "part-0.parquet")
    disks = pd.DataFrame({"cluster": ["c", "c", "c"], "broker": [1, 1, 2], "log_dir": ["/a", "/b", "/a"],
                          "as_of": [0.0] * 3, "total_bytes": [100.0, 200.0, 300.0], "error_now": [None] * 3})
    keys = pd.DataFrame({"cluster": ["c", "c", "c"], "topic": ["t", "u", "v"], "partition": [0, 0, 0]})
    # /x online as of this snapshot, but not among the disks (as a plan's move to a dir not listed leaves it).
    as_of = pd.DataFrame({"cluster": ["c"] * 4, "broker": [1, 1, 2, 9], "log_dir": ["/a", "/b", "/a", "/x"],
                          "as_of": [0.0] * 4})
    copies = forecast_members.members_of(keys, [snap], {snap.name: 0.0}, as_of, disks, None)
    # Broker 9's /x (the second disk seen) is not listed: its copy is gone; (1,/a), (2,/a), (1,/b) numbered 0, 1, 2
    # as they first appear, the copies in the disks' order (stably).
    assert copies.disk.tolist() == [0, 0, 1, 1, 2]
    assert copies.size.tolist() == [10.0, 60.0, 30.0, 50.0, 20.0]
    assert copies.partition.tolist() == [0, 2, 1, 2, -1]
    assert copies.total.tolist() == [100.0, 300.0, 200.0]
    # Each copy's name by its place in the disks' order, the frame's rows taken through the order.
    assert copies.labels(np.arange(5)) == ["t-0", "v-0", "u-0", "v-0", "t-1"]


@pytest.mark.parametrize("topic", ["categorical", "object", "with a null"])
def test_labels_are_the_fstring_of_each_copys_topic_and_partition(topic: str) -> None:
    """Copies.labels joins the names by Arrow from the topics' codes: the same strings as f"{topic}-{partition}"
    of the frame's rows (through the copies' order when there is one), for names of every kind."""
    rng = np.random.default_rng(7)
    names = np.array([f"topic.{i:03d}_é" for i in range(50)], dtype=object)
    values = names[rng.integers(0, 50, 1000)]
    column: pd.Series = pd.Series(values)
    if topic != "object":
        column = column.astype("category")
    if topic == "with a null":
        column.iloc[5] = None
    frame = pd.DataFrame({"topic": column, "partition": rng.integers(0, 1 << 20, 1000)})
    order = rng.permutation(1000)
    for copies_order in (None, order):
        copies = forecast_members.Copies(*(np.zeros(0),) * 5, frame, copies_order, pd.DataFrame())
        at = rng.integers(0, 1000, 300)
        rows = frame.iloc[at if copies_order is None else copies_order[at]]
        assert copies.labels(at) == [f"{t}-{p}" for t, p in zip(rows["topic"], rows["partition"], strict=True)]


@pytest.mark.parametrize("chunk", [4, 1 << 20])
def test_gathered_takes_each_array_in_order_into_its_type(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """gathered in chunks (on threads) or at once: each array taken in the order, made of the type asked for."""
    monkeypatch.setattr(forecast_codes, "PACK_CHUNK", chunk)
    rng = np.random.default_rng(3)
    order = rng.permutation(41).astype(np.int32)
    rows, sizes, flags = rng.integers(0, 9, 41).astype(np.int32), rng.integers(0, 1 << 40, 41), rng.random(41) < .5
    got = forecast_members.gathered(((rows, np.int32), (sizes, float), (flags, bool)), order)
    assert [a.dtype for a in got] == [np.int32, np.float64, np.bool_]
    for a, b in zip(got, (rows[order], sizes[order].astype(float), flags[order]), strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("count", [7, 1 << 16, (1 << 16) + 1, 1 << 20])
def test_stable_order_is_a_stable_argsort(count: int) -> None:
    """forecast_members.stable_order (16-bit codes sorted by radix) orders as a stable argsort does, ties by position,
    on both sides of the 16-bit bound."""
    rng = np.random.default_rng(count)
    codes = rng.integers(0, count, 50_000).astype(np.int32)
    codes[:10] = count - 1  # the largest code, repeated: ties, and the top of the range
    expected = np.argsort(codes, kind="stable")
    assert np.array_equal(forecast_members.stable_order(codes, count), expected)


def test_partitions_sizes_on_codes_are_the_groupbys_medians() -> None:
    """partition_sizes gives what groupby(PARTITION_KEYS, sort=False, observed=True) gives with median() and ngroup():
    partitions of one to six replicas (sum less least and most; the mean of two; the others sorted), in an order of
    their own, categories holding names no replica has. Left to the groupby (None): names that are not
    categoricals, a null name, sizes past 2^50 or not integers."""
    rng = np.random.default_rng(11)
    partitions = pd.DataFrame({"cluster": rng.choice(["c1", "c2"], 300), "topic": rng.choice(
        [f"t{i}" for i in range(30)], 300), "partition": rng.integers(0, 50, 300)}).drop_duplicates(ignore_index=True)
    replicas = partitions.loc[partitions.index.repeat(rng.integers(1, 7, len(partitions)))]
    replicas = replicas.sample(frac=1.0, random_state=2).reset_index(drop=True)
    replicas["size_bytes"] = rng.integers(0, 1 << 49, len(replicas))
    coded = replicas.astype({"partition": "int32", "cluster": pd.CategoricalDtype(["c0", "c1", "c2"]),
                             "topic": pd.CategoricalDtype([f"t{i}" for i in range(40)])})
    by = coded.groupby(["cluster", "topic", "partition"], sort=False, observed=True)
    median = by["size_bytes"].median()
    found = forecast_partition_sizes.partition_sizes(coded)
    assert found is not None
    sizes, names, group = found
    assert sizes.tolist() == median.to_numpy(float).tolist()
    pd.testing.assert_frame_equal(names, median.index.to_frame(index=False))
    assert group.tolist() == by.ngroup().tolist()
    counts = by.size().to_numpy()
    assert {1, 2, 3, 4, 5, 6} <= set(counts.tolist())
    assert forecast_partition_sizes.partition_sizes(replicas.astype({"partition": "int32"})) is None
    assert forecast_partition_sizes.partition_sizes(coded.assign(size_bytes=coded["size_bytes"] + (1 << 50))) is None
    assert forecast_partition_sizes.partition_sizes(coded.assign(size_bytes=coded["size_bytes"].astype(float))) is None
    with_null = coded.copy()
    with_null.loc[3, "topic"] = None
    assert forecast_partition_sizes.partition_sizes(with_null) is None


def test_group_medians_are_each_groups_median_none_a_nan() -> None:
    """group_medians of groups of none to six values (some negative) is each group's np.median; a group of none nan."""
    rng = np.random.default_rng(4)
    sizes = rng.integers(0, 7, 200)
    sizes[::17] = 0
    group = np.repeat(np.arange(200), sizes).astype(np.int32)
    order = rng.permutation(len(group))
    group, values = group[order], rng.integers(-(1 << 40), 1 << 49, len(group))
    found = forecast_partition_sizes.group_medians(group, values, 200)
    assert found is not None
    want = [np.median(values[group == g]) if sizes[g] else np.nan for g in range(200)]
    np.testing.assert_array_equal(found, want)


@pytest.mark.parametrize("step", [7, 1 << 20])
def test_medians_gathered_by_row_are_group_medians(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """medians_by_row, from copies_by_row's places of groups of none to three values (in one step or many), is
    group_medians bit for bit: the middle of three, the mean of two, one itself, none nan; a group of four has no
    places (None), nor values past group_medians' exact range any median."""
    monkeypatch.setattr(forecast_partition_sizes, "BY_ROW_STEP", step)
    rng = np.random.default_rng(5)
    sizes = rng.integers(0, 4, 100)
    group = np.repeat(np.arange(100), sizes).astype(np.int32)
    group = group[rng.permutation(len(group))]
    by_row = forecast_partition_sizes.copies_by_row(group, 100)
    assert by_row is not None and by_row.shape == (3, 100) and by_row.dtype == np.int32
    for values in (rng.integers(-(1 << 49), 1 << 49, len(group)), rng.integers(0, 3, len(group))):
        found = forecast_partition_sizes.medians_by_row(by_row, values)
        assert found is not None
        np.testing.assert_array_equal(found, forecast_partition_sizes.group_medians(group, values, 100))
    assert forecast_partition_sizes.medians_by_row(by_row, np.full(len(group), 1 << 50)) is None
    assert forecast_partition_sizes.medians_by_row(by_row, group.astype(float)) is None
    empty = forecast_partition_sizes.copies_by_row(np.zeros(0, dtype=np.int32), 3)
    assert empty is not None and np.isnan(forecast_partition_sizes.medians_by_row(empty, np.zeros(0, int))).all()
    assert forecast_partition_sizes.copies_by_row(np.array([0, 1, 0, 0, 0], dtype=np.int32), 2) is None
    for each in (1, 2, 3):  # every row of as many copies: their places taken strided
        group = np.repeat(np.arange(50), each).astype(np.int32)[rng.permutation(50 * each)]
        values = rng.integers(0, 1 << 40, len(group))
        found = forecast_partition_sizes.medians_by_row(forecast_partition_sizes.copies_by_row(group, 50), values)
        np.testing.assert_array_equal(found, forecast_partition_sizes.group_medians(group, values, 50))


def _dirs_stacked(snapshots: int, disks: int, rng: np.random.Generator) -> pd.DataFrame:
    """A block per snapshot of the same disks: some offline now and then (one in the newest, one always), their
    sizes changing, hours -snapshots+1 .. 0."""
    names = pd.DataFrame({"cluster": rng.choice(["a", "b"], disks), "broker": np.arange(disks, dtype=np.int32) % 5,
                          "log_dir": [f"/d{i}" for i in range(disks)]})
    blocks = []
    for b in range(snapshots):
        error = np.where(rng.random(disks) < 0.2, "KafkaStorageException", None)
        error[0] = "KafkaStorageException"  # never online
        if b == snapshots - 1:
            error[1] = "KafkaStorageException"  # offline now: its size as of an earlier snapshot
        blocks.append(names.assign(snapshot=f"s{b:02d}", error=error,
                                   total_bytes=rng.integers(1, 1000, disks).astype(np.int64),
                                   hours=float(b - snapshots + 1)))
    return pd.concat(blocks, ignore_index=True)


def test_disks_as_of_on_the_grid_of_blocks_is_the_groupbys() -> None:
    """When the dirs are a block per snapshot of the same disks (block_rows), disks_as_of on their grid gives what
    the groupby and merges give: each disk's last snapshot online, its size then, its error now, a disk never
    online and one offline now included. Dirs that are not such blocks (a disk missing from a snapshot, the disks
    in another order, a snapshot's rows in two places, a disk twice) are left to the groupby."""
    rng = np.random.default_rng(12)
    dirs = _dirs_stacked(6, 40, rng)
    size = forecast_members.block_rows(dirs)
    assert size == 40
    grid, slow = forecast_members.disks_as_of(dirs, size), forecast_members.disks_as_of(dirs)
    for fast, expected in zip(grid, slow, strict=True):
        pd.testing.assert_frame_equal(fast, expected)
    assert grid[0]["as_of"].isna().sum() == 1 and grid[0]["error_now"].notna().sum() >= 2
    missing = dirs.drop(index=45).reset_index(drop=True)
    reordered = pd.concat([dirs.iloc[:40], dirs.iloc[40:80].iloc[::-1], dirs.iloc[80:]], ignore_index=True)
    split = pd.concat([dirs.iloc[40:80], dirs.iloc[:40], dirs.iloc[80:120].assign(snapshot="s01")], ignore_index=True)
    twice = pd.concat([dirs.iloc[:1], dirs.iloc[:39]] * 2, ignore_index=True).assign(
        snapshot=["x"] * 40 + ["y"] * 40)
    for other in (missing, reordered, split, twice):
        assert forecast_members.block_rows(other) is None
    assert forecast_members.block_rows(dirs.iloc[:0]) is None


def test_the_flagged_disks_history_from_the_grid_is_every_snapshots(tmp_path: Path) -> None:
    """The flagged disks' usage at each snapshot (the report's plot), taken from the dirs' grid of blocks
    (block_rows) on the driver: the rows reading every snapshot gives (forecast.compute_local), two of three disks
    flagged, one of them offline in one snapshot."""
    from mover.audit import snapshot
    from mover.audit.forecast import driver as forecast_driver
    from mover.testing.forecast_history import one_partition_a_disk, same_as_reading_every_snapshot

    root = tmp_path / "snapshots"
    one_partition_a_disk(root, {"fast": [8.9e12 + i * 2e10 for i in range(8)],
                                "slow": [1e11 + i * 1e9 for i in range(8)],
                                "also": [8.6e12 + i * 3e10 for i in range(8)]})
    paths = snapshot.list_snapshots(root)
    dirs = pq.read_table(paths[3] / "log_dirs").to_pandas()
    dirs.loc[dirs["log_dir"] == "/also", "error"] = "KafkaStorageException"
    pq.write_table(pa.Table.from_pandas(dirs, preserve_index=False), next((paths[3] / "log_dirs").glob("*.parquet")))
    result = forecast_driver.compute(paths)
    same_as_reading_every_snapshot(result)
    assert sorted(set(result.history["log_dir"])) == ["/also", "/fast"]
    assert len(result.history) == 2 * len(paths)


def test_sizes_on_the_keys_slots_are_the_groupbys_then_the_rows_by_name() -> None:
    """sizes_on_keys gives what numbering the partitions as they first appear (partition_sizes) and then finding
    them among the history's keys by name (partition_rows) gives: each key's size (nan: no replica now), the new
    partitions after the keys as they first appear (a new topic, a number past a topic's most, one inside a gap of
    its numbers), each replica's row; keys whose topic this snapshot lacks, categories in an order of their own.
    Left to that way (None): names that are not categoricals, no keys, numbers too sparse for their slots."""
    from mover.audit.forecast.held import _sizes_then_rows

    rng = np.random.default_rng(12)
    keys = pd.DataFrame({"cluster": rng.choice(["c1", "c2"], 400), "topic": rng.choice(
        [f"t{i}" for i in range(30)], 400), "partition": rng.integers(0, 40, 400)}).drop_duplicates(ignore_index=True)
    keys = keys[~((keys["topic"] == "t3") & (keys["partition"] == 7))].reset_index(drop=True)
    now = pd.concat([keys.sample(frac=0.8, random_state=3),  # a fifth of the keys have no replica now
                     pd.DataFrame({"cluster": ["c1", "c2", "c1", "c1"], "topic": ["new", "t3", "t3", "t4"],
                                   "partition": [0, 7, 99, 45]})], ignore_index=True).drop_duplicates(ignore_index=True)
    replicas = now.loc[now.index.repeat(rng.integers(1, 6, len(now)))].sample(frac=1.0, random_state=4)
    replicas = replicas.reset_index(drop=True).assign(size_bytes=rng.integers(0, 1 << 40, len(replicas)))
    coded = replicas.astype({"partition": "int32", "cluster": pd.CategoricalDtype(["c2", "c0", "c1"]),
                             "topic": pd.CategoricalDtype(["new", *[f"t{i}" for i in range(35)][::-1]])})
    keys = keys.astype({"cluster": "category", "topic": "category", "partition": "int64"})
    keys.loc[len(keys)] = ["c1", "t33", 0]  # its topic only in the categories: no replica has it
    found = forecast_partition_sizes.sizes_on_keys(coded, keys)
    expected = _sizes_then_rows(coded, keys)
    assert found is not None and len(found.new) == 4
    np.testing.assert_array_equal(found.column, expected.column)
    pd.testing.assert_frame_equal(found.new.astype({"partition": "int64"}),
                                  expected.new.astype({"partition": "int64"}), check_categorical=False)
    assert found.rows.tolist() == expected.rows.tolist()
    assert np.isnan(found.column[len(keys) - 1])
    assert forecast_partition_sizes.sizes_on_keys(replicas.astype({"partition": "int32"}), keys) is None
    assert forecast_partition_sizes.sizes_on_keys(coded, keys.iloc[:0]) is None
    sparse = keys.assign(partition=keys["partition"] * 1000)
    assert forecast_partition_sizes.sizes_on_keys(coded, sparse) is None
