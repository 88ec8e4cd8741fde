"""The driver's kept history, a file per snapshot (mover/audit/forecast/columns.py): rows of deleted partitions kept
until they are a quarter of all and then compacted away, the kept fits written as patches of the rows found again
(the same fits and forecast as writing them whole), a new partition's keys in a file of their own, a second
forecast of the same root refused while one holds it, and a forecast killed (kill -9) before or after its
manifest's rename, or at random times, leaving a history the next one takes up whole; every time the same forecast
as reading every snapshot. And the command on Spark's steps (a driver that would not hold the history), cold and
taking the driver's history up."""

from __future__ import annotations

import math
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mover.audit import (
    forecast,
    snapshot,
    synth_history,
)
from mover.audit.errors import ForecastBusy
from mover.audit.forecast import append as forecast_append
from mover.audit.forecast import columns as forecast_columns
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import held as forecast_held
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import kept as forecast_kept
from mover.audit.forecast import kept_files as forecast_kept_files
from mover.testing.forecast_history import GB, cold_then_newest, one_partition_a_disk, same_as_reading_every_snapshot
from mover.testing.wait import wait_for


def _named(data: dict) -> set[str]:
    """The files a version-2 manifest names (its state, replica map and settings too, when it has them)."""
    dirs = [data["dirs"]] if isinstance(data["dirs"], str) else data["dirs"]  # an older driver's: one file
    return {forecast_history.MANIFEST, *data["keys"], *data["sizes"], data["kept"], *dirs,
            *(patch[0] for patch in data.get("kept_patches", [])),
            *([data["state"]] if "state" in data else []), *([data["copies"]] if "copies" in data else []),
            *data.get("state_rows", []),
            *([data["replica_map"]["map"], data["replica_map"]["disks"]] if "replica_map" in data else []),
            *([data["replica_map"]["by_row"]] if data.get("replica_map", {}).get("by_row") else []),
            *([data["retention"]["file"]] if "retention" in data else [])}


def _growing(topics: int, gone: int, count: int = 10) -> dict[str, list[float | None]]:
    """`topics` partitions growing steadily, each at its own rate (a kept fit, carried over a window that shrinks,
    is then exact), the first `gone` of them deleted after the third snapshot."""
    return {f"t{k}": [None if k < gone and i > 2 else 100 * GB + (k + 1) * GB * i for i in range(count)]
            for k in range(topics)}


@pytest.mark.parametrize(("gone", "rows_after"), [(1, 6), (3, 3)])
def test_rows_of_deleted_partitions_kept_then_compacted(tmp_path: Path, monkeypatch, gone: int,  # noqa: ANN001
                                                        rows_after: int) -> None:
    """A window that slides past a deleted partition's last point: its row stays, its fit cleared (1 of 6: under
    a quarter) or every file is written again without such rows (3 of 6); the forecast is the cold one either way
    (every fit found again: REFIT_AFTER 1)."""
    monkeypatch.setattr(forecast_kept, "REFIT_AFTER", 1)
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, _growing(6, gone))
    paths = snapshot.list_snapshots(root)
    first = forecast_driver.compute(paths)
    assert first.kept == "rebuilt" and forecast_columns.manifest(root)["rows"] == 6
    recent = forecast.window(paths[-1], 30.0)  # from the fifth snapshot on: the deleted ones have no point
    assert len(recent) == 6
    slid = forecast_driver.compute(recent)
    assert slid.kept == "appended 0"
    same_as_reading_every_snapshot(slid)
    data = forecast_columns.manifest(root)
    assert data["rows"] == rows_after and data["snapshots"] == [p.name for p in recent]
    kept = forecast_columns.kept_fits(root)
    assert kept is not None
    assert np.isnan(kept[:gone]).all() if rows_after == 6 else np.isfinite(kept[:, 0]).all()
    # Only the files the manifest names are left.
    named = _named(data)
    assert {p.name for p in forecast_history.where(root).iterdir()} == named
    assert forecast_driver.compute(recent).kept == "kept"


