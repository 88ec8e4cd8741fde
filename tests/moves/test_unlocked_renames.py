"""The swap's two renames run outside the replica lock (mover/moves/future_log_swap.py, `_swap_held`): inside each
rename window (the dir renamed on disk, the Log's paths not yet updated) an append goes through at once, a read
(fetch) answers, and an append that rolls waits for the rename and creates its segment under the new name; every
record ends up in the promoted copy, in order, and the producer snapshot each roll writes (through the PathGuard,
under the dir's new name) reaches the promoted copy byte for byte.

A roll counts as "waiting for the rename" only when its thread is blocked in the PathGuard inside `Log._roll`, with
the replica lock held (`_blocked_in_roll`): a thread merely waiting in the guard may be elsewhere (the producer
state's first build reads snapshots under it, outside the replica lock), and then the swap may switch before it
appends, sending the roll to the copy."""

from __future__ import annotations

import os
import sys
import threading
import traceback
from pathlib import Path

from mover.log.log_manager import LogManager
from mover.moves.future_log_copy import FutureLogCopy
from mover.storage import log as log_module
from mover.storage import path_guard as path_guard_module
from mover.storage.log import Log
from mover.storage.names import DirKind, TopicPartition, parse_partition_dir
from mover.storage.record_batch import validate_batches
from mover.testing.batches import make_batch
from mover.testing.log_manager import alter_replica_log_dir
from mover.testing.records import read_records
from mover.testing.wait import wait_for

TP = TopicPartition("t", 0)
SEGMENT_BYTES = 20_000
# The fill leaves ~6.6 kB in the active segment (18 fill batches a segment): a batch this big rolls in the first
# window, and again in the second, where the active segment holds the first window's roll and little else.
ROLL_BYTES = 14_000
PRODUCER_ID = 7
# Another producer, whose batch before the move builds the partition's producer state: the rollers' appends then
# read nothing outside the replica lock (`ProducerStateManager.prepare` would, in the source's PathGuard).
PRELOAD_PRODUCER_ID = 8


class _Window:
    """What happened inside one rename window."""

    def __init__(self, log: Log, old: Path, new: Path) -> None:
        self.log, self.old, self.new = log, old, new
        self.roller: threading.Thread | None = None
        self.rolled_into: Path | None = None
        self.snapshot: Path | None = None  # the producer snapshot the roll wrote
        self.snapshot_bytes: bytes | None = None  # its content as the roll left it
        self.errors: list[BaseException] = []


def _stack_of(t: threading.Thread) -> str:
    frame = sys._current_frames().get(t.ident or 0)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)"


def _blocked_in_roll(t: threading.Thread, log: Log) -> bool:
    """`t` is blocked entering `log`'s PathGuard from `Log._roll` (which runs under the replica lock, in
    `Log.append`): the innermost frame is the guard's `__enter__`, called from `_roll`."""
    if not log.path_guard.waiting:
        return False
    frame = sys._current_frames().get(t.ident or 0)
    if frame is None or frame.f_code.co_name != "__enter__" or frame.f_code.co_filename != path_guard_module.__file__:
        return False
    caller = frame.f_back
    return (caller is not None and caller.f_code.co_name == "_roll" and caller.f_code.co_filename == log_module.__file__
            and caller.f_locals.get("self") is log)


