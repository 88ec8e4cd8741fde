"""The kept fits' file and its patches beside the driver's kept history (forecast_columns names them in its
manifest: "kept", "kept_as_of", "kept_patches", "kept_patched", "appends"). The file holds each row's kept fit
(forecast_kept.KEPT) as of one snapshot, by column (Fortran order: each fit's column is read whole), with room past
the history's rows for the partitions later appends add (nan, KEPT_ROOM); each patch holds the rows one append found
again (new rows' included) and their fits. A carried fit is the same fit moved on (forecast_kept.move_on), so the
file and each patch are moved on to the newest snapshot as they are read, and an append writes only a patch until
the patches pass PATCH_SHARE of the rows, the rows are compacted, or rows are added past the room: then the fits
are written whole again, with room.

Crash safety is forecast_columns' (its invariants): each file here is written fresh under a new name, and fsynced
by it before a manifest names it; a file is never written again once named.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mover.audit.errors import AuditError
from mover.audit.forecast import kept as forecast_kept

# Rows in the kept fits' patches, as a share of all, past which the kept fits are written whole again: at about
# 1/32 of the rows found again or refreshed per append (forecast_kept.REFRESH_AFTER, REFIT_AFTER) eight appends
# of patches, then one whole.
PATCH_SHARE = 0.25


@dataclass
class KeptFound:
    """The kept fits as an append from the state leaves them (forecast_fits): `rows` found again, as of the newest
    snapshot; every other row as read, as of the kept history's newest, `hours` and `appended` snapshots before.
    `stored`: the manifest they were read from (None: not read from one, then written whole)."""
    rows: np.ndarray
    hours: float
    appended: int
    stored: dict[str, Any] | None


def kept_layers(data: dict[str, Any]) -> tuple[list[tuple[str, str, int]], int]:
    """The kept fits' file and patches (file, the snapshot they are as of, the appends they count to), oldest
    first, and the manifest's appends; ValueError for entries not of that shape."""
    appends = data.get("appends", 0)
    as_of = data.get("kept_as_of", [data["snapshots"][-1], appends])
    layers = [(data["kept"], *as_of), *(tuple(p) for p in data.get("kept_patches", []))]
    if not isinstance(appends, int) or not all(
            len(layer) == 3 and isinstance(layer[0], str) and isinstance(layer[1], str) and isinstance(layer[2], int)
            for layer in layers):
        raise ValueError("the manifest's kept fits are not [file, snapshot, appends]")
    return layers, appends


def hours_between(later: str, earlier: str) -> float:
    from mover.audit.forecast import taken_at  # not at the top: forecast imports this module

    try:
        return (taken_at(Path(later)) - taken_at(Path(earlier))).total_seconds() / 3600
    except AuditError as e:
        raise ValueError(str(e)) from None


def read_kept(where: Path, data: dict[str, Any], rows: int, width: int, room: bool = False) -> np.ndarray:
    """The kept fits as of the manifest's newest snapshot: the file mapped copy-on-write (the fits replace rows in
    place), moved on, each patch moved on and put over it (ValueError when one is not what the manifest says). The
    file may hold rows past the history's (nan: write_kept's room for rows added): left out, or with `room` kept
    (the first `rows` are the fits)."""
    layers, appends = kept_layers(data)
    newest = data["snapshots"][-1]
    whole = np.load(where / layers[0][0], mmap_mode="c")
    if whole.ndim != 2 or whole.shape[0] < rows or whole.shape[1] != width:
        raise ValueError("the kept fits are not one per row")
    kept = whole[:rows]
    for i, (file, snapshot, counted) in enumerate(layers):
        if i:
            with np.load(where / file, allow_pickle=False) as f:
                at, values = f["rows"], np.array(f["values"], dtype=np.float64)
            if values.shape != (len(at), width) or (len(at) and not (0 <= at.min() and at.max() < rows)):
                raise ValueError(f"{file}: not a patch of the kept fits")
        else:
            at, values = slice(None), kept
        forecast_kept.move_on(values, slice(None), hours_between(newest, snapshot), appends - counted)
        if i:
            kept[at] = values
    return whole if room else kept


def write_kept(where: Path, fresh: Any, kept: np.ndarray, newest: str, found: KeptFound | None
                ) -> dict[str, Any]:
    """Writes the kept fits (a patch of the rows `found` found again when the rest are the stored ones and the
    patches stay under PATCH_SHARE, else whole) and answers the manifest's entries for them."""
    data = found.stored if found is not None else None
    # Rows added since (new partitions, nan until fitted) go in the patch while the file has room for them:
    # rewriting it whole (429 MB at 6.7M partitions) was most of what a partition added cost an append.
    if (found is not None and data is not None and isinstance(data.get("rows"), int) and "kept" in data
            and data["rows"] <= len(kept) <= _kept_room(where / data["kept"])):
        layers, appends = kept_layers(data)
        count = data.get("kept_patched", 0)  # the manifest counts them: no patch read again
        patched = count + len(found.rows) if isinstance(count, int) else None
        if patched is not None and patched <= PATCH_SHARE * len(kept):
            appends += found.appended
            patches = [list(layer) for layer in layers[1:]]
            if len(found.rows):
                path = fresh("kept", ".npz")
                np.savez(path, rows=found.rows.astype(np.int64), values=kept[found.rows])
                patches.append([path.name, newest, appends])
            return {"kept": layers[0][0], "kept_as_of": list(layers[0][1:]), "kept_patches": patches,
                    "kept_patched": patched, "appends": appends}
    if found is not None:  # the rows as read moved on to the newest snapshot, as the ones found again are
        carried = np.ones(len(kept), dtype=bool)
        carried[found.rows] = False
        forecast_kept.move_on(kept, carried, found.hours, found.appended)
    path = fresh("kept", ".npy")
    _save_with_room(path, kept, len(kept) + max(KEPT_ROOM_LEAST, int(KEPT_ROOM * len(kept))))
    return {"kept": path.name, "kept_as_of": [newest, 0], "kept_patches": [], "kept_patched": 0, "appends": 0}


# Rows of nan the kept fits' file holds past the history's, for the partitions later appends add: 1/32 of them
# (at 6.7M partitions 209,000 rows, 13 MB; a fleet adding a few thousand a day writes the file whole about monthly).
KEPT_ROOM, KEPT_ROOM_LEAST = 1 / 32, 1024


def _kept_room(path: Path) -> int:
    """How many rows the kept fits' file holds (0: it does not read)."""
    try:
        shape = np.load(path, mmap_mode="r").shape
    except (OSError, ValueError):
        return 0
    return shape[0] if len(shape) == 2 else 0


def _save_with_room(path: Path, kept: np.ndarray, capacity: int) -> None:
    """`kept` as a (capacity, width) float64 .npy in Fortran order (each fit's column one contiguous run, read
    whole by forecast_append), its rows past len(kept) nan: written a column at a time by write(2), no copy of the
    whole array with the room added (forecast_npy says why not a mapping)."""
    rows, width = kept.shape
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float64)), "fortran_order": True,
              "shape": (capacity, width)}
    spare = np.full(capacity - rows, np.nan)
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for j in range(width):
            column = np.ascontiguousarray(kept[:, j], dtype=np.float64)
            f.write(memoryview(column).cast("B"))
            f.write(memoryview(spare).cast("B"))