def _appended_one_by_one(root: Path, since: float, start: int) -> list[tuple[np.ndarray, pd.DataFrame, dict]]:
    """Each window of `since` hours from the `start`-th snapshot on, forecast as a run at each new snapshot does
    (the first cold, then each snapshot appended): the kept fits as read back, the disks' forecast, the manifest."""
    every = snapshot.list_snapshots(root)
    aside = root.parent / f"{root.name}-aside"
    aside.mkdir()
    for path in every[start + 1:]:
        path.rename(aside / path.name)
    out = []
    for i in range(start, len(every)):
        if i > start:
            (aside / every[i].name).rename(every[i])
        result = forecast_driver.compute(forecast.window(every[i], since), since)
        assert result.kept == ("rebuilt" if i == start else "appended 1"), (i, result.kept)
        kept = forecast_columns.kept_fits(root)
        assert kept is not None
        out.append((kept, result.disks, forecast_columns.manifest(root)))
    return out


def test_kept_fits_written_as_patches_are_the_ones_written_whole(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A synth fleet (daily cycles, bursts, noise) appended a snapshot at a time: with the rows found again written
    as patches (here up to as many as the rows: a third to nine tenths of this small fleet's are found again at each
    append), the kept fits read back and every disk's forecast are the ones writing them whole at every append
    gives; both patches and whole writes happen."""
    shape = synth_history.GrowthShape(clusters=1, brokers=3, disks=2, replicas_per_disk=40, days=4, every_hours=2,
                                      seed=3)
    monkeypatch.setattr(forecast_append, "MOST_CHANGED", 1.0)  # the append from the state however many change
    runs = {}
    for share in (0.0, 1.0):
        root = tmp_path / f"share-{share}" / "snapshots"
        synth_history.write_history(shape, root)
        monkeypatch.setattr(forecast_kept_files, "PATCH_SHARE", share)
        runs[share] = _appended_one_by_one(root, 48.0, len(snapshot.list_snapshots(root)) - 16)
    patched = [len(data["kept_patches"]) for _, _, data in runs[1.0]]
    assert all(n == 0 for _, _, data in runs[0.0] for n in [len(data["kept_patches"])])
    assert max(patched) >= 2 and 0 in patched[1:], patched  # patches taken, then the fits written whole again
    for step, ((whole, disks, _), (mine, my_disks, _)) in enumerate(zip(runs[0.0], runs[1.0], strict=True)):
        np.testing.assert_allclose(mine, whole, rtol=1e-9, atol=1e-6, equal_nan=True, err_msg=f"append {step}")
        pd.testing.assert_frame_equal(my_disks, disks, rtol=1e-9)


def test_a_second_forecast_of_the_root_is_refused(tmp_path: Path) -> None:
    """While one forecast holds the root's kept history, `mover-audit forecast` of it (another process) exits 1
    saying so, and writes nothing; once it is free, the forecast runs."""
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, _growing(3, 0, count=6))
    command = [sys.executable, "-m", "mover.audit", "forecast", "--snapshots", str(root), "--out",
               str(tmp_path / "out"), "--master", "local[1]"]
    with forecast_columns.locked(root):
        busy = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert busy.returncode == 1, busy.stderr
    assert "another forecast is updating the kept history" in busy.stderr and len(busy.stderr.splitlines()) == 1
    assert not forecast_history.where(root).exists()
    done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert done.returncode == 0, done.stderr
    assert forecast_columns.manifest(root) is not None



def test_the_history_written_behind_the_disks_rows_holds_the_root_until_it_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept history is written on a thread of its own while the disks' rows are found (forecast_held.keep run
    behind them, mover/audit/threads.py): until the write has ended the forecast neither returns nor lets go of the
    root (a second forecast meanwhile is refused); then the history is there and the root free."""
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, _growing(3, 0, count=6))
    writing, release = threading.Event(), threading.Event()
    real = forecast_held.keep

    def held_write(where: Path, held: forecast_held.Held) -> None:
        writing.set()
        assert release.wait(120)
        real(where, held)

    monkeypatch.setattr(forecast_held, "keep", held_write)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(forecast_driver.compute, snapshot.list_snapshots(root))
        wait_for(writing.is_set, message="the history's write started")
        with pytest.raises(ForecastBusy), forecast_columns.locked(root):
            pass
        assert not running.done()  # it cannot return before the write it waits for
        release.set()
        result = running.result(timeout=300)
    assert result.kept == "rebuilt" and forecast_columns.manifest(root) is not None
    with forecast_columns.locked(root):  # free again
        pass


