"""When mover-audit starts a JVM or runs a Spark job, and what its JVM says, on the small generated fleet
(tests/audit/conftest.py's `fleet`): a small fleet runs no Spark job, a snapshot the driver reads starts no JVM (a
deferred session, started on first use), a command that succeeds writes nothing to stderr (the class-data archive
written once), and the driver JVM's raised C2 thresholds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mover.audit import cli, partitions, snapshot
from mover.testing.audit_cli import SPARK, run


def test_a_small_fleet_runs_no_spark_job(fleet: Path, tmp_path: Path, spark,  # noqa: ANN001
                                        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`audit --snapshots --plan --report` of a small fleet runs no Spark job, nor does `plan` alone: the driver
    reads the snapshot itself (docs/audit.md#performance); the datasets it reads are not made Spark DataFrames at
    all. With the replicas left to Spark, one job (their keys to Arrow: no broadcast of the dirs, whose codes are
    looked up in the driver)."""
    latest, earlier = snapshot.list_snapshots(fleet)[-1], snapshot.list_snapshots(fleet)[-2]
    snap = snapshot.read(spark, earlier)
    assert snap.deferred() == list(snapshot.DATASETS)  # the footers vouch for Spark's own files
    assert snap.replicas.count() == snapshot.dataset_rows(earlier / "replicas") and snap.deferred() == [
        "log_dirs", "partitions"]
    from mover.audit.plan import options

    context = spark.sparkContext
    jobs = {}
    for local_rows in (options.LOCAL_SCAN_ROWS, 0):
        monkeypatch.setattr(options, "LOCAL_SCAN_ROWS", local_rows)
        for name, argv in (("plan", ["plan", "--snapshot", str(latest), "--out", str(tmp_path / f"p{local_rows}")]),
                           ("pipeline", ["audit", "--snapshots", str(fleet), "--out", str(tmp_path / f"a{local_rows}"),
                                         "--plan", str(tmp_path / f"q{local_rows}"), "--report",
                                         str(tmp_path / f"r{local_rows}.html")])):
            group = f"jobs-{name}-{local_rows}"
            context.setJobGroup(group, name)
            try:
                code, _, err = run(capsys, *argv, *SPARK)
            finally:
                context.setLocalProperty("spark.jobGroup.id", None)
            assert code == 0, err
            jobs[name, bool(local_rows)] = len(context.statusTracker().getJobIdsForGroup(group))
    assert jobs == {("plan", True): 0, ("pipeline", True): 0, ("plan", False): 1, ("pipeline", False): 1}


