"""mover-audit on a real Spark standalone cluster (one Master, one Worker of 1 core, loopback): submitted with
spark-submit as an operator submits it, and run with `--master spark://...` as its own driver. Executors run this
checkout's code (mover.testing.spark_cluster); a run counts as on the cluster only if the master lists its
application and the worker ran its tasks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pytest

import mover.audit
from mover.audit import snapshot
from mover.testing.audit_cli import SPARK
from mover.testing.ports import free_ports
from mover.testing.spark_cluster import DRIVER_JAVA_OPTS, DRIVER_OPTS_ENV, SparkCluster
from mover.testing.wait import wait_for

MAIN = Path(mover.audit.__path__[0]) / "__main__.py"
MOVER_AUDIT = Path(sys.executable).with_name("mover-audit")
# SPARK (mover.testing.audit_cli), the commands' options: a few tasks per stage, as the worker has one core, and
# Spark's 16 default partitions would be 16 tasks in a row.
# Bounds of a broken run only: the runs take seconds to tens of seconds.
RUN_TIMEOUT_S = 300
FAIL_TIMEOUT_S = 60
# The forecast runs a dozen Spark jobs (its history's update, then the forecast) on the one-core worker.
FORECAST_TIMEOUT_S = 900


class Demo(NamedTuple):
    out: Path  # --out
    app: dict[str, object]  # the master's record of the demo's application
    page: Path  # the report, as the demo printed it

    @property
    def snapshot(self) -> Path:
        """The demo's latest snapshot: a synth fleet of 3 clusters x 12 brokers x 4 disks."""
        return snapshot.list_snapshots(self.page.parent / "snapshots")[-1]


