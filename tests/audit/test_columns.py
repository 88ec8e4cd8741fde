"""mover/audit/columns.py: a chunked dictionary column read a step at a time gives each row the index of its own
name in one dictionary for all chunks, whatever the chunks' own dictionaries and the steps' sizes."""

from __future__ import annotations

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
