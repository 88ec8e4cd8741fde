"""mover/audit/columns.py: a chunked dictionary column read a step at a time gives each row the index of its own
name in one dictionary for all chunks, whatever the chunks' own dictionaries and the steps' sizes; sort_order puts
rows in the order pyarrow's sort_by gives the decoded names and values."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from mover.audit import columns


def _chunk(values: list[str | None], dictionary: list[str | None]) -> pa.DictionaryArray:
    indices = [None if v is None else dictionary.index(v) for v in values]
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(dictionary, pa.string()))


@pytest.mark.parametrize("step", [1, 2, 3, 1000])
def test_names_index_every_row_into_one_dictionary(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columns, "STEP_ROWS", step)
    rows = [["b", "a", None, "b"], [], ["c", "a"], ["z", None, "b"]]
    # Each chunk with a dictionary of its own order and extra entries; one holds a null entry (a null name).
    chunked = pa.chunked_array([_chunk(rows[0], ["b", "x", "a"]), _chunk(rows[1], ["q"]),
                                _chunk(rows[2], ["a", "c"]), _chunk(rows[3], ["z", "b"])])
    names = columns.Names(chunked)
    dictionary = names.dictionary.to_pylist()
    assert sorted(dictionary) == sorted({"a", "b", "c", "q", "x", "z"})
    got: list[str | None] = []
    for at, batch in columns.steps(pa.table({"name": chunked})):
        assert batch.num_rows <= step
        got += [None if i == len(dictionary) else dictionary[i] for i in names.rows(batch.column(0), at).tolist()]
    assert got == [v for chunk in rows for v in chunk]


def test_names_of_chunks_sharing_a_dictionary_or_none() -> None:
    shared = pa.chunked_array([_chunk(["a", None], ["a", "b"]), _chunk(["b"], ["a", "b"])])
    names = columns.Names(shared)
    assert names.dictionary.to_pylist() == ["a", "b"]
    assert names.rows(shared.chunks[0], 0).tolist() == [0, 2]
    assert names.rows(shared.chunks[1], 2).tolist() == [1]
    empty = columns.Names(pa.chunked_array([], pa.dictionary(pa.int32(), pa.string())))
    assert len(empty.dictionary) == 0
    # A null entry in a chunk's own dictionary: the row is a null name.
    odd = pa.chunked_array([_chunk(["a"], ["a"]),
                            pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()), pa.array([None, "c"]))])
    names = columns.Names(odd)
    assert [names.dictionary.to_pylist()[i] if i < len(names.dictionary) else None
            for i in names.rows(odd.chunks[1], 1).tolist()] == [None, "c"]


def _random_table(rng: random.Random, rows: int) -> pa.Table:
    """Chunks with dictionaries of their own (in any order, with extra, repeated and null entries), and the integer
    and boolean kinds sort_order packs (a 64-bit one spanning 2**61), nulls among them."""
    names = ["", "a", "b", "ab", "B", "é", "z\u00ff", "\U0001f600", "a\x00"]
    chunks: dict[str, list[pa.Array]] = {k: [] for k in ("name", "other", "small", "wide", "unsigned", "flag",
                                                         "long")}
    for _ in range(rng.randint(1, 4)):
        n = rng.randint(0, rows)
        for key in ("name", "other"):
            dictionary = rng.sample(names, rng.randint(1, len(names))) + [None, *rng.sample(names, 2)]
            indices = [None if rng.random() < 0.1 else rng.randrange(len(dictionary)) for _ in range(n)]
            chunks[key].append(pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()),
                                                              pa.array(dictionary, pa.string())))
        chunks["small"].append(pa.array([None if rng.random() < 0.1 else rng.randint(-128, 127) for _ in range(n)],
                                        pa.int8()))
        chunks["wide"].append(pa.array([None if rng.random() < 0.1 else rng.choice([-2**31, -1, 0, 1, 2**31 - 1])
                                        for _ in range(n)], pa.int32()))
        chunks["unsigned"].append(pa.array([rng.choice([None, 0, 7, 2**32 - 1]) for _ in range(n)], pa.uint32()))
        chunks["flag"].append(pa.array([rng.choice([None, True, False]) for _ in range(n)], pa.bool_()))
        chunks["long"].append(pa.array([rng.choice([None, -2**60, 5, 2**60 - 1, 1 << 40]) for _ in range(n)],
                                       pa.int64()))
    return pa.table({k: pa.chunked_array(v, v[0].type) for k, v in chunks.items()})


@pytest.mark.parametrize("seed", range(40))
def test_sort_order_is_sort_by_on_the_names(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(columns, "STEP_ROWS", rng.choice([1, 3, 1000]))
    table = _random_table(rng, 60)
    keys = rng.sample(list(table.column_names), rng.randint(1, len(table.column_names)))
    decoded = table
    for name in ("name", "other"):
        decoded = decoded.set_column(decoded.schema.get_field_index(name), name, table.column(name).cast(pa.string()))
    # sort_by's row order, read off a row number carried through it.
    numbered = decoded.append_column("row", pa.array(range(table.num_rows), pa.int64()))
    want = numbered.sort_by([(k, "ascending") for k in keys]).column("row").to_pylist()
    assert columns.sort_order(table, keys).tolist() == want


def test_sort_order_keeps_equal_rows_in_place_and_refuses_what_it_cannot_rank() -> None:
    table = pa.table({"name": pa.chunked_array([_chunk(["b", "a", "b"], ["b", "a", "b"]), _chunk(["a"], ["a"])]),
                      "n": pa.array([1, 1, 1, 1], pa.int8())})
    # The dictionary holds "b" twice: both entries rank equal, so rows 0 and 2 keep their order.
    assert columns.sort_order(table, ["name"]).tolist() == [1, 3, 0, 2]
    assert columns.sort_order(table, ["n"]).tolist() == [0, 1, 2, 3]
    assert columns.sort_order(table, []).tolist() == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="cannot order by big"):
        columns.sort_order(pa.table({"big": pa.array([-2**62, 2**62], pa.int64())}), ["big"])
    with pytest.raises(TypeError, match="cannot order by text"):
        columns.sort_order(pa.table({"text": pa.array(["a"])}), ["text"])
    # All null, and one value: a key of one bit, beside the others.
    nulls = pa.table({"n": pa.array([None, None, None, None], pa.int32()), "name": table.column("name")})
    assert columns.sort_order(nulls, ["n", "name"]).tolist() == [1, 3, 0, 2]


@pytest.mark.parametrize("step", [3, 1 << 20])
def test_group_sums_are_bincounts_in_steps(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts and sums of int32 groups and integer or float weights, in one step or many: bincount's, bit for bit
    (the adds in the same order), and a negative group refused as bincount refuses it."""
    import numpy as np

    monkeypatch.setattr(columns, "STEP_ROWS", step)
    rng = np.random.default_rng(7)
    group = rng.integers(0, 13, 50).astype(np.int32)
    for weights in (None, rng.integers(0, 1 << 40, 50), rng.normal(size=50)):
        got = columns.group_sums(group, 20, weights)
        want = np.bincount(group, weights=weights, minlength=20)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    with pytest.raises(ValueError):
        columns.group_sums(np.array([1, -1, 2], dtype=np.int32), 5)


