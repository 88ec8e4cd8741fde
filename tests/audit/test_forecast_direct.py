"""The history's large files written past the page cache (mover/audit/forecast/direct.py): the bytes numpy's own
writer would give, read back whole and mapped, on a file system that takes O_DIRECT (it is taken) and on one that
refuses it (tmpfs: the same bytes written the usual way)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mover.audit.forecast import direct


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The flags of every os.open of the module (the real one still does the work)."""
    flags: list[int] = []
    real = os.open

    def spy(path: object, how: int, *rest: object) -> int:
        flags.append(how)
        return real(path, how, *rest)

    monkeypatch.setattr(direct.os, "open", spy)
    return flags


@pytest.mark.parametrize("n", [0, 1, 511, 4096, 100_003])
def test_rows_read_back_as_written_and_mapped(tmp_path: Path, opened: list[int],
                                              monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    # A small stage so that a row spans several writes and the last block is a part one.
    monkeypatch.setattr(direct, "STAGE", 3 * direct.ALIGN)
    rows = [np.arange(n, dtype=np.int64) * (k + 1) - 7 for k in range(3)]
    path = tmp_path / "rows.npy"
    direct.write_rows(path, rows, np.int32)
    assert opened and all(f & os.O_DIRECT for f in opened)  # this file system takes it
    expected = np.stack(rows).astype(np.int32)
    whole, mapped = np.load(path), np.load(path, mmap_mode="r")
    assert whole.dtype == np.int32 and whole.shape == (3, n)
    np.testing.assert_array_equal(whole, expected)
    np.testing.assert_array_equal(mapped, expected)
    assert path.stat().st_size == direct.ALIGN + expected.nbytes  # cut back to its length, not a padded block


def test_columns_are_a_fortran_array(tmp_path: Path) -> None:
    kept = np.asfortranarray(np.random.default_rng(1).normal(size=(10_007, 8)))
    kept[::5, 3] = np.nan
    path = tmp_path / "kept.npy"
    direct.write_rows(path, [kept[:, j] for j in range(8)], np.float64, columns=True)
    read = np.load(path, mmap_mode="c")
    assert read.shape == kept.shape and read.flags.f_contiguous
    np.testing.assert_array_equal(read, kept)


def test_tmpfs_gets_the_same_bytes(tmpfs: Callable[[str, str], Path], tmp_path: Path) -> None:
    # tmpfs refused O_DIRECT before Linux 6.6 and takes it since: either way, the same file.
    disk = tmpfs("mem", "8m")
    rows = [np.linspace(0, 1e12, 50_001), np.full(50_001, np.nan), np.arange(50_001, dtype=float)]
    direct.write_rows(disk / "rows.npy", rows, np.float64)
    direct.write_rows(tmp_path / "rows.npy", rows, np.float64)
    assert (disk / "rows.npy").read_bytes() == (tmp_path / "rows.npy").read_bytes()
    np.testing.assert_array_equal(np.load(disk / "rows.npy"), np.stack(rows))


@pytest.mark.parametrize("where", ["open", "write"])
def test_a_refusal_writes_the_same_bytes_the_usual_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       where: str) -> None:
    """A file system that refuses O_DIRECT (EINVAL at the open, or at the first write: some network ones)."""
    rows = [np.arange(70_001, dtype=float), np.arange(70_001, dtype=float) ** 2]
    direct.write_rows(tmp_path / "direct.npy", rows, np.float64)
    real_open, real_write = os.open, os.write
    direct_fds: set[int] = set()

    def refusing_open(path: object, how: int, *rest: object) -> int:
        if how & os.O_DIRECT and where == "open":
            raise OSError(errno.EINVAL, "Invalid argument")
        fd = real_open(path, how, *rest)
        if how & os.O_DIRECT:
            direct_fds.add(fd)
        return fd

    def refusing_write(fd: int, data: object) -> int:
        if fd in direct_fds:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(direct.os, "open", refusing_open)
    monkeypatch.setattr(direct.os, "write", refusing_write)
    direct.write_rows(tmp_path / "usual.npy", rows, np.float64)
    assert (tmp_path / "usual.npy").read_bytes() == (tmp_path / "direct.npy").read_bytes()
    np.testing.assert_array_equal(np.load(tmp_path / "usual.npy"), np.stack(rows))


def test_another_error_is_raised(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        direct.write_rows(tmp_path / "no such dir" / "x.npy", [np.zeros(3)], np.float64)


def test_rows_of_different_lengths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="different lengths"):
        direct.write_rows(tmp_path / "x.npy", [np.zeros(3), np.zeros(4)], np.float64)
    assert not (tmp_path / "x.npy").exists()