@pytest.mark.timeout(900)  # two JVMs, one writing the archive: slow on a loaded machine
def test_a_command_that_succeeds_writes_nothing_to_stderr(tmp_path: Path) -> None:
    """The JVM's own start-up notice (Spark adds an incubator module) is not passed on: stderr is for errors. With
    the class-data archive on (docs/audit.md#performance): the first command writes it at its JVM's exit, under its
    final name only once complete; neither says a word about it. (The second, an `audit --plan` of a snapshot the
    driver reads itself, starts no JVM: spark.Deferred.)"""
    from mover.testing.spark_cluster import DRIVER_JAVA_OPTS, DRIVER_OPTS_ENV

    script = Path(sys.executable).with_name("mover-audit")
    cds = tmp_path / "cds"
    # The JVM runs C1 only (as the test run's session): what is tested, its stderr and the archive's dump at exit,
    # is the same, for 52 s of CPU instead of 66 (synth's own C2 compiling).
    env = {k: v for k, v in os.environ.items() if k != "MOVER_AUDIT_CDS"} | {"MOVER_AUDIT_CDS_DIR": str(cds),
                                                                             DRIVER_OPTS_ENV: DRIVER_JAVA_OPTS}
    done = subprocess.run([str(script), "synth", "--out", str(tmp_path / "s"), "--clusters", "1", "--brokers", "3",
                           "--disks", "2", "--replicas-per-disk", "5", "--master", "local[1]"],
                          capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "Wrote a snapshot" in done.stdout
    archives = sorted(p.name for p in cds.iterdir())
    assert len(archives) == 1 and archives[0].endswith(".jsa"), archives
    latest = snapshot.list_snapshots(tmp_path / "s")[-1]
    done = subprocess.run([str(script), "audit", "--snapshot", str(latest), "--out", str(tmp_path / "a"), "--plan",
                           str(tmp_path / "p"), "--master", "local[1]"],
                          capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "Plan written to" in done.stdout and (tmp_path / "p" / "summary.json").exists()
    assert sorted(p.name for p in cds.iterdir()) == archives


def test_the_driver_jvm_hands_methods_to_c2_later(spark) -> None:  # noqa: ANN001
    """The JVM mover-audit starts runs with raised C2 thresholds (mover/audit/spark.py: C2's compiling was a quarter
    of the CPU of a 20M-replica `audit --plan`): the running JVM's own arguments say so. (The test run's JVM also
    runs C1 only, tests/conftest.py: an option given beside mover-audit's, which leaves them as they are.)"""
    from mover.audit import spark as audit_spark

    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    for flag in audit_spark._JIT.split():
        assert flag in arguments, arguments


def test_a_snapshot_the_driver_reads_starts_no_jvm(fleet: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """On a local master, `plan` and `audit` of a snapshot the driver reads itself run no Spark job, and start no
    JVM either (spark.Deferred: the JVM's start was most of their CPU at 20M replicas, issue 38): with no Java to be
    found they still succeed, and write what they write with Spark's session (the test run's, in-process)."""
    latest = snapshot.list_snapshots(fleet)[-1]
    env = os.environ | {"JAVA_HOME": str(tmp_path / "no-java"), "SPARK_HOME": str(tmp_path / "no-spark")}
    for name, argv in (("plan", ["plan", "--snapshot", str(latest), "--out"]),
                       ("audit", ["audit", "--snapshot", str(latest), "--out"])):
        done = subprocess.run([sys.executable, "-m", "mover.audit", *argv, str(tmp_path / f"{name}-alone"),
                               "--master", "local[2]"], capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        code, _, err = run(capsys, *argv, str(tmp_path / f"{name}-spark"), *SPARK)
        assert code == 0, err
    for file in ("moves", "disks.parquet", "brokers.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "plan-alone" / file),
                                      pd.read_parquet(tmp_path / "plan-spark" / file))
    for file in ("disks.parquet", "brokers.parquet", "clusters.parquet", "duplicates.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "audit-alone" / file),
                                      pd.read_parquet(tmp_path / "audit-spark" / file))


def test_a_deferred_session_starts_on_first_use(fleet: Path, spark, tmp_path: Path,  # noqa: ANN001
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from mover.audit import spark as audit_spark
    from mover.audit.plan import options

    parser = cli.build_parser(["plan"])[0]
    args = parser.parse_args(["plan", "--snapshot", "x", "--out", "y", "--master", "local[2]"])
    assert audit_spark.from_args(args) is spark  # deferred only when the caller asks
    deferred = audit_spark.from_args(args, defer=True)
    assert isinstance(deferred, audit_spark.Deferred) and not deferred.started
    assert deferred.version == spark.version and deferred.started  # the test run's session, on first use
    assert deferred.get() is spark
    assert audit_spark.from_args(args, defer=False) is spark
    args.master = "spark://127.0.0.1:1"  # executors elsewhere: never deferred (the running session is taken)
    assert audit_spark.from_args(args, defer=True) is spark
    latest = snapshot.list_snapshots(fleet)[-1]
    limits = (options.LOCAL_SCAN_ROWS, partitions.LOCAL_ROWS)
    assert snapshot.driver_readable(latest, *limits)
    assert not snapshot.driver_readable(latest, snapshot.dataset_rows(latest / "replicas") - 1, limits[1])
    assert not snapshot.driver_readable(latest, limits[0], snapshot.dataset_rows(latest / "partitions") - 1)
    partial = tmp_path / latest.name
    shutil.copytree(latest, partial)
    shutil.rmtree(partial / "partitions")
    assert not snapshot.driver_readable(partial, *limits)