def test_appends_rolls_and_reads_inside_both_rename_windows(make_config, manager_of, monkeypatch) -> None:
    # The retired source stays on disk to compare the first roll's snapshot with.
    cfg = make_config(**{"log.segment.bytes": SEGMENT_BYTES, "log.segment.delete.delay.ms": 600_000})
    m: LogManager = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    m.create_topic("t", 1)
    values: list[bytes] = []

    def append(vs: list[bytes], **batch: int) -> None:
        m.append(TP, make_batch(vs, **batch))
        values.extend(vs)

    append([b"preload".ljust(100, b"x")], producer_id=PRELOAD_PRODUCER_ID, producer_epoch=0, base_sequence=0)
    assert m.replicas[TP].producer_state.loaded
    for b in range(1, 60):
        append([f"fill-{b}-{i}".encode().ljust(100, b"x") for i in range(10)])
    src = m.replicas[TP].log_dir
    dst = d2 if src == d1 else d1
    windows: list[_Window] = []

    def on_thread(fn, win: _Window) -> threading.Thread:  # noqa: ANN001
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported to the test
                win.errors.append(e)
        t = threading.Thread(target=run)
        t.start()
        return t

    def rename_with_traffic(old: Path, new: Path) -> None:
        os.rename(old, new)
        serving = m.replicas[TP].log
        assert serving is not None
        # This window's own record: a roller of an earlier window may still be finishing on its thread.
        w = _Window(serving, old, new)
        windows.append(w)
        try:
            traffic(w, len(windows))
        except BaseException as e:  # noqa: BLE001 - reported by the test; raising here would break the rename
            w.errors.append(e)

    def traffic(w: _Window, n: int) -> None:
        serving = w.log
        assert serving.dir == w.old, "inside the window the Log still has the old name"
        # A plain append, from another thread, ends inside the window: the swap does not hold the replica lock.
        plain = [f"win{n}-plain-{i}".encode() for i in range(3)]
        assert serving.active_segment.size + len(make_batch(plain)) <= SEGMENT_BYTES, "the test's plain append rolls"
        t = on_thread(lambda: append(plain), w)
        t.join(30)
        if t.is_alive():
            raise AssertionError(f"an append waited for a rename, in:\n{_stack_of(t)}")
        # A fetch reads through the pinned descriptors.
        data = serving.read(serving.log_start_offset, 1 << 20).read()
        assert validate_batches(data), "a read inside the window returned no whole batch"

        # An append that rolls creates a file by path: it waits for the rename (holding the replica lock). Its
        # batch is an idempotent producer's, so the roll also writes a producer snapshot, by path.
        big = [f"win{n}-roll-".encode().ljust(ROLL_BYTES, b"r")]
        assert serving.active_segment.size + len(make_batch(big)) > SEGMENT_BYTES, "the test's roll does not roll"

        def roll() -> None:
            append(big, producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=n - 1)
            active = serving.active_segment
            w.rolled_into = active.log_path.parent
            # Named by the log end offset after the append (Kafka's snapshot name), beside the new segment.
            w.snapshot = active.log_path.parent / f"{serving.log_end_offset:020d}.snapshot"
            assert w.snapshot.exists(), "the roll's producer snapshot is not beside its segment"
            w.snapshot_bytes = w.snapshot.read_bytes()

        w.roller = on_thread(roll, w)
        try:
            wait_for(lambda: _blocked_in_roll(w.roller, serving) or not w.roller.is_alive(), timeout=30,
                     message="the roll to block in the PathGuard or end")
        except Exception as e:
            raise AssertionError(f"{e}; the roller is in:\n{_stack_of(w.roller)}") from e
        assert w.roller.is_alive(), "a roll ran inside the window, by the old name"
        # Blocked in the roll, so holding the replica lock: nobody else may take it (this thread does not hold it).
        lock = m.replicas[TP].lock
        if lock.acquire(blocking=False):
            lock.release()
            raise AssertionError(f"the roll waits for the rename without the replica lock, in:\n{_stack_of(w.roller)}")

    def errors() -> str:
        return "".join("".join(traceback.format_exception(e)) for w in windows for e in w.errors)

    monkeypatch.setattr(log_module, "_rename", rename_with_traffic)
    assert alter_replica_log_dir(m, TP, str(dst)) == 0
    # A window's failure is reported at once (its own message and stack), not as a move that never ends.
    # The outer wait outlasts a window's own (30 s).
    wait_for(lambda: m.replicas[TP].move is None or errors(), timeout=120, message="the move")
    assert not errors(), errors()
    assert len(windows) == 2, [w.old.name for w in windows]
    for win in windows:
        if win.roller is not None:
            win.roller.join(30)
    assert not errors(), errors()
    assert all(w.roller is not None and not w.roller.is_alive() for w in windows), "a roll never ended"
    retire, promote = windows
    assert retire.old == src / "t-0" and parse_partition_dir(retire.new.name).kind is DirKind.DELETE
    assert retire.rolled_into == retire.new  # the source, renamed, took the roll
    assert parse_partition_dir(promote.old.name).kind is DirKind.MOVE and promote.new == dst / "t-0"
    assert promote.rolled_into == dst / "t-0"  # the copy, serving under its final name
    # Both rolls' producer snapshots are in the promoted copy (the first was copied from the retired source).
    assert retire.snapshot is not None and promote.snapshot is not None
    assert {retire.snapshot.name, promote.snapshot.name} <= {p.name for p in (dst / "t-0").glob("*.snapshot")}
    # The first one byte for byte as the source has it (the source, retired, is still on disk).
    assert retire.snapshot.read_bytes() == retire.snapshot_bytes == (dst / "t-0" / retire.snapshot.name).read_bytes()
    assert m.replicas[TP].log_dir == dst and m.replicas[TP].log is promote.log
    assert [v for _, v in read_records(dst / "t-0")] == values
    append([b"after"])
    assert [v for _, v in read_records(dst / "t-0")] == values


