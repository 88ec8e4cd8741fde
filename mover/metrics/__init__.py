"""Prometheus metrics of moverd: what is measured (metrics.py), the scrape-time view of the broker
(collector.py), and the HTTP endpoint on `metrics.listener` (exporter.py)."""

from mover.metrics.collector import ZK_STATES, BrokerCollector, ZooKeeperState
from mover.metrics.exporter import MetricsExporter
from mover.metrics.metrics import MoverMetrics

__all__ = ["ZK_STATES", "BrokerCollector", "MetricsExporter", "MoverMetrics", "ZooKeeperState"]
