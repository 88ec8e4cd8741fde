"""mover-audit's commands as an operator runs them (one process each, JVM start included) against the floor: a bare
Spark session, its first job and one read of the snapshot, measured the same way.

Demo size (the 144 disks of `mover-audit demo`): the floor twice, pyspark's own session (`SparkSession.builder`,
local[*], UI off) and the session mover-audit starts (its JVM options: log config, the class-data archive of
docs/audit.md#performance), then `audit --snapshot` (the latest), `audit --snapshots` (the latest and, for stuck
moves, the one before), `plan`, `report` and `audit --snapshots --plan --report` (the whole pipeline in one
session). Goal: each command within 2 s of the floor. Rounds alternate the runs; medians are printed.

Fleet size (--rows N): synth N and 2N replica rows (5 clusters, 8 disks x 500 replicas per broker), then on each
`audit` + `plan` as two commands and `audit --plan` as one. Goals (issue 38): audit + plan of 20M rows under 30 s,
`audit --plan` under 20 s, 2N at most 2.2x N, for snapshots of each writer `--writers` names:
  synth    `mover-audit synth`'s own (Spark: 160 files of one row group each, dictionary-encoded names);
  collect  the layout `mover-audit collect --local` writes (collect.collect_local: one file per dataset by pyarrow's
           write_table and its defaults, row groups of 1Mi rows, log_dirs with collect's extra column
           total_source, the replicas in the order the brokers answered: a broker's rows together);
  other    another writer following docs/audit.md's layout: 50 clusters (the same brokers, disks and replicas in
           all), pyarrow without dictionary encoding, row groups of 50,000 rows in 8 files, the columns in another
           order, a column of its own, timestamps in milliseconds.
(collect and other are synth's fleet written again with pyarrow, so the three hold the same kind of fleet.)
`--keep DIR` keeps the snapshots in DIR and uses those already there (synth of 20M rows takes minutes on a loaded
host).

Wall time depends on what else runs on the machine; so each run's CPU time is printed too (user + system of the whole
process tree: the Python driver, Spark's launcher and driver JVM, the Python workers), sampled from /proc every
20 ms (a process that lives less than that is missed).

`--baseline DIR` (another checkout, e.g. a `git worktree add --detach DIR main`) also runs every command of this
checkout from DIR (the same interpreter, with DIR as the working directory, so `python -m mover.audit` is DIR's code),
alternating which goes first each round, and prints this checkout's time over DIR's: on a host shared with others
only runs side by side compare.

Usage: python bench/audit_commands.py [--rounds 3] [--baseline DIR]  (demo size only, a few minutes)
       python bench/audit_commands.py --rows 10000000 --rounds 1     (also 10M and 20M rows)
       python bench/audit_commands.py --rows 10000000 --skip-demo --writers synth,collect,other --keep /var/tmp/s
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.audit import demo, snapshot  # noqa: E402
from mover.audit import spark as mover_spark  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MOVER_AUDIT = [PYTHON, "-m", "mover.audit"]
TICK = os.sysconf("SC_CLK_TCK")

FLOOR_PYSPARK = """
import sys, warnings
warnings.filterwarnings("ignore")
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master(sys.argv[2]).config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("FATAL")
spark.range(1).collect()
spark.read.parquet(sys.argv[1]).agg(F.sum("size_bytes")).collect()
spark.stop()
"""
FLOOR_OURS = """
import sys
from mover.audit import spark as s
from pyspark.sql import functions as F
spark = s.session(sys.argv[2])
spark.range(1).collect()
spark.read.parquet(sys.argv[1]).agg(F.sum("size_bytes")).collect()
s.stop_if_created_here()
"""


def _tree_cpu(root: int, seen: dict[int, float]) -> None:
    """Records the CPU seconds of `root` and its descendants into `seen` (pid -> latest figure)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        stats[pid] = (int(fields[11]) + int(fields[12])) / TICK
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            seen[pid] = max(seen.get(pid, 0.0), stats[pid])
        todo.extend(children.get(pid, []))


