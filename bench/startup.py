"""Start-up with 10,000 partitions over 4 log dirs, 100 of them mid-move: time until the LogManager is ready, the
resident memory it added and the descriptors it holds open (bounded by the LRU of open files, not the partitions),
then the time of a restart after the clean shutdown (checkpoints naming every partition, which a first start lacks).

Goal: under 5 s (a real Kafka 2.3.0 broker took 12.4 s to restart with 10,000 partitions,
docs/kafka-compat.md#a-real-kafka-230-brokers-figures-the-bench-anchors), and a start-up that grows linearly with
the partitions: 100,000 within about 11x the time of 10,000. The anchor, run in the same process on the same files,
is `du -s` of the log dirs: the cost of merely looking at every file once.

Usage: python bench/startup.py [--partitions 10000] [--moving 100]
  --partitions 10000 100000   each size measured in a process of its own, then the ratios of the two
  --tree DIR                  build each size under DIR once and keep it; later runs reuse it, put back as built
                              first (building 100,000 partitions takes minutes on a busy disk)
  --cold                      drop the page cache before each start and before du (a start after a reboot)
  --repeat N                   restart N times, report the fastest (the first start runs once: it needs the tree
                              put back)
  --profile FILE              cProfile of startup() into FILE (one size; worker threads are not profiled)
Each size is a fresh process. Timings on 2 shared cores vary by 10-20% between runs.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root, drop_caches  # noqa: E402
from mover.config.broker import BrokerConfig  # noqa: E402
from mover.log.log_manager import LogManager  # noqa: E402
from mover.storage.names import CHECKPOINT_FILES, META_PROPERTIES, MOVE_SUFFIX  # noqa: E402
from mover.storage.open_files import capacity_for_limit, fd_count, open_files  # noqa: E402
from mover.testing.batches import make_batch  # noqa: E402
from mover.testing.log_manager import moves  # noqa: E402

# What a kept tree was built with, written once the build finished (a tree without it is built again).
BUILT_STAMP = "built.json"
SEGMENT_LOG = "00000000000000000000.log"
INDEXES = ("00000000000000000000.index", "00000000000000000000.timeindex")


def _segment() -> bytes:
    batch = bytearray(make_batch([b"x" * 128] * 4))
    seg = bytearray()
    for i in range(8):
        batch[0:8] = (i * 4).to_bytes(8, "big")
        seg += batch
    return bytes(seg)


def layout(dirs: list[Path], partitions: int, moving: int) -> dict[Path, int]:
    """What `build` lays down: each partition dir (a `.move` for the first `moving` partitions too) and the size of
    its one segment."""
    full = len(_segment())
    out: dict[Path, int] = {}
    for p in range(partitions):
        out[dirs[p % len(dirs)] / f"topic{p // 100}-{p % 100}"] = full
        if p < moving:
            out[dirs[(p + 1) % len(dirs)] / f"topic{p // 100}-{p % 100}.move"] = full // 2
    return out


def build(dirs: list[Path], partitions: int, moving: int) -> None:
    seg = _segment()
    for d in dirs:
        d.mkdir(parents=True)
    for pdir, size in layout(dirs, partitions, moving).items():
        _lay(pdir, seg[:size], with_indexes=not pdir.name.endswith(MOVE_SUFFIX))


def _lay(pdir: Path, seg: bytes, *, with_indexes: bool) -> None:
    pdir.mkdir()
    (pdir / SEGMENT_LOG).write_bytes(seg)
    if with_indexes:
        (pdir / "00000000000000000000.index").write_bytes(b"")
        (pdir / "00000000000000000000.timeindex").write_bytes(b"")


def reset(dirs: list[Path], partitions: int, moving: int) -> None:
    """Put a kept tree back as `build` left it. A run appended a batch to every partition and wrote checkpoints and
    meta.properties; a resumed move may have copied bytes and index files into its `.move`, or even finished (the
    partition then lives in the other dir, its old copy retired). Costs about one `du` of the tree."""
    seg = _segment()
    want = layout(dirs, partitions, moving)
    for d in dirs:
        for name in (*CHECKPOINT_FILES, META_PROPERTIES):
            (d / name).unlink(missing_ok=True)
        with os.scandir(d) as it:
            for entry in it:
                if not entry.is_dir():
                    continue
                pdir = d / entry.name
                size = want.pop(pdir, None)
                if size is None:
                    shutil.rmtree(pdir)
                    continue
                keep = {SEGMENT_LOG} if entry.name.endswith(MOVE_SUFFIX) else {SEGMENT_LOG, *INDEXES}
                with os.scandir(entry.path) as files:
                    for f in files:
                        if f.name not in keep:
                            os.unlink(f.path)
                        elif f.stat().st_size != (size if f.name == SEGMENT_LOG else 0):
                            os.truncate(f.path, size if f.name == SEGMENT_LOG else 0)
    for pdir, size in want.items():  # gone: a move finished and retired this copy
        _lay(pdir, seg[:size], with_indexes=not pdir.name.endswith(MOVE_SUFFIX))


def prepare(tree: Path | None, partitions: int, moving: int) -> tuple[Path, bool]:
    """The root of the 4 log dirs, and whether it is kept after the run."""
    if tree is None:
        root = bench_root()
        build([root / f"d{i}" for i in range(1, 5)], partitions, moving)
        return root, False
    root = tree / f"p{partitions}-m{moving}"
    stamp = root / BUILT_STAMP
    dirs = [root / f"d{i}" for i in range(1, 5)]
    if stamp.exists():
        t0 = time.perf_counter()
        reset(dirs, partitions, moving)
        print(f"reusing {root} (put back as built in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    else:
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        build(dirs, partitions, moving)
        stamp.write_text(json.dumps({"partitions": partitions, "moving": moving}))
        print(f"built {root} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return root, True


def measure(partitions: int, moving: int, nofile: int, tree: Path | None, profile: Path | None,
            cold: bool, repeat: int) -> dict[str, float]:
    root, kept = prepare(tree, partitions, moving)
    dirs = [root / f"d{i}" for i in range(1, 5)]
    config = BrokerConfig.from_properties({"log.dirs": ",".join(map(str, dirs)),
                                           "intra.broker.throttled.rate": "1"})
    try:
        if cold:
            drop_caches()
        t0 = time.perf_counter()
        subprocess.run(["du", "-s", *map(str, dirs)], check=True, capture_output=True)
        du = time.perf_counter() - t0
        if cold:
            drop_caches()
        rss0, fds0 = _rss_mb(), fd_count()
        m = LogManager(config)
        prof = cProfile.Profile() if profile is not None else None
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        m.startup()
        ready = time.perf_counter() - t0
        if prof is not None:
            prof.disable()
            prof.dump_stats(str(profile))
        rss, fds = _rss_mb() - rss0, fd_count() - fds0
        resumed = len(moves(m))
        capacity = open_files().capacity
        touched, peak = _touch_all(m, nofile)
        m.shutdown()
        # A restart: the clean shutdown wrote checkpoints naming every partition, which a first start has none of.
        restarts = []
        for _ in range(repeat):
            del m
            gc.collect()  # the previous manager's cycles, so the restart walks no garbage of it
            if cold:
                drop_caches()
            m = LogManager(config)
            t0 = time.perf_counter()
            m.startup()
            restarts.append(time.perf_counter() - t0)
            m.shutdown()
        restart = min(restarts)  # the least disturbed by whatever else runs on the machine
    finally:
        if not kept:
            shutil.rmtree(root, ignore_errors=True)
    return {"partitions": partitions, "moving": moving, "resumed": resumed, "ready": ready, "restart": restart,
            "repeat": repeat, "du": du, "rss": rss, "fds": fds, "cold": cold, "capacity": capacity, "nofile": nofile,
            "touched": touched, "peak": peak}


def report(r: dict[str, float]) -> None:
    n = r["partitions"]
    cache = "page cache dropped before each start" if r["cold"] else "warm page cache"
    print(f"{n} partitions over 4 dirs, {r['moving']} mid-move ({r['resumed']} moves resumed); {cache}")
    print(f"  time until ready: {r['ready']:.2f} s (goal < 5 s at 10,000; Kafka 2.3.0: 12.4 s)")
    print(f"  restart after a clean shutdown (checkpoints name every partition): {r['restart']:.2f} s "
          f"(fastest of {r['repeat']})")
    print(f"  anchor du -s of the same dirs: {r['du']:.2f} s; ratio start-up / du: {r['ready'] / r['du']:.1f}")
    print(f"  resident memory added: {r['rss']:.0f} MB ({r['rss'] * 1024 / n:.1f} KB per partition); "
          f"descriptors held open: {r['fds']} (LRU capacity {r['capacity']}; Kafka: one or more per segment)")
    print(f"  under ulimit -n {r['nofile']}: appended to and read {r['touched']} partitions, at most {r['peak']} "
          f"descriptors open (LRU capacity {capacity_for_limit(r['nofile'])})")


def compare(results: list[dict[str, float]]) -> None:
    """Each size against the smallest: how much more time, du and memory than the partitions alone explain."""
    base = results[0]
    for r in results[1:]:
        scale = r["partitions"] / base["partitions"]
        print(f"{r['partitions']} vs {base['partitions']} partitions ({scale:g}x): time until ready "
              f"{r['ready'] / base['ready']:.1f}x (goal <= {scale * 1.1:g}x), restart "
              f"{r['restart'] / base['restart']:.1f}x, du -s {r['du'] / base['du']:.1f}x, "
              f"resident memory {r['rss'] / max(base['rss'], 1):.1f}x, descriptors {r['fds']} vs {base['fds']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, nargs="+", default=[10_000])
    ap.add_argument("--moving", type=int, default=100)
    ap.add_argument("--nofile", type=int, default=4096,
                    help="run under this soft descriptor limit and append to / read every partition once")
    ap.add_argument("--tree", type=Path, help="build under this dir once and reuse it (see the module docstring)")
    ap.add_argument("--profile", type=Path, help="cProfile of startup() into this file (one size only)")
    ap.add_argument("--cold", action="store_true",
                    help="drop the page cache before du and before each start (root on a real machine; else warm)")
    ap.add_argument("--repeat", type=int, default=1, help="restarts per size; the fastest is reported")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a child's answer to its parent
    args = ap.parse_args()
    sizes = sorted(args.partitions)
    if len(sizes) == 1:
        r = measure(sizes[0], args.moving, args.nofile, args.tree, args.profile, args.cold, args.repeat)
        print(json.dumps(r)) if args.json else report(r)
        return
    if args.profile is not None:
        ap.error("--profile takes one size")
    results = []
    for n in sizes:
        # A process per size: resident memory and the LRU of open files are per process.
        cmd = [sys.executable, __file__, "--json", "--partitions", str(n), "--moving", str(args.moving),
               "--nofile", str(args.nofile), "--repeat", str(args.repeat)]
        cmd += (["--tree", str(args.tree)] if args.tree else []) + (["--cold"] if args.cold else [])
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
        report(results[-1])
    compare(results)


def _touch_all(m: LogManager, nofile: int) -> tuple[int, int]:
    """Under a soft limit of `nofile` descriptors (the LRU sized from it, as moverd does), append a batch to every
    partition and read it back: every partition's files opened, closed by the LRU, reopened. Returns (partitions
    touched, the most descriptors the process held)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    open_files().set_capacity(capacity_for_limit(nofile))
    data = make_batch([b"touch"])
    peak = 0
    try:
        for i, tp in enumerate(list(m.replicas)):
            if m.replicas[tp].move is not None:
                continue
            info = m.append(tp, data)
            _, found = m.read(tp, info.first_offset, 1 << 20)
            found.close()
            if i % 500 == 0:
                peak = max(peak, fd_count())
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return len(m.replicas), max(peak, fd_count())


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


if __name__ == "__main__":
    main()
