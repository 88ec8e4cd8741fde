from __future__ import annotations

import os
from pathlib import Path

import pytest

from mover.storage import files
from mover.storage.checkpoint import read_checkpoint, write_checkpoint
from mover.storage.errors import CorruptCheckpointError
from mover.storage.names import TopicPartition


def test_round_trip_in_kafka_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    entries = {TopicPartition("b.t-x_y", 1): 5, TopicPartition("a", 0): 0, TopicPartition("a", 10): 2**40}
    write_checkpoint(path, entries)
    assert read_checkpoint(path) == entries
    assert path.read_text() == "0\n3\na 0 0\na 10 1099511627776\nb.t-x_y 1 5\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_missing_is_empty_and_empty_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    assert read_checkpoint(path) == {}
    write_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_checkpoint(path) == {}


def test_reads_a_kafka_written_file(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("0\n2\nfoo 0 12\nfoo 1 0\n")
    assert read_checkpoint(path) == {TopicPartition("foo", 0): 12, TopicPartition("foo", 1): 0}


def test_an_empty_file_as_kafka_creates_them_is_empty(tmp_path: Path) -> None:
    # A Kafka broker creates its checkpoint files empty (cleaner-offset-checkpoint stays so) and reads them as {}.
    for text in ("", "0\n"):
        (tmp_path / "cp").write_text(text)
        assert read_checkpoint(tmp_path / "cp") == {}


@pytest.mark.parametrize("text", ["1\n", "1\n0\n", "0\n2\nfoo 0 1\n", "0\n1\nfoo 0\n", "0\n1\nfoo x 1\n",
                                  "zero\n0\n", "0\n1\nfoo 0 1 2\n"])
def test_malformed_is_an_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        read_checkpoint(path)


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash before the rename leaves the old checkpoint whole; the tmp is written and fsynced first."""
    path = tmp_path / "cp"
    old = {TopicPartition("t", 0): 1}
    write_checkpoint(path, old)
    events: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def crash_rename(src: object, dst: object) -> None:
        events.append("rename")
        raise OSError(5, "simulated crash")

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", crash_rename)
    with pytest.raises(OSError):
        write_checkpoint(path, {TopicPartition("t", 0): 999})
    assert events == ["fsync", "rename"]
    assert read_checkpoint(path) == old
    # The stray tmp is ignored by readers and overwritten by the next write.
    assert (tmp_path / "cp.tmp").exists()
    monkeypatch.setattr(os, "rename", real_rename)
    write_checkpoint(path, {TopicPartition("t", 0): 2})
    assert read_checkpoint(path) == {TopicPartition("t", 0): 2}
    assert events[2:] == ["fsync", "fsync"]  # the new tmp before its rename, then the directory


def test_dir_is_fsynced_after_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    real_rename, real_fsync_dir = os.rename, files.fsync_dir
    monkeypatch.setattr(os, "rename", lambda a, b: (order.append("rename"), real_rename(a, b))[1])
    monkeypatch.setattr(files, "fsync_dir",
                        lambda p: (order.append(f"fsync_dir {Path(p).name}"), real_fsync_dir(p))[1])
    write_checkpoint(tmp_path / "cp", {TopicPartition("t", 0): 1})
    assert order == ["rename", f"fsync_dir {tmp_path.name}"]