def run(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of one command; a failure stops the bench."""
    wall, cpu, _ = run_sampled(argv, env=env, cwd=cwd)
    return wall, cpu


def run_sampled(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
                interval: float = 0.02, also: Callable[[int], None] | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process tree, stdout) of one command, its tree sampled every `interval`
    (and handed to `also`, e.g. a memory sampler, with the root pid); a failure stops the bench."""
    seen: dict[int, float] = {}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})}, cwd=cwd or ROOT)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(interval):
            _tree_cpu(proc.pid, seen)
            if also is not None:
                also(proc.pid)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.returncode not in (0, 3):  # 3: audit found what --fail-on asks for; not asked here, but not a failure
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}\n{err.decode(errors='replace')}")
    return wall, sum(seen.values()), out.decode(errors="replace")


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return path


BASELINE = " [baseline]"


def demo_size(root: Path, rounds: int, master: str, baseline: Path | None = None) -> None:
    shape = demo.DEMO_SHAPE
    snaps = root / "demo"
    run([*MOVER_AUDIT, "synth", "--out", str(snaps), "--clusters", str(shape.clusters), "--brokers",
         str(shape.brokers), "--disks", str(shape.disks), "--replicas-per-disk", str(shape.replicas_per_disk),
         "--offline", str(shape.offline), "--unknown-capacity", str(shape.unknown_capacity), "--moving",
         str(shape.moving), "--stuck", str(shape.stuck), "--seed", str(shape.seed), "--history", "--master", master])
    latest = snapshot.list_snapshots(snaps)[-1]
    # The first JVM writes the class-data archive at its exit (once per JDK and Spark install): the synth above.
    archive = mover_spark._cds_archive()
    print(f"class-data archive: {archive if archive and archive.is_file() else 'none (off, or not written)'}")
    out = root / "demo-out"
    spark = ["--master", master]
    # The report reads an audit's and a plan's output: made once beforehand, so `report` alone is timed.
    run([*MOVER_AUDIT, "audit", "--snapshots", str(snaps), "--out", str(fresh(out / "a0")), "--plan",
         str(fresh(out / "p0")), *spark])
    runs = {
        "floor: pyspark's session": [PYTHON, "-c", FLOOR_PYSPARK, str(latest / "replicas"), master],
        "floor: mover-audit's session": [PYTHON, "-c", FLOOR_OURS, str(latest / "replicas"), master],
        "audit --snapshot": [*MOVER_AUDIT, "audit", "--snapshot", str(latest), "--out", str(out / "a"), *spark],
        "audit --snapshots": [*MOVER_AUDIT, "audit", "--snapshots", str(snaps), "--out", str(out / "a"), *spark],
        "plan": [*MOVER_AUDIT, "plan", "--snapshot", str(latest), "--out", str(out / "p"), *spark],
        "report": [*MOVER_AUDIT, "report", "--audit", str(out / "a0"), "--plan", str(out / "p0"), "--out",
                   str(out / "r.html")],
        "audit --plan --report": [*MOVER_AUDIT, "audit", "--snapshots", str(snaps), "--out", str(out / "a"),
                                  "--plan", str(out / "p"), "--report", str(out / "r.html"), *spark],
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    if baseline is not None:
        times.update({name + BASELINE: [] for name in runs if not name.startswith("floor")})
    for r in range(rounds):
        for name, argv in runs.items():
            sides = [(name, None)]
            if baseline is not None and not name.startswith("floor"):
                sides.append((name + BASELINE, baseline))
                sides = sides[::-1] if r % 2 else sides
            for label, cwd in sides:
                fresh(out / "a"), fresh(out / "p")
                times[label].append(run(argv, cwd=cwd))
                print(f"  round {r + 1}: {label:<41} {times[label][-1][0]:6.1f} s wall {times[label][-1][1]:6.1f} s "
                      f"cpu", flush=True)
    wall = {name: statistics.median(t[0] for t in v) for name, v in times.items()}
    cpu = {name: statistics.median(t[1] for t in v) for name, v in times.items()}
    floor = "floor: mover-audit's session"
    print(f"\ndemo size ({latest}), {master}, medians of {rounds} rounds; differences to the floor of "
          f"mover-audit's own session (goal: within 2 s)")
    print(f"{'run':<41} {'wall s':>7} {'- floor':>8} {'/ floor':>8} {'cpu s':>7} {'- floor':>8} {'/ floor':>8}")
    for name in times:
        print(f"{name:<41} {wall[name]:7.1f} {wall[name] - wall[floor]:+8.1f} {wall[name] / wall[floor]:8.2f} "
              f"{cpu[name]:7.1f} {cpu[name] - cpu[floor]:+8.1f} {cpu[name] / cpu[floor]:8.2f}")
    if baseline is not None:
        print(f"this checkout / {baseline}:")
        for name in runs:
            if name + BASELINE in times:
                print(f"  {name:<30} wall {wall[name] / wall[name + BASELINE]:.2f}x  "
                      f"cpu {cpu[name] / cpu[name + BASELINE]:.2f}x")


WRITERS = ("synth", "collect", "other")
OTHER_CLUSTERS = 50
OTHER_ROW_GROUP = 50_000
OTHER_FILES = 8


def fleet(root: Path, writer: str, n: int, master: str) -> tuple[Path, str, float]:
    """The snapshot of `writer` with about `n` replica rows under root (made unless there already), its shape, and
    the seconds it took to make (0 when found)."""
    clusters = OTHER_CLUSTERS if writer == "other" else 5
    brokers = max(3, n // (clusters * 8 * 500))
    shape = f"{clusters} x {brokers} brokers x 8 disks x 500"
    start = time.perf_counter()
    source = root / f"synth-{clusters}-{n}"
    if not _complete(source):
        run([*MOVER_AUDIT, "synth", "--out", str(fresh(source)), "--clusters", str(clusters), "--brokers",
             str(brokers), "--disks", "8", "--replicas-per-disk", "500", "--mixed-capacity", "0.1", "--moving",
             "0.0005", "--seed", "1", "--master", master])
    made = snapshot.list_snapshots(source)[-1]
    if writer == "synth":
        return made, shape, time.perf_counter() - start
    snaps = root / f"{writer}-{n}"
    if not _complete(snaps):
        (rewrite_as_collect if writer == "collect" else rewrite_as_other)(made, fresh(snaps) / made.name)
    return snapshot.list_snapshots(snaps)[-1], shape, time.perf_counter() - start


def _complete(snaps: Path) -> bool:
    found = snapshot.list_snapshots(snaps)
    return bool(found) and all((found[-1] / name).is_dir() for name in snapshot.DATASETS)


def rewrite_as_collect(source: Path, target: Path) -> None:
    """`source` as mover-audit collect --local writes a snapshot: pq.write_table of each whole dataset into
    part-00000.parquet with pyarrow's defaults, log_dirs with collect's total_source, each broker's rows together."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name in snapshot.DATASETS:
        table = pq.read_table(source / name)
        if name == "log_dirs":
            table = table.append_column("total_source", pa.array(["broker"] * table.num_rows, pa.string()))
        if name != "partitions":
            table = table.sort_by([("cluster", "ascending"), ("broker", "ascending")])
        (target / name).mkdir(parents=True)
        pq.write_table(table, target / name / "part-00000.parquet")
        del table


def rewrite_as_other(source: Path, target: Path) -> None:
    """`source` as another writer might write it (docs/audit.md's layout): plain-encoded strings (no dictionary),
    row groups of OTHER_ROW_GROUP rows in OTHER_FILES files, the columns reversed, a column of its own, timestamps
    in milliseconds."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name in snapshot.DATASETS:
        table = pq.read_table(source / name)
        table = table.select(list(reversed(table.column_names)))
        table = table.append_column("writer", pa.array(["other"] * table.num_rows, pa.string()))
        for i, column in enumerate(table.columns):
            if pa.types.is_timestamp(column.type):
                table = table.set_column(i, table.field(i).name, column.cast(pa.timestamp("ms", tz="UTC")))
        (target / name).mkdir(parents=True)
        per_file = -(-table.num_rows // OTHER_FILES)
        for f in range(OTHER_FILES):
            part = table.slice(f * per_file, per_file)
            if part.num_rows or f == 0:
                pq.write_table(part, target / name / f"part-{f:05d}.parquet", use_dictionary=False,
                               row_group_size=OTHER_ROW_GROUP)
        del table


def fleet_size(root: Path, rows: int, rounds: int, master: str, baseline: Path | None = None,
               writers: tuple[str, ...] = ("synth",), keep: Path | None = None) -> None:
    spark = ["--master", master]
    commands = ("audit", "plan", "audit --plan")
    for writer in writers:
        figures: dict[int, dict[str, tuple[float, float]]] = {}
        for n in (rows, 2 * rows):
            latest, shape, made = fleet(keep or root, writer, n, master)
            out = root / f"out-{writer}-{n}"
            argv = {"audit": [*MOVER_AUDIT, "audit", "--snapshot", str(latest), "--out", str(out / "a"), *spark],
                    "plan": [*MOVER_AUDIT, "plan", "--snapshot", str(latest), "--out", str(out / "p"), *spark],
                    "audit --plan": [*MOVER_AUDIT, "audit", "--snapshot", str(latest), "--out", str(out / "a"),
                                     "--plan", str(out / "p"), *spark]}
            samples: dict[str, list[tuple[float, float]]] = {}
            loads: list[float] = []
            for r in range(rounds):
                for command in commands:
                    sides: list[tuple[str, Path | None]] = [(command, None)]
                    if baseline is not None:
                        sides.append((command + BASELINE, baseline))
                        sides = sides[::-1] if r % 2 else sides
                    for label, cwd in sides:
                        fresh(out / "a"), fresh(out / "p")
                        loads.append(os.getloadavg()[0])
                        samples.setdefault(label, []).append(run(argv[command], cwd=cwd))
            figures[n] = f = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
                              for k, v in samples.items()}
            two = f["audit"][0] + f["plan"][0]
            print(f"{writer:>8} {n:>12,} rows ({shape}; made in {made:.0f} s; load {min(loads):.1f}-"
                  f"{max(loads):.1f}): audit {f['audit'][0]:.1f} s + plan {f['plan'][0]:.1f} s = {two:.1f} s as two "
                  f"commands (cpu {f['audit'][1] + f['plan'][1]:.0f} s; goal < 30 s at 20M); audit --plan "
                  f"{f['audit --plan'][0]:.1f} s (cpu {f['audit --plan'][1]:.0f} s; goal < 20 s), "
                  f"{f['audit --plan'][0] / two:.2f}x the two", flush=True)
            if baseline is not None:
                b = {k: f[k + BASELINE] for k in commands}
                b_two = b["audit"][0] + b["plan"][0]
                cpu_two = (f["audit"][1] + f["plan"][1]) / (b["audit"][1] + b["plan"][1])
                print(f"{'':>21} from {baseline}: audit {b['audit'][0]:.1f} s + plan {b['plan'][0]:.1f} s = "
                      f"{b_two:.1f} s (cpu {b['audit'][1] + b['plan'][1]:.0f} s), audit --plan "
                      f"{b['audit --plan'][0]:.1f} s (cpu {b['audit --plan'][1]:.0f} s); this checkout / it: two "
                      f"commands wall {two / b_two:.2f}x, cpu {cpu_two:.2f}x; "
                      f"audit --plan wall {f['audit --plan'][0] / b['audit --plan'][0]:.2f}x, "
                      f"cpu {f['audit --plan'][1] / b['audit --plan'][1]:.2f}x", flush=True)
            if keep is None:
                shutil.rmtree(latest.parent, ignore_errors=True)
                shutil.rmtree(root / f"synth-{OTHER_CLUSTERS if writer == 'other' else 5}-{n}", ignore_errors=True)
        small, big = figures[rows], figures[2 * rows]
        print(f"{writer:>8} 2N / N: audit --plan {big['audit --plan'][0] / small['audit --plan'][0]:.2f}x, two "
              f"commands {(big['audit'][0] + big['plan'][0]) / (small['audit'][0] + small['plan'][0]):.2f}x "
              f"(goal <= 2.2)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=0, help="also N and 2N replica rows (the issue's: 10000000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--writers", default="synth", metavar="LIST",
                        help=f"whose snapshots at fleet size, comma-separated: {','.join(WRITERS)} (default synth)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep the fleet-size snapshots in DIR, and use those already there")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="another checkout whose commands run alternately with this one's (ratios printed)")
    args = parser.parse_args()
    root = bench_root()
    try:
        with open("/proc/loadavg") as f:
            print(f"load average before: {' '.join(f.read().split()[:3])} ({os.cpu_count()} cores)")
        baseline = args.baseline.resolve() if args.baseline else None
        if not args.skip_demo:
            demo_size(root, args.rounds, args.master, baseline)
        if args.rows:
            writers = tuple(w.strip() for w in args.writers.split(",") if w.strip())
            unknown = [w for w in writers if w not in WRITERS]
            if unknown:
                parser.error(f"--writers: unknown {', '.join(unknown)} (known: {', '.join(WRITERS)})")
            fleet_size(root, args.rows, args.rounds, args.master, baseline, writers,
                       args.keep.resolve() if args.keep else None)
        with open("/proc/loadavg") as f:
            print(f"load average after: {' '.join(f.read().split()[:3])}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
