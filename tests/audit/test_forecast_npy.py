"""The kept history's row files written by write(2) (mover/audit/forecast/npy.py): the same bytes np.save writes for
the stacked rows, whatever each row's type and however it is laid out, read back mapped; a row of another length is
an error before the file is whole (the manifest never names a file its write did not finish)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mover.audit.forecast import npy as forecast_npy


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64])
def test_the_rows_written_are_np_saves_bytes(tmp_path: Path, dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forecast_npy, "ROWS_AT_ONCE", 7)  # a row converted in pieces, one of them short
    rng = np.random.default_rng(3)
    grid = np.asfortranarray(rng.integers(0, 200, size=(3, 50)))
    rows = [rng.integers(0, 200, 50).astype(np.int64),  # converted
            np.arange(50, dtype=dtype)[::-1],  # not contiguous
            grid[1],  # a row of a Fortran-ordered array: strided
            np.full(50, 9, dtype=dtype)]  # taken as it is
    forecast_npy.save_rows(tmp_path / "rows.npy", rows, dtype)
    np.save(tmp_path / "stacked.npy", np.stack([np.asarray(r).astype(dtype) for r in rows]))
    assert (tmp_path / "rows.npy").read_bytes() == (tmp_path / "stacked.npy").read_bytes()
    mapped = np.load(tmp_path / "rows.npy", mmap_mode="r")
    assert mapped.dtype == dtype and mapped.shape == (4, 50)
    assert np.array_equal(mapped[2], grid[1].astype(dtype))


def test_no_rows_and_empty_rows(tmp_path: Path) -> None:
    forecast_npy.save_rows(tmp_path / "none.npy", [], np.int32, 0)
    assert np.load(tmp_path / "none.npy").shape == (0, 0)
    forecast_npy.save_rows(tmp_path / "empty.npy", [np.zeros(0), np.zeros(0)], np.float64)
    assert np.load(tmp_path / "empty.npy").shape == (2, 0)


def test_a_row_of_another_length_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"a row of shape \(4,\), not \(5,\)"):
        forecast_npy.save_rows(tmp_path / "bad.npy", [np.zeros(5), np.zeros(4)], np.float64)