def test_new_columns_written_while_the_fits_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new columns of sizes are written (forecast_columns.write_columns, on a thread of their own) before the
    history's write, which names them and writes none again; columns written by a forecast that then failed (as a
    crash leaves them) are named by no manifest and removed by the next write, which forecasts as reading every
    snapshot does."""
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, _growing(3, 0, count=7))
    paths = snapshot.list_snapshots(root)
    cold_then_newest(root)  # the history of every snapshot but the newest
    where = forecast_history.where(root)
    early: list[str] = []
    real_columns = forecast_columns.write_columns

    def columns_seen(at: Path, sizes: forecast_columns.Grid, found: object = None) -> None:
        real_columns(at, sizes, found)  # type: ignore[arg-type]
        early.extend(f for f in sizes.files if f is not None and (where / f).is_file())

    def failing_keep(at: Path, held: forecast_held.Held) -> None:
        raise OSError("the disk went away")

    with monkeypatch.context() as m:
        m.setattr(forecast_columns, "write_columns", columns_seen)
        m.setattr(forecast_held, "keep", failing_keep)
        with pytest.raises(OSError):
            forecast_driver.compute(paths)
    before = forecast_columns.manifest(root)
    orphans = {p.name for p in where.iterdir()} - _named(before)
    assert orphans and all(o.startswith("sizes-") for o in orphans)  # written early, named by no manifest
    saves: list[str] = []
    real_save = np.save

    def counted_save(path: Path, *args: object, **kwargs: object) -> None:
        saves.append(Path(path).name)
        real_save(path, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(forecast_columns, "write_columns", columns_seen)
        m.setattr(np, "save", counted_save)
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    after = forecast_columns.manifest(root)
    new = set(after["sizes"]) - set(before["sizes"])
    # Written early, and once: the history's write named it.
    assert len(new) == 1 and new <= set(early) and all(saves.count(name) == 1 for name in new)
    assert {p.name for p in where.iterdir()} == _named(after)  # the orphans gone, nothing unnamed
    same_as_reading_every_snapshot(appended)


_ON_SPARK = """
import os, sys
from mover.audit import cli
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import held as forecast_held
from mover.audit.forecast import history as forecast_history
forecast_driver.fits = lambda *a, **k: False  # as on a machine whose memory would not hold the driver's history
if os.environ.get("TAKE_UP"):
    def rebuilt(*a, **k):
        raise AssertionError("every snapshot read again, the history not taken up")
    forecast_history.build = forecast_history._per_snapshot = rebuilt
