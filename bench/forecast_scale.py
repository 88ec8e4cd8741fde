"""The forecast at fleet scale, beside the audit of one snapshot: N replica rows x DAYS daily snapshots.

A fleet of N replica rows is synthesized (`mover-audit synth`, 5 clusters, 8 disks x 500 replicas per broker, as
bench/audit_commands.py does), then grown backwards into DAYS + 1 daily snapshots (pyarrow, on the driver): each
partition at its own rate (a tenth flat, the rest shrinking back by up to half over the days), the disks as they
are, the partitions with the retention settings collect writes (with_settings). Then, one command each (JVM
start included, as an operator runs them; wall time, CPU of the process tree, and the peak resident memory of the
Python driver and of the Spark JVM):

    forecast --snapshots ROOT (DAYS snapshots)  cold: no compact history yet, every snapshot read, history written
    audit --snapshot NEWEST                     the cost of one snapshot        } --rounds times (default 3),
    forecast --snapshots ROOT (+ NEWEST)        the history kept, the newest    } an audit right before each
                                                snapshot appended               } append, each append from the
                                                                                } cold run's history
    forecast --snapshots ROOT                   nothing new: the history read, nothing appended

The append is compared with the audit by their medians: on this VM a run's wall moves by a second or more from one
to the next (the host pages cold memory out: docs/audit.md).

`--windows 8,16` also appends the newest to windows of those many snapshots (fleet roots of links to the newest
ones, each forecast cold first without the newest), to show what an append costs against the window's length.

`--moved N` then appends, --rounds times, a newest snapshot with N replicas moved to another dir of their broker
(each right after an audit of that snapshot): an operator's fleet changes its copies from one day to the next,
where the grown fleet's snapshots all hold the same ones, so the append cannot take them from the kept replica map.

`--added N` does the same with a newest snapshot of N partitions created since (a replica each on a random copy's
dir, listed right after it): its copies are the kept ones with some added, which the append finds by runs
(forecast_replica_adds), and its partitions' settings are read again.

`--cluster` runs the two forecasts again on a standalone Spark cluster (one master, one worker of 2 cores;
mover/testing/spark_cluster.py) with `--master spark://...`.

Past its fixed bounds (forecast_driver.DRIVER_CELLS, DRIVER_REPLICA_ROWS) the driver forecasts a fleet when its
estimated peak is within half the memory the system has available (forecast_driver.fits): on this machine's 23 GB,
20M replicas x 31 days (207M sizes, 9.45 GB estimated) is the driver's, as an operator's command runs it.
`--driver-cells N` raises the fixed bounds (DRIVER_CELLS to N sizes and DRIVER_REPLICA_ROWS to N / 5 replica rows,
set in the forecast's own process before it starts): the driver's whatever the memory available.

Usage: python bench/forecast_scale.py [--rows 2000000] [--days 30] [--master local[2]] [--cluster]
                                      [--keep /var/tmp/fcast] [--base-code DIR] [--driver-cells N]
                                      [--windows 8,16] [--rounds 3] [--moved N] [--added N]

`--keep DIR` makes the fleet under DIR and leaves it there for the next run; `--base-code DIR` (a checkout of
other code, e.g. `git archive main | tar -x -C DIR`) runs each forecast with that code too, one after the other.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.audit_commands import MOVER_AUDIT, run_sampled  # noqa: E402
from bench.common import bench_root  # noqa: E402
from mover.audit import forecast, snapshot  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree_rss(root: int, peak: dict[str, float]) -> None:
    """Peak resident MB of the Python processes and of the JVMs under `root`, into `peak`."""
    todo, now = [root], {"python": 0.0, "jvm": 0.0}
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except OSError:
                continue
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1]) * PAGE / 1e6
            with open(f"/proc/{pid}/comm") as f:
                kind = "jvm" if f.read().strip() == "java" else "python"
        except OSError:
            continue
        now[kind] += rss
        todo.extend(children.get(pid, []))
    for kind, mb in now.items():
        peak[kind] = max(peak.get(kind, 0.0), mb)


def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, dict[str, float], str]:
    """(wall s, CPU s of the tree, peak RSS MB by kind, stdout) of one command; a failure stops the bench."""
    peak: dict[str, float] = {}
    wall, cpu, out = run_sampled(argv, env=env, interval=0.1, also=lambda pid: _tree_rss(pid, peak))
    return wall, cpu, peak, out


def grow(base: Path, root: Path, days: int, seed: int = 1) -> list[Path]:
    """DAYS + 1 daily snapshots under `root` ending at `base`'s time: every partition's replicas at its size then."""
    rng = np.random.default_rng(seed)
    replicas = pq.read_table(base / "replicas")
    key = ["cluster", "topic", "partition"]
    parts = replicas.select(key).group_by(key).aggregate([])
    # One share per partition (its replicas alike): how much smaller it was DAYS ago; a tenth do not grow.
    n = parts.num_rows
    ids = parts.append_column("share", pa.array(np.where(rng.random(n) < 0.1, 0.0, rng.uniform(0, 0.5, n))))
    replicas = replicas.append_column("_row", pa.array(np.arange(replicas.num_rows)))
    at = forecast.taken_at(base)
    sizes = replicas["size_bytes"].to_numpy().astype(float)
    shares = _aligned_shares(replicas, ids)
    partitions = with_settings(pq.read_table(base / "partitions"))
    made = []
    for d in range(days + 1):
        back = (days - d) / days
        name = snapshot.snapshot_name(at - timedelta(days=days - d))
        target = root / name
        shutil.copytree(base / "log_dirs", target / "log_dirs")
        (target / "partitions").mkdir(parents=True)
        pq.write_table(partitions, target / "partitions" / "part-00000.parquet")
        grown = replicas.drop_columns(["_row"]).set_column(
            replicas.schema.get_field_index("size_bytes"), "size_bytes",
            pa.array((sizes * (1 - shares * back)).astype(np.int64)))
        (target / "replicas").mkdir(parents=True)
        pq.write_table(grown, target / "replicas" / "part-00000.parquet")
        made.append(target)
    return made


def with_settings(partitions: pa.Table, seed: int = 4) -> pa.Table:
    """`partitions` with the retention settings collect writes (snapshot.PARTITIONS_RETENTION: each topic's
    effective retention.bytes and retention.ms), which `mover-audit synth` leaves out: a fifth of the topics
    capped by size, a fifth kept for other than Kafka's 7 days. The forecast reads them from the newest snapshot
    (forecast_settings), again whenever its partitions changed."""
    if "retention_ms" in partitions.schema.names:
        return partitions
    topics, of_topic = np.unique(partitions["topic"].to_numpy(zero_copy_only=False).astype(str), return_inverse=True)
    rng = np.random.default_rng(seed)
    kind = rng.choice(3, len(topics), p=[0.6, 0.2, 0.2])
    capped = np.where(kind == 1, rng.integers(1, 50, len(topics)) * (1 << 30), -1)
    kept = np.where(kind == 2, rng.integers(1, 30, len(topics)) * 86_400_000, 604_800_000)
    return (partitions.append_column("retention_bytes", pa.array(capped[of_topic], pa.int64()))
            .append_column("retention_ms", pa.array(kept[of_topic], pa.int64())))


def _aligned_shares(replicas: pa.Table, ids: pa.Table) -> np.ndarray:
    """Each replica row's partition share, in the replicas' row order."""
    joined = replicas.select(["cluster", "topic", "partition", "_row"]).join(ids, ["cluster", "topic", "partition"])
    order = np.argsort(joined["_row"].to_numpy())
    return joined["share"].to_numpy()[order]


def moved(newest: Path, into: Path, count: int, seed: int = 2) -> Path:
    """A copy of snapshot `newest` at `into` (its other datasets linked) whose replicas have `count` of them, at
    random, moved to another dir of their broker: the next row of the same broker on another dir gives it."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    for dataset in ("log_dirs", "partitions"):
        (into / dataset).symlink_to(newest / dataset)
    table = pq.read_table(newest / "replicas")
    broker = table["broker"].to_numpy()
    dirs = table["log_dir"].combine_chunks().dictionary_encode()
    codes = dirs.indices.to_numpy().copy()
    n = len(codes)
    for i in np.random.default_rng(seed).choice(n, size=min(count, n), replace=False).tolist():
        j = next((j for j in range(i + 1, min(n, i + 100_000)) if broker[j] == broker[i] and codes[j] != codes[i]),
                 None)
        if j is not None:
            codes[i] = codes[j]
    table = table.set_column(table.schema.get_field_index("log_dir"), table.schema.field("log_dir"),
                             pa.DictionaryArray.from_arrays(pa.array(codes), dirs.dictionary).cast(pa.string()))
    (into / "replicas").mkdir()
    pq.write_table(table, into / "replicas" / "part-00000.parquet")
    return into


