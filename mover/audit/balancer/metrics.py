"""The balancer's Prometheus metrics, on a registry of their own, served by moverd's exporter (mover/metrics/
exporter.py) on `--metrics-listener`. Every name starts with `balance_`; `cluster` is the fleet's cluster name.

    balance_disks_out_of_band{cluster}                    disks out of band at the last cycle's collect
    balance_disks{cluster}                                online disks at the last cycle's collect
    balance_bytes_moved_total{cluster}                    bytes of the moves the balancer carried out
    balance_moves_total{cluster,result}                   its moves by how they ended (done, failed, ...)
    balance_paused{cluster,reason}                        1 while paused for that reason (gates.REASONS), else 0
    balance_cycles_total{result}                          cycles by result (balanced, moved, paused, failed, ...)
    balance_last_cycle_end_timestamp_seconds              when the last cycle ended (Unix time)
    balance_last_cycle_duration_seconds                   how long it took
    balance_last_cycle_result{result}                     1 for the last cycle's result, 0 for the others
    balance_canary_produce_p99_seconds{cluster}           the canary's p99 over its window (NaN: too few samples)
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge

from mover.audit.balancer.gates import REASONS

RESULTS = ("balanced", "moved", "unfinished", "paused", "failed", "interrupted")


class BalanceMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.out_of_band = Gauge("balance_disks_out_of_band", "disks out of band at the last collect", ["cluster"],
                                 registry=r)
        self.disks = Gauge("balance_disks", "online disks at the last collect", ["cluster"], registry=r)
        self.bytes_moved = Counter("balance_bytes_moved", "bytes of the moves carried out", ["cluster"], registry=r)
        self.moves = Counter("balance_moves", "moves by how they ended", ["cluster", "result"], registry=r)
        self.paused = Gauge("balance_paused", "1 while the cluster is paused for this reason", ["cluster", "reason"],
                            registry=r)
        self.cycles = Counter("balance_cycles", "cycles by result", ["result"], registry=r)
        self.last_end = Gauge("balance_last_cycle_end_timestamp_seconds", "when the last cycle ended", registry=r)
        self.last_duration = Gauge("balance_last_cycle_duration_seconds", "how long the last cycle took",
                                   registry=r)
        self.last_result = Gauge("balance_last_cycle_result", "1 for the last cycle's result", ["result"],
                                 registry=r)
        self.canary_p99 = Gauge("balance_canary_produce_p99_seconds", "the canary's produce p99 over its window",
                                ["cluster"], registry=r)

    def cluster(self, name: str) -> None:
        """Every labelled series of a cluster exists from the start (0), so a dashboard sees the cluster at once."""
        self.out_of_band.labels(name)
        self.disks.labels(name)
        self.bytes_moved.labels(name)
        for reason in REASONS:
            self.paused.labels(name, reason).set(0)

    def pause(self, name: str, reason: str | None) -> None:
        for r in REASONS:
            self.paused.labels(name, r).set(1 if r == reason else 0)

    def cycle(self, result: str, started: float) -> None:
        self.cycles.labels(result).inc()
        self.last_end.set(time.time())
        self.last_duration.set(time.monotonic() - started)
        for r in RESULTS:
            self.last_result.labels(r).set(1 if r == result else 0)