sys.exit(cli.main(sys.argv[1:]))
"""


def test_the_command_on_sparks_steps_cold_then_taking_up_the_drivers_history(tmp_path: Path) -> None:
    """`mover-audit forecast` where the driver would not hold the history: Spark's steps, in a session the command
    deferred (spark.Deferred: no JVM for a driver's forecast), started before their first column is built. Cold
    (Spark's history, version 1, written), then the driver's forecast (its own, version 2, written over it), then
    Spark's again taking the driver's up as written (no snapshot read again): the same disks each time."""
    from mover.audit.forecast import layout as layout

    root = tmp_path / "snapshots"
    one_partition_a_disk(root, _growing(3, 0, count=6))

    def run(name: str, spark_steps: bool, take_up: bool = False) -> pd.DataFrame:
        how = ["-c", _ON_SPARK] if spark_steps else ["-m", "mover.audit"]
        env = {**os.environ, **({"TAKE_UP": "1"} if take_up else {})}
        done = subprocess.run([sys.executable, *how, "forecast", "--snapshots", str(root), "--out",
                               str(tmp_path / name), "--master", "local[1]", "--shuffle-partitions", "2"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        return pd.read_parquet(tmp_path / name / layout.DISKS_FILE)

    cold = run("cold", spark_steps=True)
    assert forecast_history.read_manifest(root) is not None and forecast_columns.manifest(root) is None
    on_driver = run("driver", spark_steps=False)
    assert forecast_columns.manifest(root) is not None and forecast_history.read_manifest(root) is None
    taken_up = run("taken-up", spark_steps=True, take_up=True)
    assert forecast_history.read_manifest(root) is not None
    for other in (on_driver, taken_up):
        pd.testing.assert_frame_equal(cold, other, check_exact=False, rtol=1e-9)


# The killed forecasts find every fit again (the cold answer) and write every kept fit: whole, or as a patch of
# every row when PATCHES is set (forecast_kept_files.PATCH_SHARE), so that a kill can land in either write.
_REFIT_ALL = """
import os
from mover.audit.forecast import append as forecast_append
from mover.audit.forecast import kept as forecast_kept
from mover.audit.forecast import kept_files as forecast_kept_files
forecast_kept.REFIT_AFTER = 1
if os.environ.get("PATCHES"):
    forecast_kept_files.PATCH_SHARE = forecast_append.MOST_CHANGED = 1.0
"""

_KILLED = _REFIT_ALL + """
import os, pathlib, signal, sys
from mover.audit import snapshot
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import held as forecast_held
when = sys.argv[2]
rename, unlink = pathlib.Path.rename, pathlib.Path.unlink
def renaming(self, target):
    if when == "before" and self.name.startswith(".manifest."):
        os.kill(os.getpid(), signal.SIGKILL)  # every new file written, the manifest not yet swapped
    return rename(self, target)
def unlinking(self, missing_ok=False):
    if when == "after":
        os.kill(os.getpid(), signal.SIGKILL)  # the new manifest in place, the old files not yet removed
    return unlink(self, missing_ok=missing_ok)
pathlib.Path.rename, pathlib.Path.unlink = renaming, unlinking
forecast_driver.compute(snapshot.list_snapshots(pathlib.Path(sys.argv[1])))
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_forecast_killed_while_writing_leaves_a_whole_history(tmp_path: Path, monkeypatch,  # noqa: ANN001
                                                                when: str) -> None:
    """A forecast appending a snapshot is killed (-9) with its new files written and the manifest not swapped yet,
    or just after the swap: the next forecast finds the old history (and appends again) or the new one (kept),
    removes what the dead one left, and gives the cold forecast's answer (every fit found again: REFIT_AFTER 1)."""
    monkeypatch.setattr(forecast_kept, "REFIT_AFTER", 1)
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, _growing(4, 0, count=8))
    cold_then_newest(root)
    killed = subprocess.run([sys.executable, "-c", _KILLED, str(root), when], capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=300, cwd=Path(__file__).parents[2])
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    paths = snapshot.list_snapshots(root)
    again = forecast_driver.compute(paths)
    assert again.kept == ("appended 1" if when == "before" else "kept")
    same_as_reading_every_snapshot(again)
    data = forecast_columns.manifest(root)
    named = _named(data)
    # The dead forecast's files (before) or the old history's (after) are gone once a later forecast writes.
    if when == "after":
        assert forecast_driver.compute(forecast.window(paths[-1], 24.0)).kept == "appended 0"
        data = forecast_columns.manifest(root)
        named = _named(data)
    assert {p.name for p in forecast_history.where(root).iterdir()} == named
    assert os.path.exists(root / forecast_columns.LOCK)


@pytest.mark.parametrize("room", [True, False])
def test_a_partition_new_in_an_appended_snapshot_gets_a_keys_file(tmp_path: Path, monkeypatch,  # noqa: ANN001
                                                                  room: bool) -> None:
    """A partition first seen in an appended snapshot: its row's keys are a file of their own, and the next append
    reads both files (their names' dictionaries unified) and finds every partition's row: the cold forecast. Its
    kept fit goes in a patch, in the kept fits' file's room for rows added (nan rows past the history's); with no
    room left the file is written whole again (with room), and the forecast is the same either way."""
    monkeypatch.setattr(forecast_kept, "REFIT_AFTER", 1)
    monkeypatch.setattr(forecast_kept_files, "PATCH_SHARE", 1.0)  # a patch however many of its 3 rows are found again
    monkeypatch.setattr(forecast_append, "MOST_CHANGED", 1.0)  # the append from the state however many change
    if not room:
        monkeypatch.setattr(forecast_kept_files, "KEPT_ROOM_LEAST", 0)
        monkeypatch.setattr(forecast_kept_files, "KEPT_ROOM", 0.0)
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, {"a": [100 * GB + GB * i for i in range(8)],
                                "b": [100 * GB + 2 * GB * i for i in range(8)],
                                "new": [None] * 6 + [50 * GB, 51 * GB]})
    every = snapshot.list_snapshots(root)
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in every[6:]:
        path.rename(aside / path.name)
    assert forecast_driver.compute(every[:6]).kept == "rebuilt"
    where = forecast_history.where(root)
    cold = forecast_columns.manifest(root)
    assert np.load(where / cold["kept"], mmap_mode="r").shape[0] == cold["rows"] + (1024 if room else 0)
    for at, path in enumerate(every[6:], start=7):
        (aside / path.name).rename(path)
        result = forecast_driver.compute(every[:at])
        assert result.kept == "appended 1"
        same_as_reading_every_snapshot(result)
        data = forecast_columns.manifest(root)
        assert len(data["keys"]) == 2 and data["rows"] == 3
        if at == 7:  # the new row in a patch over the same file while it has room; else the file written whole
            assert (data["kept"] == cold["kept"]) == room and bool(data["kept_patches"]) == room, data
        kept = forecast_columns.kept_fits(root)
        assert kept is not None and kept.shape[0] == 3 and np.isfinite(kept[2, 2])  # the new row's line slope
    assert forecast_driver.compute(every).kept == "kept"