def test_marked_is_which_groups_have_a_member() -> None:
    """marked says what group_sums(...) > 0 says (a group past the last one left unmarked), for none and for a
    group past `count`; a negative group refused, as group_sums refuses it (not marked from the end)."""
    import numpy as np

    rng = np.random.default_rng(9)
    group = rng.integers(0, 13, 50).astype(np.int32)
    got = columns.marked(group, 20)
    assert got.dtype == bool and np.array_equal(got, columns.group_sums(group, 20) > 0) and not got[13:].any()
    assert not columns.marked(np.zeros(0, dtype=np.int32), 4).any()
    with pytest.raises(ValueError):
        columns.marked(np.array([1, -1, 2], dtype=np.int32), 5)
    with pytest.raises(IndexError):
        columns.marked(np.array([1, 5], dtype=np.int32), 5)


@pytest.mark.parametrize("step", [3, 1 << 20])
def test_scatter_is_ufunc_at_in_steps(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """scatter of the least and most of int64 values into int32 groups, in one step or many, is ufunc.at of them
    all at once; no values: a count; a negative group refused."""
    import numpy as np

    monkeypatch.setattr(columns, "STEP_ROWS", step)
    rng = np.random.default_rng(8)
    group = rng.integers(0, 13, 50).astype(np.int32)
    values = rng.integers(-(1 << 50), 1 << 50, 50)
    for ufunc, start in ((np.minimum, np.iinfo(np.int64).max), (np.maximum, np.iinfo(np.int64).min)):
        got, want = np.full(20, start), np.full(20, start)
        columns.scatter(ufunc, got, group, values)
        ufunc.at(want, group, values)
        assert np.array_equal(got, want)
    counted = np.zeros(20, dtype=np.int64)
    columns.scatter(np.add, counted, group)
    assert np.array_equal(counted, np.bincount(group, minlength=20))
    with pytest.raises(ValueError):
        columns.scatter(np.minimum, np.zeros(5), np.array([1, -1, 2], dtype=np.int32), np.ones(3))