MOVE_KEY = ["cluster", "broker", "topic", "partition", "from_dir", "to_dir", "size_bytes", "step"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster")) as c:
        yield c


def driver_env(cluster: SparkCluster) -> dict[str, str]:
    """The cluster's environment for a driver, whose JVM (spark-submit's, or the one mover-audit starts) runs C1 only
    with the serial collector, as the executors and the test run's own session: a driver of one command on a
    test's few rows, where C2's compiling was a third of its CPU."""
    return cluster.env(**{DRIVER_OPTS_ENV: DRIVER_JAVA_OPTS})


def run(cluster: SparkCluster, argv: list[object], cwd: Path,
        timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], env=driver_env(cluster), cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def app_ids(cluster: SparkCluster) -> set[str]:
    status = cluster.status()
    return {app["id"] for app in status["activeapps"] + status["completedapps"]}


def finished_app(cluster: SparkCluster, before: set[str]) -> dict[str, object]:
    """The one application that appeared since `before`, once the master has it as completed (the driver's exit
    unregisters it a moment after the process ends)."""
    def done() -> dict[str, object] | None:
        status = cluster.status()
        new = [a for a in status["activeapps"] + status["completedapps"] if a["id"] not in before]
        assert len(new) <= 1, new
        return new[0] if new and new[0] in status["completedapps"] else None

    return wait_for(done, message="the new application completed on the master", interval=0.2)


def ran_tasks_on_the_worker(cluster: SparkCluster, app_id: str) -> int:
    """Tasks the worker's executor of `app_id` finished, from the executor's own log in the worker's work dir."""
    executors = list((cluster.work_dir / app_id).iterdir())
    assert executors, f"no executor dir under {cluster.work_dir / app_id}"
    return sum((e / "stderr").read_text(errors="replace").count("Finished task") for e in executors)


@pytest.fixture(scope="module")
def demo(cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """`mover-audit demo` submitted with spark-submit to the cluster, as an operator submits it."""
    tmp = tmp_path_factory.mktemp("demo")
    before = app_ids(cluster)
    done = run(cluster, [cluster.spark_submit, "--master", cluster.master_url, MAIN, "demo", "--out", tmp / "out",
                         *SPARK], tmp)
    # spark-submit's Python runner merges the driver's stderr into its own stdout; its stderr is the JVM's log.
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    page = Path(re.search(r"^4/4 report: (.+)$", done.stdout, re.M)[1])  # type: ignore[index]
    return Demo(tmp / "out", finished_app(cluster, before), page)


def test_spark_submit_demo_runs_on_the_cluster(cluster: SparkCluster, demo: Demo) -> None:
    assert demo.page.is_file() and demo.page.read_text().startswith("<!DOCTYPE html>")
    root = demo.page.parent
    assert root.parent == demo.out.resolve()
    assert len(snapshot.list_snapshots(root / "snapshots")) == 2  # the demo's history: an earlier and the latest
    assert json.loads((root / "plan" / "summary.json").read_text())["moves"] > 0
    assert len(pd.read_parquet(root / "plan" / "moves")) > 0

    assert demo.app["name"] == "mover-audit" and demo.app["state"] == "FINISHED", demo.app
    assert ran_tasks_on_the_worker(cluster, str(demo.app["id"])) > 0


def test_plan_on_the_cluster_equals_plan_on_local(cluster: SparkCluster, demo: Demo, tmp_path: Path) -> None:
    """`mover-audit plan --master spark://...` as its own driver (no spark-submit) and the same command on local[2],
    side by side: each waits mostly on its own JVM and executor starting."""
    before = app_ids(cluster)
    masters = {"on-cluster": cluster.master_url, "local": "local[2]"}
    procs = {name: subprocess.Popen([str(MOVER_AUDIT), "plan", "--master", master, "--snapshot", str(demo.snapshot),
                                     "--out", str(tmp_path / name), *SPARK], env=driver_env(cluster), cwd=tmp_path,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
             for name, master in masters.items()}
    try:
        outputs = {name: proc.communicate(timeout=RUN_TIMEOUT_S) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for name, proc in procs.items():
        stdout, stderr = outputs[name]
        assert proc.returncode == 0, f"{name}: {stderr[-3000:]}"
        assert stdout.startswith(f"Plan for {demo.snapshot}:"), stdout
        assert stderr == "", stderr  # a command that succeeds writes nothing to stderr, the JVM included
    app = finished_app(cluster, before)
    assert app["name"] == "mover-audit" and ran_tasks_on_the_worker(cluster, str(app["id"])) > 0

    on_cluster, local = (pd.read_parquet(tmp_path / name / "moves").sort_values(MOVE_KEY, ignore_index=True)
                         for name in masters)
    assert len(local) > 0
    pd.testing.assert_frame_equal(on_cluster, local)


@pytest.mark.timeout(FORECAST_TIMEOUT_S)
def test_forecast_on_the_cluster_equals_forecast_on_the_driver(cluster: SparkCluster, tmp_path: Path) -> None:
    """`mover-audit forecast --master spark://...` (its own driver): its compact history written by the cluster's
    executor under the fleet root, the same disks as the pandas reference computes in this process from every
    snapshot (test_forecast.py's fleet of 13 snapshots, mover/testing/forecast_history.py's hand_made_snapshots;
    test_forecast.py also checks that reference against Spark on local[2], which this test ran as a second command
    before: a JVM and a forecast for nothing new)."""
    import pyarrow as pa

    from mover.audit import forecast
    from mover.audit.forecast.layout import DISKS
    from mover.audit.plan_layout import arrow_schema
    from mover.testing.forecast_history import hand_made_snapshots

    root = tmp_path / "snapshots"
    hand_made_snapshots(root)
    before = app_ids(cluster)
    done = run(cluster, [MOVER_AUDIT, "forecast", "--snapshots", root, "--out", tmp_path / "out",
                         "--master", cluster.master_url, *SPARK], tmp_path, timeout=FORECAST_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (root / "_forecast_history" / "manifest.json").is_file()
    assert ran_tasks_on_the_worker(cluster, str(finished_app(cluster, before)["id"])) > 0
    on_cluster = pd.read_parquet(tmp_path / "out" / "forecast.parquet")
    reference = forecast.compute_local(snapshot.list_snapshots(root)).disks
    reference = pa.Table.from_pandas(reference, schema=arrow_schema(DISKS), preserve_index=False).to_pandas()
    pd.testing.assert_frame_equal(on_cluster, reference, check_exact=False, rtol=1e-9)


def test_a_master_that_does_not_answer_is_one_line(cluster: SparkCluster, demo: Demo, tmp_path: Path) -> None:
    (closed,) = free_ports(1)
    nowhere = f"spark://127.0.0.1:{closed}"
    expected = f"mover-audit: error: Spark master {nowhere}: cannot connect (127.0.0.1:{closed}: Connection refused)"
    done = run(cluster, [MOVER_AUDIT, "audit", "--master", nowhere, "--snapshot", demo.snapshot,
                         "--out", tmp_path / "a"], tmp_path, FAIL_TIMEOUT_S)
    assert (done.returncode, done.stderr) == (1, expected + "\n")

    # Under spark-submit, mover-audit's --master wins over spark-submit's: with the live cluster's master given to
    # spark-submit, the run still goes to the closed port, and the cluster sees no application.
    before = app_ids(cluster)
    done = run(cluster, [cluster.spark_submit, "--master", cluster.master_url, MAIN, "audit", "--master", nowhere,
                         "--snapshot", demo.snapshot, "--out", tmp_path / "b"], tmp_path, FAIL_TIMEOUT_S)
    assert done.returncode == 1
    assert expected in done.stdout.splitlines(), done.stdout  # the driver's stderr, merged by spark-submit
    assert app_ids(cluster) == before
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_python_m_is_the_command_line(tmp_path: Path) -> None:
    """`python -m mover.audit` and `python .../__main__.py` (what spark-submit runs) are `mover-audit`: same exit code,
    same one line."""
    runs = [[MOVER_AUDIT], [sys.executable, "-m", "mover.audit"], [sys.executable, MAIN]]
    results = {(p.returncode, p.stdout, p.stderr) for p in
               (subprocess.run([*map(str, argv), "plan", "--snapshot", str(tmp_path / "none"), "--out",
                                str(tmp_path / "p")], capture_output=True, text=True, timeout=FAIL_TIMEOUT_S,
                               stdin=subprocess.DEVNULL, cwd=tmp_path) for argv in runs)}
    assert results == {(1, "", f"mover-audit: error: snapshot {tmp_path / 'none'}: no such directory\n")}