def test_each_snapshots_dirs_are_a_file_written_once(tmp_path: Path) -> None:
    """Each snapshot's dirs are a file of their own: an append writes only the new snapshot's and names the others'
    files as they were, a dropped snapshot's file goes; an older driver's one file of every snapshot's is read,
    then written per snapshot, with the forecast unchanged."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "snapshots"
    one_partition_a_disk(root, {"a": [100 * GB + GB * i for i in range(9)],
                                "b": [100 * GB + 2 * GB * i for i in range(9)]})
    every = snapshot.list_snapshots(root)
    where = forecast_history.where(root)
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in every[6:]:  # the history is kept for a window ending at the root's newest snapshot
        path.rename(aside / path.name)

    def taken(upto: int) -> None:
        for path in every[:upto]:
            if not path.exists():
                (aside / path.name).rename(path)

    forecast_driver.compute(every[:6])
    before = forecast_columns.manifest(root)["dirs"]
    assert len(before) == 6 and len(set(before)) == 6
    # The window slides: the oldest dropped, the seventh appended.
    taken(7)
    result = forecast_driver.compute(every[1:7])
    same_as_reading_every_snapshot(result)
    after = forecast_columns.manifest(root)["dirs"]
    assert after[:5] == before[1:] and after[5] not in before
    assert not (where / before[0]).exists()
    # An older driver's manifest: one file of every snapshot's dirs.
    data = forecast_columns.manifest(root)
    one = pa.concat_tables([pq.read_table(where / f) for f in data["dirs"]])
    pq.write_table(one, where / "dirs-older.parquet")
    (where / forecast_history.MANIFEST).write_text(json.dumps({**data, "dirs": "dirs-older.parquet"}))
    taken(8)
    result = forecast_driver.compute(every[1:8])
    assert result.kept == "appended 1"
    same_as_reading_every_snapshot(result)
    dirs = forecast_columns.manifest(root)["dirs"]
    assert isinstance(dirs, list) and len(dirs) == 7 and not (where / "dirs-older.parquet").exists()
    taken(9)
    same_as_reading_every_snapshot(forecast_driver.compute(every[1:9]))


_APPEND = _REFIT_ALL + """
import pathlib, sys
from mover.audit import snapshot
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import held as forecast_held
forecast_driver.compute(snapshot.list_snapshots(pathlib.Path(sys.argv[1])))
"""


def _killed_at_random(root: Path, pristine: Path, rng: random.Random | None, while_writing: bool,
                      spans: tuple[float, float], patches: bool = False) -> tuple[str, tuple[float, float]]:
    """The kept history put back as `pristine` (the older snapshots'), then a forecast appending the newest killed
    (-9) at a random time: of its whole run, or of the part from its first new file in the history on (`spans`:
    an uninterrupted run's seconds for each). With no `rng`, not killed: the spans it took are measured. Returns
    what happened (for a failure's message) and the spans."""
    where = forecast_history.where(root)
    shutil.rmtree(where)
    shutil.copytree(pristine, where)
    before = set(os.listdir(where))
    started = time.monotonic()
    env = {**os.environ, **({"PATCHES": "1"} if patches else {})}
    process = subprocess.Popen([sys.executable, "-c", _APPEND, str(root)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=Path(__file__).parents[2],
                               env=env)
    delay, writing = 0.0, math.inf
    try:
        if rng is None or while_writing:
            # Not a condition to wait for but the moment to aim at: the writer has begun.
            while process.poll() is None and set(os.listdir(where)) <= before:
                time.sleep(0.0005)
            writing = time.monotonic()
        if rng is not None:
            delay = rng.uniform(0.0, spans[1] if while_writing else spans[0])
            time.sleep(delay)  # the random kill time itself, not a wait for a condition
            process.kill()
    finally:
        _, err = process.communicate(timeout=300)
    ended = time.monotonic()
    what = (f"{'writing' if while_writing else 'any time'}{' a patch' if patches else ''} +{delay * 1000:.1f} ms, "
            f"exit {process.returncode}: {err!r}")
    return what, (ended - started, ended - writing)


def test_a_forecast_killed_at_random_times_leaves_a_whole_history(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """kill -9 of a forecast appending a snapshot at random times: anywhere in its run, and from its first new file
    in the history on (an uninterrupted run measured first), writing the kept fits whole, then as a patch. Each time
    the next forecast takes up the old history
    (and appends again) or the new one, gives the cold forecast's answer, and once it writes, only the files its
    manifest names are left. The seed is in any failure's message."""
    monkeypatch.setattr(forecast_kept, "REFIT_AFTER", 1)
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, _growing(8, 0, count=8))
    paths = snapshot.list_snapshots(root)
    aside = tmp_path / paths[-1].name
    paths[-1].rename(aside)
    assert forecast_driver.compute(paths[:-1]).kept == "rebuilt"
    aside.rename(paths[-1])
    pristine = tmp_path / "pristine"
    shutil.copytree(forecast_history.where(root), pristine)
    what, _ = _killed_at_random(root, pristine, None, False, (0.0, 0.0), patches=True)
    assert what.endswith("exit 0: b''") and forecast_columns.manifest(root)["kept_patches"], what
    what, spans = _killed_at_random(root, pristine, None, False, (0.0, 0.0))
    assert what.endswith("exit 0: b''") and not forecast_columns.manifest(root)["kept_patches"], what
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    for attempt in range(6):
        what = f"seed {seed}, attempt {attempt}: " + _killed_at_random(root, pristine, rng, attempt % 2 == 1,
                                                                     spans, patches=attempt >= 2)[0]
        again = forecast_driver.compute(paths)
        assert again.kept in ("appended 1", "kept"), what
        same_as_reading_every_snapshot(again)
        # A forecast that writes removes whatever the dead one (or the old history) left.
        assert forecast_driver.compute(forecast.window(paths[-1], 24.0)).kept == "appended 0", what
        data = forecast_columns.manifest(root)
        named = _named(data)
        assert {p.name for p in forecast_history.where(root).iterdir()} == named, what


def test_dirs_stacked_as_pandas_concatenates_them() -> None:
    """forecast_held._stacked, a column at a time, gives pd.concat's frame: the error column all None but for one,
    and the frames with another dtype (or a categorical) left to pd.concat."""
    def dirs(snapshot: str, n: int, error: str | None = None) -> pd.DataFrame:
        return pd.DataFrame({"cluster": ["c"] * n, "broker": np.arange(n, dtype=np.int32),
                             "log_dir": [f"/d{i}" for i in range(n)], "snapshot": [snapshot] * n,
                             "error": [error] + [None] * (n - 1), "total_bytes": np.full(n, 100, dtype=np.int64),
                             "used_bytes": np.arange(n, dtype=np.int64)})

    frames = [dirs("a", 3), dirs("b", 2, "KafkaStorageException"), dirs("c", 4)]
    stacked = forecast_held._stacked(frames)
    pd.testing.assert_frame_equal(stacked, pd.concat(frames, ignore_index=True))
    other = [frames[0], frames[1].astype({"broker": "int64"})]
    pd.testing.assert_frame_equal(forecast_held._stacked(other), pd.concat(other, ignore_index=True))
    named = [f.astype({"cluster": "category"}) for f in frames]
    pd.testing.assert_frame_equal(forecast_held._stacked(named), pd.concat(named, ignore_index=True))
    assert list(forecast_held._stacked([]).columns) == list(forecast_history.DIRS)
