"""mover-audit's exit codes and one-line errors, on the small generated fleet (tests/audit/conftest.py's `fleet`) and
the run's local Spark: --fail-on, snapshots that are not Parquet or lack a column or a dataset, a drain that cannot
fit, --help (no JVM started) and bad usage."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mover.audit import cli, snapshot
from mover.cli import common
from mover.testing.audit_cli import SPARK, run


def test_fail_on_exit_codes(fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "audit", "--snapshots", str(fleet), "--out", str(tmp_path / "a"),
                       "--fail-on", "stuck,imbalance", "--skip-duplicates", *SPARK)
    assert code == common.EXIT_FINDINGS
    assert err.strip().splitlines() == [err.strip()] and "stuck" in err and "imbalance" in err
    # Partitions in two dirs: synth makes none, so alerting on them alone passes.
    code, _, err = run(capsys, "audit", "--snapshots", str(fleet), "--out", str(tmp_path / "b"),
                       "--fail-on", "duplicate", *SPARK)
    assert code == 0, err
    # With a band wide enough for any disk and no earlier snapshot, imbalance and stuck are not found.
    latest = snapshot.list_snapshots(fleet)[-1]
    code, _, err = run(capsys, "audit", "--snapshot", str(latest), "--out", str(tmp_path / "c"),
                       "--balance-threshold", "1.99", "--balance-margin", "1", "--fail-on", "imbalance,stuck",
                       "--skip-duplicates", *SPARK)
    assert code == 0, err


def test_bad_snapshots_are_one_line(fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latest = snapshot.list_snapshots(fleet)[-1]
    # A dataset that is not Parquet.
    broken = tmp_path / "broken" / latest.name
    shutil.copytree(latest, broken)
    for part in (broken / "log_dirs").glob("*.parquet"):
        part.write_bytes(b"this is not parquet\n" * 10)
    code, out, err = run(capsys, "audit", "--snapshot", str(broken), "--out", str(tmp_path / "x"), *SPARK)
    assert code == common.EXIT_ERROR
    assert len(err.strip().splitlines()) == 1 and err.startswith("mover-audit: error:"), err
    assert "log_dirs" in err and "Traceback" not in err
    # A dataset without a declared column.
    missing = tmp_path / "missing" / latest.name
    shutil.copytree(latest, missing)
    frame = pd.read_parquet(latest / "replicas").drop(columns=["size_bytes"])
    shutil.rmtree(missing / "replicas")
    (missing / "replicas").mkdir()
    # Microseconds, as Spark writes them: Spark cannot read pandas' default nanosecond timestamps (docs/audit.md).
    frame.to_parquet(missing / "replicas" / "part-0.parquet", coerce_timestamps="us")
    code, out, err = run(capsys, "plan", "--snapshot", str(missing), "--out", str(tmp_path / "p"), *SPARK)
    assert code == common.EXIT_ERROR
    assert err.strip() == (f"mover-audit: error: snapshot {missing}: replicas: missing column size_bytes "
                           f"(has {', '.join(frame.columns)})")
    # No such snapshot; a dataset missing.
    code, _, err = run(capsys, "audit", "--snapshot", str(tmp_path / "nowhere"), *SPARK)
    assert code == common.EXIT_ERROR
    assert err.strip() == f"mover-audit: error: snapshot {tmp_path / 'nowhere'}: no such directory"
    shutil.rmtree(missing / "replicas")
    shutil.copytree(latest / "replicas", missing / "replicas")
    shutil.rmtree(missing / "partitions")
    code, _, err = run(capsys, "plan", "--snapshot", str(missing), "--out", str(tmp_path / "q"), *SPARK)
    assert code == common.EXIT_ERROR and "no partitions dataset" in err and len(err.strip().splitlines()) == 1


def test_drain_refused_when_it_cannot_fit(fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          spark) -> None:  # noqa: ANN001
    latest = snapshot.list_snapshots(fleet)[-1]
    dirs = snapshot.read(spark, latest).log_dirs.toPandas()
    # Two of three disks at ~50%: the third cannot take a whole disk's worth and stay under 80%.
    online = dirs[dirs["error"].isna() & dirs["total_bytes"].notna()]
    broker = online.groupby(["cluster", "broker"]).filter(lambda g: len(g) == 3).iloc[0]
    target = f"{broker['cluster']}/{broker['broker']}:{broker['log_dir']}"
    code, _, err = run(capsys, "plan", "--snapshot", str(latest), "--out", str(tmp_path / "p"), "--drain", target,
                       "--headroom", "0.5", *SPARK)
    assert code == common.EXIT_ERROR
    assert err.startswith(f"mover-audit: error: cannot drain on broker {broker['broker']} of {broker['cluster']}")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p" / "summary.json").exists()
    code, _, err = run(capsys, "plan", "--snapshot", str(latest), "--out", str(tmp_path / "p2"), "--drain",
                       f"{broker['cluster']}/{broker['broker']}:/no/such/dir", *SPARK)
    assert code == common.EXIT_ERROR and "has no log dir /no/such/dir" in err


def test_help_starts_no_jvm_and_a_missing_subcommand_exits_2(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    probe = ("import sys\nfrom mover.audit import cli\nassert cli.main(['--help']) == 0\n"
             "assert 'pyspark' not in sys.modules and 'pandas' not in sys.modules, sorted(sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    for name in cli.COMMANDS:
        assert name in done.stdout
    monkeypatch.setitem(cli.COMMANDS, "collect", ("mover.audit.not_written_yet", "x"))
    code, out, err = run(capsys, "collect", "--fleet", "f.toml")
    assert code == common.EXIT_USAGE
    assert err == "mover-audit: error: collect is not available in this installation\n"
    code, _, err = run(capsys, "audit", "--fail-on", "nonsense", "--snapshot", "x")
    assert code == common.EXIT_USAGE and len(err.strip().splitlines()) == 1 and "--fail-on" in err
    code, _, err = run(capsys, "audit", "--snapshot", "x", "--exclude-topics", "^__")
    assert code == common.EXIT_USAGE
    assert err == "mover-audit: error: --exclude-topics is an option of the plan: give --plan PLANDIR too\n"


@pytest.mark.parametrize("days", [None, "2"])
def test_synth_into_a_root_it_cannot_create_is_one_line_before_any_spark(
        days: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def no_spark(*_: object, **__: object) -> None:
        raise AssertionError("a session was asked for")

    monkeypatch.setattr("mover.audit.spark.from_args", no_spark)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, out, err = run(capsys, "synth", "--out", str(blocker / "fleet"), *(("--days", days) if days else ()))
    assert code == common.EXIT_ERROR and out == ""
    assert err == f"mover-audit: error: cannot create {blocker / 'fleet'}: Not a directory\n"
    assert not (blocker / "fleet").exists()
