"""A snapshot of mover-audit (mover/audit/snapshot.py: a directory of Parquet datasets) copied with one dataset
replaced, for the tests that give the commands an odd snapshot: a replica twice, replicas in a dir log_dirs does not
list, partitions Metadata no longer lists.

    rewrite_dataset(latest, tmp_path / "odd" / latest.name, "replicas", pd.concat([replicas, stray]))
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd


def rewrite_dataset(src: Path, dst: Path, name: str, frame: pd.DataFrame) -> None:
    """A copy of snapshot `src` at `dst` whose dataset `name` is `frame`."""
    shutil.copytree(src, dst)
    shutil.rmtree(dst / name)
    (dst / name).mkdir()
    frame.to_parquet(dst / name / "part-0.parquet", coerce_timestamps="us", index=False)
