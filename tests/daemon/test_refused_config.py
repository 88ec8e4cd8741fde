"""Configurations that would lose data are refused by the real `moverd` (exit code 2, one line on stderr), and the
mistakes it can survive are warned about, naming both places (docs/operations.md#configuration-that-is-refused)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mover.testing.batches import make_batch
from mover.testing.moverd import Moverd, run_moverd
from mover.testing.raw import RawClient, fetch, fetch_partitions, produce, records_of
from mover.testing.records import dir_of

INVALID_CONFIGURATION = 2


def write_config(path: Path, text: str | bytes) -> Path:
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    return path


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("moverd: ") and "Traceback" not in stderr, stderr
    return lines[0]


def test_nested_log_dirs_are_refused(tmp_path: Path) -> None:
    outer, inner = tmp_path / "d" / "p1", tmp_path / "d" / "p1" / "t-0"
    conf = write_config(tmp_path / "server.properties", f"log.dirs={outer},{inner}\n")
    r = run_moverd(conf, cwd=tmp_path)
    assert r.returncode == INVALID_CONFIGURATION
    line = one_line(r.stderr)
    assert f"log.dirs entry {inner} is inside log dir {outer}" in line
    assert not outer.exists(), "nothing may be created for a refused configuration"


@pytest.mark.parametrize("target", ["p1", "p1/t-0"])
def test_log_dirs_that_overlap_through_a_symlink_are_refused(tmp_path: Path, target: str) -> None:
    (tmp_path / "d" / "p1" / "t-0").mkdir(parents=True)
    link = tmp_path / "d" / "link"
    link.symlink_to(tmp_path / "d" / target)
    conf = write_config(tmp_path / "server.properties", f"log.dirs={tmp_path / 'd' / 'p1'},{link}\n")
    r = run_moverd(conf, cwd=tmp_path)
    assert r.returncode == INVALID_CONFIGURATION
    line = one_line(r.stderr)
    assert str(tmp_path / "d" / "p1") in line and str(link) in line
    assert "resolving symlinks" in line
    assert ("same directory" in line) == (target == "p1")
    assert os.listdir(tmp_path / "d" / "p1") == ["t-0"] and os.listdir(tmp_path / "d" / "p1" / "t-0") == []


def test_relative_log_dirs_are_refused(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "server.properties", f"log.dirs={tmp_path / 'd1'},var/d2\n")
    r = run_moverd(conf, cwd=tmp_path)
    assert r.returncode == INVALID_CONFIGURATION
    assert "log.dirs entry 'var/d2' is not an absolute path" in one_line(r.stderr)
    assert not (tmp_path / "var").exists() and not (tmp_path / "d1").exists()


def test_non_utf8_bytes_are_one_line_naming_the_byte(tmp_path: Path) -> None:
    text = f"log.dirs={tmp_path / 'd1'}\n# broker in K\xf6ln\nbroker.id=1\n".encode("latin-1")
    conf = write_config(tmp_path / "server.properties", text)
    r = run_moverd(conf, cwd=tmp_path)
    assert r.returncode == INVALID_CONFIGURATION
    offset = text.index(b"\xf6")
    assert one_line(r.stderr) == f"moverd: {conf} is not UTF-8: byte 0xf6 at offset {offset} (line 2); save it as UTF-8"


def test_a_key_set_twice_is_a_warning_naming_both_lines_and_the_value_taken(tmp_path: Path) -> None:
    # Moverd writes broker.id=0 on line 1 and four keys; the operator's pasted line 5 sets it again.
    with Moverd(tmp_path, extra_lines="broker.id=2\n") as d:
        assert d.config.read_text().splitlines()[0] == "broker.id=0"
        warning = [line for line in d.log().splitlines() if "broker.id" in line and "WARNING" in line]
        assert len(warning) == 1, d.log()
        assert (f"{d.config} sets broker.id 2 times (line 1: broker.id=0, line 5: broker.id=2); using the last "
                "value, '2'") in warning[0]
    # The value taken is the one stamped into every log dir.
    for log_dir in d.dirs:
        assert "broker.id=2" in (log_dir / "meta.properties").read_text().splitlines()


def test_the_nested_log_dir_that_lost_acknowledged_records_is_refused_and_they_are_kept(tmp_path: Path) -> None:
    """The adversarial run of issue 8: a broker holding t-0, restarted by a careless operator with
    `log.dirs=<dir>,<dir>/t-0`, loaded the inner dir as partition t-0 of the outer; a move then renamed that log dir
    away to `.delete` and 25 acknowledged records were gone after a restart. Now the start is refused, nothing on disk
    is touched, and the records are all there once the configuration is fixed."""
    d = Moverd(tmp_path)
    values = [f"acked-{i}".encode() for i in range(25)]
    with d, RawClient(d.port) as c:
        for v in values:
            assert produce(c, "t", 0, make_batch([v]), acks=-1)["error_code"] == 0
    holder = dir_of(d.dirs, "t", 0)
    partition = holder / "t-0"
    before = {p.name: p.read_bytes() for p in partition.iterdir()}

    careless = dict(d.props, **{"log.dirs": f"{holder},{partition}"})
    conf = write_config(tmp_path / "careless.properties", "".join(f"{k}={v}\n" for k, v in careless.items()))
    r = run_moverd(conf, cwd=tmp_path)
    assert r.returncode == INVALID_CONFIGURATION
    assert f"log.dirs entry {partition} is inside log dir {holder}" in one_line(r.stderr)
    # Refused before anything was opened: no meta.properties or .lock stamped into the partition, no rename.
    assert {p.name: p.read_bytes() for p in partition.iterdir()} == before

    with d, RawClient(d.port) as c:
        p = fetch_partitions(fetch(c, [("t", 0, 0)]))[("t", 0)]
        assert p["error_code"] == 0 and p["high_watermark"] == 25
        assert [v for _, v in records_of(p["records"])] == values
