from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mover.storage.checkpoint import read_checkpoint
from mover.storage.errors import (
    BrokerIdMismatchError,
    ClusterIdMismatchError,
    CorruptMetaPropertiesError,
    LogDirLockedError,
    StorageError,
)
from mover.storage.log_dir import LogDir, parse_properties
from mover.storage.names import (
    CHECKPOINT_FILES,
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    TopicPartition,
)

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_first_open_writes_meta_properties(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    d.open(3, "clusterXYZ")
    assert d.online
    props = parse_properties((tmp_path / "meta.properties").read_text())
    assert props == {"version": "0", "broker.id": "3", "cluster.id": "clusterXYZ"}
    assert not (tmp_path / "meta.properties.tmp").exists()
    d.close()
    assert not d.online
    again = LogDir(tmp_path)
    again.open(3, "clusterXYZ")  # the same broker reopens
    assert again.cluster_id == "clusterXYZ"
    again.close()


def test_broker_id_mismatch(tmp_path: Path) -> None:
    first = LogDir(tmp_path)
    first.open(1, None)
    first.close()
    with pytest.raises(BrokerIdMismatchError, match="broker 1"):
        LogDir(tmp_path).open(2, None)


def test_accepts_kafka_kraft_meta_properties(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Tue Jan 02 10:00:00 UTC 2024\nnode.id=5\ndirectory.id=abc\nversion=1\ncluster.id=Q1\n")
    d = LogDir(tmp_path)
    d.open(5, "Q1")
    d.close()
    with pytest.raises(BrokerIdMismatchError):
        LogDir(tmp_path).open(6, "Q1")
    with pytest.raises(ClusterIdMismatchError):
        LogDir(tmp_path).open(5, "other")
    (tmp_path / "meta.properties").write_text("version=0\n")
    with pytest.raises(CorruptMetaPropertiesError):
        LogDir(tmp_path).open(5, None)


def test_kafkas_kraft_meta_properties_is_kept_byte_for_byte(tmp_path: Path) -> None:
    # What `kafka-storage.sh format` writes (Kafka 3.7): version 1, node.id and a directory.id per log dir. A Kafka
    # broker started on the dir again must find its own directory.id, or the controller loses track of the dir.
    text = ("#\n#Wed Nov 25 22:56:22 UTC 2026\nnode.id=1\ndirectory.id=_3reDPc6eRAmjNPcpv6GCQ\nversion=1\n"
            "cluster.id=JgBmUrmgTweOqe8s_zNFBQ\n")
    (tmp_path / "meta.properties").write_text(text)
    d = LogDir(tmp_path)
    d.open(1, None)
    assert d.cluster_id == "JgBmUrmgTweOqe8s_zNFBQ" and d.broker_id == 1
    d.write_checkpoints({A0: 5}, {A0: 0})
    d.close()
    assert (tmp_path / "meta.properties").read_text() == text


def test_kafkas_clean_shutdown_marker_is_removed_durably_on_open(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Kafka skips recovering its logs when it finds the marker; once moverd writes them it would be a lie (a moverd
    # crash can leave a torn tail a Kafka broker must recover).
    import mover.storage.log_dir as log_dir_module

    (tmp_path / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":7}')
    synced: list[Path] = []
    real = log_dir_module.fsync_dir
    monkeypatch.setattr(log_dir_module, "fsync_dir", lambda p: (synced.append(Path(p)), real(p)))
    d = LogDir(tmp_path)
    d.open(0, None)
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    assert tmp_path in synced
    d.close()


def test_second_opener_in_process_is_refused(tmp_path: Path) -> None:
    first = LogDir(tmp_path)
    first.open(1, "c")
    second = LogDir(tmp_path)
    with pytest.raises(LogDirLockedError, match=str(tmp_path)):
        second.open(1, "c")
    assert not second.online
    first.close()
    second.open(1, "c")  # free once the first lets go
    second.close()


def test_second_process_is_refused(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    d.open(1, "c")
    script = textwrap.dedent(f"""
        from pathlib import Path
        from mover.storage.errors import LogDirLockedError
        from mover.storage.log_dir import LogDir
        try:
            LogDir(Path({str(tmp_path)!r})).open(1, "c")
        except LogDirLockedError as e:
            print("LOCKED", e)
        else:
            print("OPENED")
    """)
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("LOCKED") and str(tmp_path) in out.stdout
    d.close()
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("OPENED")


def test_locked_error_is_a_storage_error_not_an_os_error() -> None:
    # The daemon refuses to start on it; an OSError would only mark the dir offline.
    assert issubclass(LogDirLockedError, StorageError) and not issubclass(LogDirLockedError, OSError)


def test_checkpoints_round_trip(tmp_path: Path) -> None:
    (tmp_path / CLEANER_OFFSET_CHECKPOINT).write_text("0\n2\na 0 7\ngone 0 3\n")
    (tmp_path / (RECOVERY_POINT_CHECKPOINT + ".tmp")).write_text("garbage from a crash")
    d = LogDir(tmp_path)
    d.open(1, "c")
    assert d.read_checkpoints() == {
        RECOVERY_POINT_CHECKPOINT: {}, REPLICATION_OFFSET_CHECKPOINT: {}, LOG_START_OFFSET_CHECKPOINT: {},
        CLEANER_OFFSET_CHECKPOINT: {A0: 7, TopicPartition("gone", 0): 3}}
    d.write_checkpoints({A0: 10, A1: 20, B0: 0}, {A0: 2, A1: 0, B0: 0}, {A0: 11, A1: 20, B0: 0})
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {A0: 10, A1: 20, B0: 0}
    assert read_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT) == {A0: 11, A1: 20, B0: 0}
    assert read_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {A0: 2, A1: 0, B0: 0}
    assert read_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT) == {A0: 7}
    d.close()
    again = LogDir(tmp_path)
    again.open(1, "c")
    assert again.checkpoints[RECOVERY_POINT_CHECKPOINT] == {A0: 10, A1: 20, B0: 0}
    again.write_checkpoints({A0: 12}, {A0: 2})  # the replication offset defaults to the recovery point
    assert read_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT) == {A0: 12}
    assert not [n for n in CHECKPOINT_FILES if (tmp_path / (n + ".tmp")).exists()]  # the stray tmp was reused
    again.close()


def test_corrupt_checkpoint_reads_as_empty(tmp_path: Path) -> None:
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_text("0\n5\na 0 1\n")
    d = LogDir(tmp_path)
    d.open(1, "c")
    assert d.checkpoints[RECOVERY_POINT_CHECKPOINT] == {}
    d.close()


def test_usage(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    d.open(1, "c")
    total, usable = d.usage()
    assert total > 0 and 0 <= usable <= total
    d.close()


def test_relative_path_is_refused() -> None:
    with pytest.raises(ValueError):
        LogDir(Path("relative/dir"))


def test_concurrent_checkpoint_writers(tmp_path: Path) -> None:
    """Moves and housekeeping checkpoint from different threads: they share `<name>.tmp` and must not race."""
    import threading

    d = LogDir(tmp_path)
    d.open(1, "c")
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(10):
                d.write_checkpoints({A0: k * 1000 + i}, {A0: 0})
        except BaseException as e:  # noqa: BLE001 - reported to the test thread
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT)[A0] % 1000 == 9
    d.close()


def test_os_errors_propagate_unchanged(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LogDir(tmp_path / "missing").open(1, "c")