def added(newest: Path, into: Path, count: int, seed: int = 3) -> Path:
    """A copy of snapshot `newest` at `into` (its log dirs linked) with `count` partitions of a topic created since,
    a replica each on the dir of a replica chosen at random, listed right after that replica (rows added at
    `count` places among the others, as collect's listing by partition puts a new topic's among its broker's) and
    at the end of the partitions: its copies are not the kept ones placed alike (the append finds the copies
    added: forecast_replica_adds)."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    (into / "log_dirs").symlink_to(newest / "log_dirs")
    replicas, partitions = (pq.read_table(newest / name) for name in ("replicas", "partitions"))
    picked_at = np.random.default_rng(seed).choice(replicas.num_rows, size=count, replace=False)
    picked = replicas.take(picked_at)
    topic, numbers = pa.array(["created-since"] * count), pa.array(np.arange(count, dtype=np.int32))
    new_replicas = picked.set_column(picked.schema.get_field_index("topic"), picked.schema.field("topic"), topic)
    new_replicas = new_replicas.set_column(new_replicas.schema.get_field_index("partition"),
                                           new_replicas.schema.field("partition"), numbers)
    first = partitions.take(np.zeros(count, dtype=np.int64))
    new_partitions = first.set_column(first.schema.get_field_index("topic"), first.schema.field("topic"), topic)
    new_partitions = new_partitions.set_column(
        new_partitions.schema.get_field_index("partition"), new_partitions.schema.field("partition"), numbers)
    new_partitions = new_partitions.set_column(
        new_partitions.schema.get_field_index("replicas"), new_partitions.schema.field("replicas"),
        pa.array([[int(b)] for b in picked["broker"].to_pylist()], new_partitions.schema.field("replicas").type))
    # Each in its replica's cluster (Metadata lists it there: else the audit's duplicate check suspects the broker).
    new_partitions = new_partitions.set_column(
        new_partitions.schema.get_field_index("cluster"), new_partitions.schema.field("cluster"),
        picked["cluster"].cast(new_partitions.schema.field("cluster").type))
    # Each new replica's row right after the one it copies: the old rows at even places, the new at odd ones.
    place = np.concatenate([2 * np.arange(replicas.num_rows), 2 * np.sort(picked_at) + 1])
    order = np.argsort(place, kind="stable")
    by_place = np.argsort(picked_at, kind="stable")
    for name, table, more, taken in (("replicas", replicas, new_replicas.take(by_place), order),
                                     ("partitions", partitions, new_partitions, None)):
        (into / name).mkdir()
        both = pa.concat_tables([table, more.cast(table.schema)])
        pq.write_table(both.take(taken) if taken is not None else both, into / name / "part-00000.parquet")
    return into


def line(name: str, result: tuple[float, float, dict[str, float], str], rows: float) -> None:
    wall, cpu, peak, _ = result
    print(f"{name:<48} {wall:7.1f} s wall {cpu:7.1f} s CPU  peak RSS python {peak.get('python', 0):6.0f} MB, "
          f"JVM {peak.get('jvm', 0):6.0f} MB  ({rows / wall / 1e3:.0f}k rows/s)")


def _fleet(work: Path, rows: int, days: int, spark: list[str]) -> tuple[Path, list[Path]]:
    """The fleet root and its snapshots, made under `work` (or reused from a run before with the same shape)."""
    root = work / f"fleet-{rows}-{days}"
    made = snapshot.list_snapshots(root)
    if len(made) == days + 1:
        print(f"fleet reused from {root}")
        for path in made:  # a fleet made before the settings were written (with_settings): given them now
            partitions = pq.read_table(path / "partitions")
            if "retention_ms" not in partitions.schema.names:
                shutil.rmtree(path / "partitions")
                (path / "partitions").mkdir()
                pq.write_table(with_settings(partitions), path / "partitions" / "part-00000.parquet")
        return root, made
    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    brokers = max(3, rows // (5 * 8 * 500))
    base = work / "base"
    shutil.rmtree(base, ignore_errors=True)
    run([*MOVER_AUDIT, "synth", "--out", str(base), "--clusters", "5", "--brokers", str(brokers), "--disks", "8",
         "--replicas-per-disk", "500", "--seed", "1", *spark])
    [made_base] = snapshot.list_snapshots(base)
    made = grow(made_base, root, days)
    shutil.rmtree(base, ignore_errors=True)
    print(f"fleet made in {time.perf_counter() - started:.0f} s under {root}")
    return root, made


def _linked(history: Path, into: Path) -> Path:
    """A copy of the compact history `history` at `into` made of hard links to its files (no byte copied)."""
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(history, into, copy_function=os.link)
    return into


def _warm(root: Path, pattern: str = "*/*/*") -> None:
    """Every file of the fleet's snapshots under `root` (or those `pattern` names) read once, a MB at a time: into
    the page cache, where the host may have paged them out since they were written."""
    for path in sorted(root.glob(pattern)):
        if path.is_file():
            with open(path, "rb") as f:
                while f.read(1 << 20):
                    pass


def _median(runs: list[tuple[float, float, dict[str, float], str]]) -> tuple[float, float]:
    """(wall, CPU): each the median of `runs`' own."""
    return float(np.median([r[0] for r in runs])), float(np.median([r[1] for r in runs]))


