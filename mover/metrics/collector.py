"""BrokerCollector: the broker's state as Prometheus sees it, computed at scrape time.

Nothing here walks a directory: per-dir used bytes are the sizes the open Logs keep in memory (plus what running
moves copied into their destination), total and usable bytes one statvfs per online dir. A scrape runs on the
metrics thread and only reads the LogManager (snapshots of its dicts), so it never blocks the event loop or a move.

Names (docs/operations.md lists them): `mover_` for what is ours; the offline dir gauges keep the names Kafka's
dashboards already use for the same values (see OFFLINE_DIRS).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mover.storage.log_dir import disk_usage

if TYPE_CHECKING:
    from mover.log.log_manager import LogManager
    from mover.metrics.metrics import MoverMetrics

# Kafka's JMX gauges kafka.log:type=LogManager,name=OfflineLogDirectoryCount and ...,name=LogDirectoryOffline,
# logDirectory=<path> as the Prometheus JMX exporter names them with its usual Kafka rules (`kafka_<domain>_<type>_
# <name>`, lowercaseOutputName, the extra key as a label): the names alert rules and dashboards written for Kafka
# brokers query, so they work on moverd unchanged (docs/kafka-compat.md#metric-names).
OFFLINE_DIRS = "kafka_log_logmanager_offlinelogdirectorycount"
DIR_OFFLINE = "kafka_log_logmanager_logdirectoryoffline"

# What the ZooKeeper component reports (mover/zk): a session that is connected, suspended (connection lost, session
# maybe still alive) or lost (expired); "standalone" without zookeeper.connect.
ZK_STATES = ("standalone", "connected", "suspended", "lost", "fenced")
ZooKeeperState = Callable[[], str]

# The move rate is averaged over the scrapes of the last RATE_WINDOW_S seconds (the previous scrape at least).
RATE_WINDOW_S = 60.0


def standalone() -> str:
    return "standalone"


class BrokerCollector(Collector):
    def __init__(self, manager: LogManager, metrics: MoverMetrics, zk_state: ZooKeeperState = standalone) -> None:
        self.manager = manager
        self.metrics = metrics
        self.zk_state = zk_state
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def describe(self) -> list[Metric]:
        return []  # dynamic families: the registry must not call collect() at registration

    def collect(self) -> Iterator[Metric]:
        yield from self._moves()
        yield from self._dirs()
        yield self._zookeeper()

    def _moves(self) -> Iterator[Metric]:
        copied = self.metrics.bytes_copied()
        yield CounterMetricFamily("mover_move_bytes_copied", "Bytes copied by replica moves since moverd started.",
                                  value=copied)
        now = time.monotonic()
        samples = self._samples
        while samples and now - samples[0][0] > RATE_WINDOW_S and len(samples) > 1:
            samples.popleft()
        rate = 0.0
        if samples and now > samples[0][0]:
            rate = (copied - samples[0][1]) / (now - samples[0][0])
        samples.append((now, copied))
        yield GaugeMetricFamily("mover_move_bytes_per_second",
                                "Move copy rate averaged since the previous scrapes (at most the last 60 s); "
                                "rate(mover_move_bytes_copied_total[...]) gives any window.", value=rate)
        running, queued = self.manager.move_counts()
        yield GaugeMetricFamily("mover_moves_running", "Moves being copied or swapped now.", value=running)
        yield GaugeMetricFamily("mover_moves_queued", "Moves waiting for a move thread.", value=queued)

    def _dirs(self) -> Iterator[Metric]:
        labels = ["log_dir"]
        total = GaugeMetricFamily("mover_log_dir_total_bytes", "Size of the file system holding the log dir.",
                                  labels=labels)
        usable = GaugeMetricFamily("mover_log_dir_usable_bytes", "Bytes a non-root writer may still use there.",
                                   labels=labels)
        used = GaugeMetricFamily("mover_log_dir_used_bytes",
                                 "Bytes of the partitions in the log dir (current logs and copies of running moves).",
                                 labels=labels)
        online = GaugeMetricFamily("mover_log_dir_online", "1 while the log dir is online, 0 once it failed.",
                                   labels=labels)
        cordoned = GaugeMetricFamily("mover_log_dir_cordoned", "1 while the log dir is cordoned (cordoned.log.dirs, "
                                     "KIP-1066): no new partition or move lands there.", labels=labels)
        kafka_offline = GaugeMetricFamily(DIR_OFFLINE, "1 once the log dir failed, as Kafka's LogManager "
                                          "LogDirectoryOffline.", labels=["logDirectory"])
        states = list(self.manager.dirs.values())
        sizes: dict[object, int] = {s.path: 0 for s in states}
        for replica in list(self.manager.replicas.values()):
            current = replica.log
            if current is not None and not replica.offline and replica.log_dir in sizes:
                sizes[replica.log_dir] += current.size
            move = replica.move
            if move is not None and move.destination_dir in sizes and not move.state.done:
                sizes[move.destination_dir] += move.bytes_copied
        offline = 0
        cordoned_dirs = self.manager.config.cordoned_dirs()
        for state in states:
            name = [str(state.path)]
            online.add_metric(name, 1 if state.online else 0)
            cordoned.add_metric(name, 1 if state.path in cordoned_dirs else 0)
            kafka_offline.add_metric(name, 0 if state.online else 1)
            if not state.online:
                offline += 1
                continue
            used.add_metric(name, sizes[state.path])
            try:
                t, u = disk_usage(state.path)
            except OSError:
                continue  # the dir probe will mark it offline; a scrape only reports
            total.add_metric(name, t)
            usable.add_metric(name, u)
        yield from (total, usable, used, online, cordoned, kafka_offline)
        yield GaugeMetricFamily(OFFLINE_DIRS, "Log dirs offline (failed since start-up), as Kafka's LogManager "
                                "OfflineLogDirectoryCount.", value=offline)

    def _zookeeper(self) -> Metric:
        try:
            current = self.zk_state()
        except Exception:  # noqa: BLE001 - a broken reporter must not break the whole page
            current = "unknown"
        family = GaugeMetricFamily("mover_zookeeper_session_state",
                                   "1 for the ZooKeeper session's current state (standalone: no zookeeper.connect).",
                                   labels=["state"])
        for state in ZK_STATES:
            family.add_metric([state], 1 if state == current else 0)
        if current not in ZK_STATES:
            family.add_metric([current], 1)
        return family
