"""Disks filling for real, for the forecast's end-to-end test and bench: a broker (a real Kafka or a moverd) whose log
dirs are small size-limited tmpfs mounts, kafka-python producers writing at steady byte rates into the partitions of
each dir, and `mover-audit collect` every few seconds into a fleet root, until every dir has passed `stop_at`. Then
the forecast made halfway (the first snapshot where some dir is at half the level) is judged against when each dir
really reached the level, read from the same snapshots.

    fill_kafka(kafka_home(), tmp / "kafka", root)           # or fill_moverd(tmp, root): the two runs
    # their parts:
    with Tmpfs([dir1, dir2], "24m"):                       # mounted now, unmounted (lazily) at exit
        ...start the broker on them, create the topics...
        flows = [Flow("/…/d1", [("t", 0)], 500_000), ...]  # bytes/s into each dir's partitions
        fill(bootstrap, root, flows)                        # producers + collect every 2 s, until each dir is full
    half = halfway(root)
    ...forecast --snapshot half...
    judge(root, half, disks)                                # per dir: predicted vs actual seconds to 90%
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mover.testing.history import TP
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.log_dirs_tool import create_topics
from mover.testing.moverd import Moverd
from mover.testing.placement import replica_placement
from mover.testing.producers import PyProducer
from mover.testing.wait import wait_for

if TYPE_CHECKING:
    import pandas as pd

MB = 1 << 20
LEVEL = 0.9
SIZE = "24m"  # each dir's tmpfs
FAST, MEDIUM, SLOW = 0.5 * MB, 0.35 * MB, 0.3 * MB  # bytes/s: 90% of 24 MiB at ~43 s, ~62 s, ~72 s
CAPPED_BYTES = 10 * MB  # retention.bytes of the Kafka run's capped topic, reached ~33 s in (the forecast: ~23 s)
SEGMENT_BYTES = 512 * 1024  # so the capped log holds between its limit and half a MiB more
BATCH_BYTES = 256 * 1024  # a producer's largest batch: under SEGMENT_BYTES, which Kafka refuses a batch above
RECORD_BYTES = 4000  # a value; with batching, records land on disk at a steady byte rate
COLLECT_INTERVAL_S = 2.0
STOP_AT = 0.93  # a dir's producers stop past this share: the dir never fills (a full tmpfs takes the dir offline)
DEADLINE_S = 300.0


class Tmpfs:
    """Size-limited tmpfs mounts on `paths` (made if missing) for as long as the block runs: separate small disks."""

    def __init__(self, paths: list[Path], size: str) -> None:
        self.paths = paths
        self.size = size
        self.mounted: list[Path] = []

    def __enter__(self) -> Tmpfs:
        try:
            for path in self.paths:
                path.mkdir(parents=True, exist_ok=True)
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0755", "tmpfs", str(path)],
                               check=True)
                self.mounted.append(path)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for path in reversed(self.mounted):
            subprocess.run(["umount", "-l", str(path)], check=False)
        self.mounted = []


@dataclass(frozen=True)
class Flow:
    """A producer writing `bytes_per_s` round-robin into `tps`, all on the log dir `log_dir`."""

    log_dir: str
    tps: list[TP]
    bytes_per_s: float


def collect(bootstrap: str, root: Path, cluster: str) -> Path:
    """One `mover-audit collect --local` (the command, in this process); its lines are not shown."""
    from mover.audit import cli
    from mover.audit.snapshot import list_snapshots

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = cli.main(["collect", "--local", "--bootstrap-server", bootstrap, "--cluster", cluster,
                         "--out", str(root)])
    assert code == 0, text.getvalue()
    return list_snapshots(root)[-1]


def dir_usage(snapshot: Path) -> dict[str, tuple[int, int]]:
    """log dir -> (bytes of its replicas, its size) in one snapshot."""
    import pyarrow.parquet as pq

    dirs = pq.read_table(snapshot / "log_dirs", columns=["log_dir", "total_bytes"]).to_pylist()
    used: dict[str, int] = {d["log_dir"]: 0 for d in dirs}
    for r in pq.read_table(snapshot / "replicas", columns=["log_dir", "size_bytes"]).to_pylist():
        used[r["log_dir"]] += r["size_bytes"]
    return {d["log_dir"]: (used[d["log_dir"]], d["total_bytes"]) for d in dirs}


def fill(bootstrap: str, root: Path, flows: list[Flow], *, cluster: str = "one",
         interval: float = COLLECT_INTERVAL_S, stop_at: float = STOP_AT, deadline: float = DEADLINE_S) -> list[Path]:
    """Run the producers and collect every `interval` seconds until every flow's dir has passed `stop_at` of its
    size (each dir's producers stop there). Returns the snapshots taken."""
    # A producer that falls behind its pace catches up (producers.Producer): with kafka-python's 16 KiB batches and 5
    # requests in flight that took many round trips, and under load the fastest flow reached its 90% 80% sooner than
    # the forecast made from its slowed first half said (CI, twice). Batches of up to BATCH_BYTES drain a backlog
    # in one round trip; the collects start once every producer has been acknowledged (a slow first connection is
    # not growth).
    producers = [PyProducer(f"fill{i}", bootstrap, f.tps, rate=f.bytes_per_s / RECORD_BYTES, pad=RECORD_BYTES,
                            config={"linger_ms": 20, "batch_size": BATCH_BYTES}) for i, f in enumerate(flows)]
    running = dict(enumerate(producers))
    taken: list[Path] = []
    try:
        for p in producers:
            p.start()
        wait_for(lambda: all(p.acked_count() > 0 or p.failed for p in producers), timeout=60,
                 message="every fill producer's first acknowledgement")
        started = tick = time.monotonic()
        while running:
            assert time.monotonic() - started < deadline, f"dirs not full after {deadline} s: {dir_usage(taken[-1])}"
            taken.append(collect(bootstrap, root, cluster))
            usage = dir_usage(taken[-1])
            for i in [i for i in running if usage[flows[i].log_dir][0] >= stop_at * usage[flows[i].log_dir][1]]:
                running.pop(i).stop()
                assert not producers[i].failed, f"{producers[i].name}: {producers[i].failed[:3]}"
            # Snapshot names have a second's resolution: pace the collects on a clock, never closer than a second.
            tick = max(tick + interval, time.monotonic() + 1.0)
            time.sleep(max(0.0, tick - time.monotonic()))
    finally:
        for p in running.values():
            p.close()
    return taken


def one_per_dir(bootstrap: str, topic: str) -> dict[str, int]:
    """log dir -> the partition of `topic` in it (each dir holds one)."""
    where = {info.current: tp[1] for tp, info in replica_placement(bootstrap).items() if tp[0] == topic}
    assert len(where) == 3 and all(where), where
    return where  # type: ignore[return-value]


def fill_kafka(home: Path, base: Path, root: Path) -> None:
    """A real Kafka (one node) on three tmpfs dirs: topic `t`, one partition per dir, written at FAST and SLOW into
    two dirs; the third holds `t` at 0.2 MiB/s and `capped` (retention.bytes CAPPED_BYTES) at 0.3 MiB/s, so it grows
    at 0.5 MiB/s until `capped` reaches its limit, then at 0.2. Snapshots under `root`."""
    kafka = KafkaCluster(base, home, brokers=1, log_dirs=3, props={"log.retention.check.interval.ms": 1000})
    with Tmpfs(kafka.log_dirs(1), SIZE), kafka:
        kafka.create_topic("t", partitions=3)
        kafka.create_topic("capped", configs={"retention.bytes": CAPPED_BYTES, "segment.bytes": SEGMENT_BYTES})
        where = one_per_dir(kafka.bootstrap, "t")
        [capped] = [info.current for tp, info in replica_placement(kafka.bootstrap).items() if tp[0] == "capped"]
        assert capped is not None
        fast, slow = [d for d in sorted(where) if d != capped]
        fill(kafka.bootstrap, root, [Flow(fast, [("t", where[fast])], FAST), Flow(slow, [("t", where[slow])], SLOW),
                                     Flow(capped, [("t", where[capped])], 0.2 * MB),
                                     Flow(capped, [("capped", 0)], 0.3 * MB)])


def fill_moverd(base: Path, root: Path) -> None:
    """A moverd on three tmpfs dirs: topic `t`, one partition per dir, written at FAST, MEDIUM and SLOW."""
    dirs = [base / f"d{i}" for i in range(1, 4)]
    with Tmpfs(dirs, SIZE), Moverd(base, dirs=dirs) as d:
        create_topics(d.bootstrap, {"t": 3})
        where = one_per_dir(d.bootstrap, "t")
        fill(d.bootstrap, root, [Flow(path, [("t", where[path])], rate)
                                 for path, rate in zip(sorted(where), (FAST, MEDIUM, SLOW), strict=True)])


def _at(snapshot: Path) -> datetime:
    return datetime.strptime(snapshot.name, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


def usage_series(root: Path) -> dict[str, list[tuple[float, float]]]:
    """log dir -> [(seconds since the first snapshot, share of its size used)] over every snapshot of `root`."""
    from mover.audit.snapshot import list_snapshots

    snaps = list_snapshots(root)
    first = _at(snaps[0])
    out: dict[str, list[tuple[float, float]]] = {}
    for snap in snaps:
        for d, (used, total) in dir_usage(snap).items():
            out.setdefault(d, []).append(((_at(snap) - first).total_seconds(), used / total))
    return out


def crossing(points: list[tuple[float, float]], level: float = LEVEL) -> float | None:
    """When the share first reached `level`, linear between the two snapshots around it; None if it never did."""
    for (t0, u0), (t1, u1) in zip(points, points[1:], strict=False):
        if u0 < level <= u1:
            return t0 + (t1 - t0) * (level - u0) / (u1 - u0)
    return None


def halfway(root: Path, level: float = LEVEL) -> Path:
    """The first snapshot in which some dir is at half `level` or more: where the forecast is made."""
    from mover.audit.snapshot import list_snapshots

    for snap in list_snapshots(root):
        if any(used >= level / 2 * total for used, total in dir_usage(snap).values()):
            return snap
    raise AssertionError(f"no snapshot under {root} has a dir at {level / 2:.0%}")


@dataclass(frozen=True)
class Judged:
    log_dir: str
    percent_then: float  # the dir's use when the forecast was made
    predicted_s: float  # seconds from the forecast's snapshot to the level, as forecast
    actual_s: float  # as it happened
    low_s: float  # the forecast's 95% interval (early end)
    high_s: float  # (late end)

    @property
    def error(self) -> float:
        return abs(self.predicted_s - self.actual_s) / self.actual_s


def judge(root: Path, half: Path, disks: pd.DataFrame, level: float = LEVEL) -> list[Judged]:
    """Each dir's forecast (`disks`: forecast.parquet's rows, made as of `half`) against when it reached `level`."""
    from mover.audit.snapshot import list_snapshots

    series = usage_series(root)
    since = (_at(half) - _at(list_snapshots(root)[0])).total_seconds()
    rows = disks.set_index("log_dir")
    out = []
    for d, points in sorted(series.items()):
        reached = crossing(points, level)
        assert reached is not None, f"{d} never reached {level:.0%}: {points[-3:]}"
        row = rows.loc[d]
        out.append(Judged(d, float(row["percent"]), float(row["hours_to_90"]) * 3600, reached - since,
                          float(row["hours_to_90_early"]) * 3600, float(row["hours_to_90_late"]) * 3600))
    return out
