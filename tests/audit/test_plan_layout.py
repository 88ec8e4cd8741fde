"""The plan directory's contract (mover/audit/plan_layout.py), without Spark: what the writer writes is what the
readers check, in the declared order and types; a plan missing a declared column or dataset is one AuditError line;
optional columns read as None when a plan lacks them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from mover.audit import plan_layout
from mover.audit.errors import AuditError
from mover.audit.executor.moves import read_moves

ROW = {"cluster": "east", "broker": 1, "topic": "t", "partition": 0, "from_dir": "/d1", "to_dir": "/d2",
       "size_bytes": 10, "step": 1}


def test_the_writer_writes_what_the_readers_read(tmp_path: Path) -> None:
    (tmp_path / plan_layout.MOVES_DIR).mkdir()
    # Columns out of order, wider types and an extra one: the writer puts them in the declared order and types.
    frame = pd.DataFrame([{**ROW, "pkey": 99}])[["pkey", *reversed(list(ROW))]]
    plan_layout.write_frame(frame, plan_layout.MOVES, tmp_path / plan_layout.MOVES_DIR / "part-00000.parquet")
    schema = pq.read_schema(tmp_path / plan_layout.MOVES_DIR / "part-00000.parquet")
    assert schema.names == list(plan_layout.MOVES)
    assert schema.remove_metadata() == plan_layout.arrow_schema(plan_layout.MOVES)
    assert plan_layout.read_moves(tmp_path) == [{**ROW, "to_broker": None}]
    [move] = read_moves(tmp_path)
    assert (move.broker, move.to_broker, move.between_brokers) == (1, None, False)


def test_a_plan_that_breaks_the_contract_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match=r"no moves dataset \(.* is missing\)"):
        plan_layout.read_moves(tmp_path)
    (tmp_path / plan_layout.MOVES_DIR).mkdir()
    frame = pd.DataFrame([ROW]).drop(columns=["step", "to_dir"])
    frame.to_parquet(tmp_path / plan_layout.MOVES_DIR / "part-00000.parquet", index=False)
    with pytest.raises(AuditError, match="moves lacks columns to_dir, step$"):
        plan_layout.read_moves(tmp_path)
    with pytest.raises(AuditError, match="no disks dataset"):
        plan_layout.read_disks(tmp_path)