def _mirror(root: Path, into: Path, last: int | None = None) -> Path:
    """A second fleet root whose snapshots are links to `root`'s (its own compact history): the base code's, or
    (`last`) a shorter window of the newest ones."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    for path in snapshot.list_snapshots(root)[-last if last else 0:]:
        (into / path.name).symlink_to(path)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--cluster", action="store_true", help="also on a standalone Spark cluster")
    parser.add_argument("--keep", metavar="DIR",
                        help="make the fleet under DIR and keep it (reused by the next run with the same shape)")
    parser.add_argument("--base-code", metavar="DIR",
                        help="a checkout of other code (e.g. git archive of main): each forecast run by it too, "
                             "side by side, on a fleet root of links to the same snapshots")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the append, each side's right after an audit of its own (medians compared)")
    parser.add_argument("--windows", metavar="N,N", type=lambda v: [int(w) for w in v.split(",")], default=[],
                        help="also the append to windows of these many snapshots (cold first without the newest)")
    parser.add_argument("--added", type=int, metavar="N", default=0,
                        help="also append a newest snapshot with N partitions added (found by runs)")
    parser.add_argument("--moved", type=int, metavar="N", default=0,
                        help="also append a newest snapshot with N replicas moved to other dirs (its copies new)")
    parser.add_argument("--driver-cells", type=int, metavar="N",
                        help="the forecasts with the driver's bounds raised to N sizes (and N / 5 replica rows)")
    args = parser.parse_args()
    forecast_command = MOVER_AUDIT if args.driver_cells is None else [
        MOVER_AUDIT[0], "-c", "import sys; from mover.audit import cli; from mover.audit.forecast import driver as d; "
        f"d.DRIVER_CELLS = {args.driver_cells}; d.DRIVER_REPLICA_ROWS = {args.driver_cells // 5}; "
        "cli.main(sys.argv[1:])"]
    work = Path(args.keep) if args.keep else bench_root()
    work.mkdir(parents=True, exist_ok=True)
    spark = ["--master", args.master, "--shuffle-partitions", "8"]
    sides: list[tuple[str, Path | None]] = [("", None)]
    try:
        root, made = _fleet(work, args.rows, args.days, spark)
        newest = made[-1]
        roots = {"": root}
        shutil.rmtree(root / "_forecast_history", ignore_errors=True)
        if args.base_code:
            sides.append((" [base]", Path(args.base_code)))
            roots[" [base]"] = _mirror(root, work / "fleet-base")
        rows = pq.ParquetFile(next((newest / "replicas").glob("*.parquet"))).metadata.num_rows
        print(f"{rows:,} replica rows x {args.days + 1} daily snapshots")
        print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        aside = work / newest.name
        newest.rename(aside)
        for side in roots.values():
            if side != root:
                (side / newest.name).unlink()
        found: dict[str, dict[str, tuple[float, float, dict[str, float], str]]] = {}

        def forecast_run(step: str, label: str, rows_read: float, turn: int = 0,
                         before: Callable[[], None] | None = None) -> None:
            # Each round's sides in turn first; `before` run before each side's forecast.
            for suffix, code in sides[turn % len(sides):] + sides[:turn % len(sides)]:
                out = work / f"f-{step}{suffix.strip(' []')}"
                # Its kept history read just before, as the audit's snapshot is by the runs before it: the two
                # sides' histories were written at different times, and this VM pages out what has gone cold.
                _warm(roots[suffix], "_forecast_history/*")
                if before is not None:
                    before()
                result = run_in([*forecast_command, "forecast", "--snapshots", str(roots[suffix]), "--out",
                                 str(out), *spark], code)
                found.setdefault(step, {})[suffix] = result
                line(label + suffix, result, rows_read)

        # The snapshots read once before the first cold run, so that with --base-code the side that runs first
        # does not pay alone for bringing them into the page cache (97.8 s against the second side's 68.0 s, the
        # same 70-76 s each when run by hand one after the other).
        _warm(root)
        forecast_run("cold", f"forecast, cold ({args.days} snapshots, history written)", rows * args.days)
        aside.rename(newest)
        for side in roots.values():
            if side != root:
                (side / newest.name).symlink_to(newest)
        # An audit, then an append, --rounds times a side, each append from the history the cold run left
        # (its files hard-linked aside: a history's files are never written in place, only new ones named), so
        # that the host's moods (this VM's pages out cold memory behind the process: docs/audit.md) fall on both.
        before = {suffix: _linked(side / "_forecast_history", work / f"history-before{suffix.strip(' []')}")
                  for suffix, side in roots.items()}
        audits: list[tuple[float, float, dict[str, float], str]] = []
        appends: dict[str, list[tuple[float, float, dict[str, float], str]]] = {suffix: [] for suffix, _ in sides}
        for r in range(max(1, args.rounds)):
            def audit(r: int = r) -> None:
                audits.append(run([*MOVER_AUDIT, "audit", "--snapshot", str(newest), "--out",
                                   str(work / "audit-out"), *spark]))
                line(f"audit --snapshot NEWEST (one snapshot), round {r + 1}", audits[-1], rows)

            for suffix, _ in sides:
                history = roots[suffix] / "_forecast_history"
                shutil.rmtree(history)
                _linked(before[suffix], history)
            # An audit right before each side's append, so that every append meets what an audit left: with one
            # audit a round, the same code on both sides measured 5.7 and 6.1 s against 5.2 s, the side that ran
            # first after the audit being the same one in two rounds of three (docs/forecast-performance.md,
            # "A fair bench"). The anchor gets a run per append too.
            forecast_run("append", f"forecast, the newest appended to the history, round {r + 1}", rows, r, audit)
            for suffix, _ in sides:
                appends[suffix].append(found["append"][suffix])
        forecast_run("again", "forecast, nothing new (history read)", rows)
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        size = sum(f.stat().st_size for f in (root / "_forecast_history").rglob("*") if f.is_file())
        one = sum(f.stat().st_size for f in (newest / "replicas").rglob("*") if f.is_file())
        print(f"compact history {size / 1e6:.0f} MB on disk for {args.days + 1} snapshots (one snapshot's "
              f"replicas: {one / 1e6:.0f} MB)")
        audit = _median(audits)
        print(f"audit of one snapshot, median of {len(audits)}: {audit[0]:.1f} s wall, {audit[1]:.1f} s CPU "
              f"(walls {', '.join(f'{a[0]:.1f}' for a in audits)})")
        for suffix, _ in sides:
            warm = _median(appends[suffix])
            print(f"appended{suffix}, median of {len(appends[suffix])}: {warm[0]:.1f} s wall, {warm[1]:.1f} s CPU "
                  f"(walls {', '.join(f'{a[0]:.1f}' for a in appends[suffix])})")
            print(f"appended{suffix} / audit of one snapshot (medians): {warm[0] / audit[0]:.2f}x wall, "
                  f"{warm[1] / audit[1]:.2f}x CPU")
        for width in args.windows:
            # The newest snapshot appended to a window of `width` snapshots: cold on the ones before it, then the
            # append alone, as above.
            short = _mirror(root, work / f"window-{width}", last=width)
            (short / newest.name).unlink()
            run([*forecast_command, "forecast", "--snapshots", str(short), "--out", str(work / "f-window"), *spark])
            (short / newest.name).symlink_to(newest)
            result = run([*forecast_command, "forecast", "--snapshots", str(short), "--out",
                          str(work / "f-window"), *spark])
            line(f"forecast, the newest appended to {width} snapshots", result, rows)
            print(f"appended to {width} snapshots / audit of one snapshot: {result[0] / audit[0]:.2f}x wall, "
                  f"{result[1] / audit[1]:.2f}x CPU")
        changes = [(f"{args.moved} moved", f"{args.moved} replicas moved to other dirs of their brokers", moved,
                    args.moved), (f"{args.added} added", f"{args.added} partitions added", added, args.added)]
        for label, said, make, count in changes:
            if not count:
                continue
            # The fleet with a newest snapshot of other copies: its older snapshots links to the fleet's, its
            # history the one the cold run left (hard links), each append from it right after an audit of it.
            other = _mirror(root, work / "fleet-changed")
            (other / newest.name).unlink()
            changed = make(newest, other / newest.name, count)
            print(f"the newest snapshot with {said}")
            audits_changed, appends_changed = [], []
            for r in range(max(1, args.rounds)):
                audits_changed.append(run([*MOVER_AUDIT, "audit", "--snapshot", str(changed), "--out",
                                           str(work / "audit-out"), *spark]))
                line(f"audit --snapshot NEWEST, {label}, round {r + 1}", audits_changed[-1], rows)
                history = other / "_forecast_history"
                shutil.rmtree(history, ignore_errors=True)
                _linked(before[""], history)
                _warm(other, "_forecast_history/*")
                appends_changed.append(run([*forecast_command, "forecast", "--snapshots", str(other), "--out",
                                            str(work / "f-changed"), *spark]))
                line(f"forecast, the newest ({label}) appended, round {r + 1}", appends_changed[-1], rows)
            audit_c, warm_c = _median(audits_changed), _median(appends_changed)
            print(f"appended with {label} / audit of that snapshot (medians): "
                  f"{warm_c[0] / audit_c[0]:.2f}x wall ({warm_c[0]:.1f} s against {audit_c[0]:.1f} s), "
                  f"{warm_c[1] / audit_c[1]:.2f}x CPU")
        if args.cluster:
            from mover.testing.spark_cluster import SparkCluster

            with SparkCluster(work / "cluster") as c:
                on = ["--master", c.master_url, "--shuffle-partitions", "8"]
                shutil.rmtree(root / "_forecast_history")
                line("forecast on a standalone cluster, cold", run(
                    [*MOVER_AUDIT, "forecast", "--snapshots", str(root), "--out", str(work / "c1"), *on], c.env()),
                     rows * (args.days + 1))
    finally:
        if args.keep:
            for name in ("audit-out", "cluster", "fleet-base", "fleet-changed", "history-before", "history-beforebase",
                         *(f"window-{w}" for w in args.windows)):
                shutil.rmtree(work / name, ignore_errors=True)
            for out in work.glob("f-*"):
                shutil.rmtree(out, ignore_errors=True)
            stray = [p for p in work.iterdir() if snapshot.SNAPSHOT_NAME.match(p.name)]
            for p in stray:  # the newest, set aside when a run stopped midway: back into its fleet
                p.rename(work / f"fleet-{args.rows}-{args.days}" / p.name)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def run_in(argv: list[str], code: Path | None) -> tuple[float, float, dict[str, float], str]:
    """run(), by the code checked out at `code` (None: this one)."""
    if code is None:
        return run(argv)
    peak: dict[str, float] = {}
    wall, cpu, out = run_sampled(argv, env={"PYTHONPATH": str(code)}, cwd=code, interval=0.1,
                                 also=lambda pid: _tree_rss(pid, peak))
    return wall, cpu, peak, out


if __name__ == "__main__":
    sys.exit(main())