def test_a_failure_after_the_retirement_rename_gives_the_source_its_name_back(make_config, manager_of,
                                                                              monkeypatch) -> None:
    """The swap fails between the retirement rename (the source serving as `-delete`) and the switch: the source is
    renamed back and keeps serving, the `.move` is deleted, and the partition moves fine afterwards."""
    cfg = make_config(**{"log.segment.bytes": SEGMENT_BYTES})
    m: LogManager = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    m.create_topic("t", 1)
    values = [f"v{i}".encode().ljust(100, b"x") for i in range(300)]
    for i in range(0, 300, 10):
        m.append(TP, make_batch(values[i:i + 10]))
    src = m.replicas[TP].log_dir
    dst = d2 if src == d1 else d1
    original = FutureLogCopy.copy_round
    seen: list[DirKind] = []

    def fail_under_the_lock(self, source, *, locked, hold_active=False):  # noqa: ANN001
        if locked:
            seen.append(parse_partition_dir(source.dir.name).kind)
            m.append(TP, make_batch([b"inside"]))  # the lock is an RLock: this thread may append
            values.append(b"inside")
            raise _Injected("injected")
        return original(self, source, locked=locked, hold_active=hold_active)

    monkeypatch.setattr(FutureLogCopy, "copy_round", fail_under_the_lock)
    assert alter_replica_log_dir(m, TP, str(dst)) == 0
    wait_for(lambda: m.replicas[TP].move is None, message="the failed move")
    assert seen == [DirKind.DELETE]  # it failed after the retirement rename
    assert m.replicas[TP].log_dir == src and m.replicas[TP].log.dir == src / "t-0"
    assert sorted(os.listdir(src)).count("t-0") == 1
    assert not [n for n in os.listdir(src) if parse_partition_dir(n) is not None and n != "t-0"]
    assert not [n for n in os.listdir(dst) if parse_partition_dir(n) is not None]
    m.append(TP, make_batch([b"after"]))
    values.append(b"after")
    assert [v for _, v in read_records(src / "t-0")] == values
    monkeypatch.undo()
    assert alter_replica_log_dir(m, TP, str(dst)) == 0
    wait_for(lambda: m.replicas[TP].move is None and m.replicas[TP].log_dir == dst, message="the move")
    assert [v for _, v in read_records(dst / "t-0")] == values


class _Injected(Exception):
    pass
