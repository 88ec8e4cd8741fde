"""What keeping each broker's own log-dir throttle in the cluster costs `mover-audit execute` and the balancer, beside
the file on one machine it replaces (PLANDIR/execute-state.json, mover/audit/execute_state.py: atomic_write, fsync).

One run holds the throttle of N brokers in a moverd's status log (StatusStore.hold_throttle: a record written, the
log read, the own value read, a record written), then releases and ends each (the restore's bookkeeping), as a run
over N brokers does at its start and end; with M earlier requests in the log (a day of runs), since each hold reads
the log to its end. The anchor records and forgets the same N originals in the file, as the old code did. Both in
one run; printed: ms per broker each way and the ratio.

Usage: python bench/throttle_holds.py [--brokers 50] [--earlier 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import scratch_root  # noqa: E402
from mover.admin.client import Client  # noqa: E402
from mover.admin.reassign.status_store import COMPLETED, StatusStore  # noqa: E402
from mover.audit.execute_state import FILE_NAME  # noqa: E402
from mover.audit.executor.throttles import resource  # noqa: E402
from mover.storage.files import atomic_write, fsync_dir  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--brokers", type=int, default=50)
    p.add_argument("--earlier", type=int, default=200)
    args = p.parse_args()
    with scratch_root() as root:
        return _run(args, root)


def _file_anchor(plan: Path, brokers: int) -> float:
    """The old way (execute_state.py before 2026-12-05): the whole file replaced and fsynced with each broker's
    original before its change, and again as each is forgotten; unlinked when empty."""
    plan.mkdir(parents=True, exist_ok=True)
    path = plan / FILE_NAME
    kept: dict[str, dict[str, str]] = {}
    t0 = time.perf_counter()
    for b in range(brokers):
        kept[str(b)] = {}
        atomic_write(path, json.dumps({"version": 1, "throttles": {"east": kept}}).encode())
    for b in range(brokers):
        del kept[str(b)]
        if kept:
            atomic_write(path, json.dumps({"version": 1, "throttles": {"east": kept}}).encode())
        else:
            path.unlink()
            fsync_dir(plan)
    return time.perf_counter() - t0


def _run(args: argparse.Namespace, root: Path) -> int:
    with Moverd(root) as d, Client(d.bootstrap) as client:
        store = StatusStore(client, tool="bench")
        for _ in range(args.earlier):  # earlier runs, over: what a hold reads past
            rid, _ = store.claim([])
            store.hold_throttle(rid, resource(10_000), lambda: {})
            store.release_throttle(rid, resource(10_000))
            store.throttle_ended(rid, resource(10_000))
            store.finish(rid, COMPLETED)
        rid, _ = store.claim([])
        t0 = time.perf_counter()
        for b in range(args.brokers):
            store.hold_throttle(rid, resource(b), lambda: {})
        held = time.perf_counter() - t0
        t0 = time.perf_counter()
        for b in range(args.brokers):
            store.release_throttle(rid, resource(b))
            store.throttle_ended(rid, resource(b))
        released = time.perf_counter() - t0
        store.finish(rid, COMPLETED)
    anchor = _file_anchor(root / "plan", args.brokers)
    ours = held + released
    print(f"{args.brokers} brokers, {args.earlier} earlier requests in the log")
    print(f"cluster: hold {held / args.brokers * 1000:.1f} ms/broker, release {released / args.brokers * 1000:.1f} "
          f"ms/broker, {ours:.2f} s in all")
    print(f"file (anchor): {anchor / args.brokers * 1000:.2f} ms/broker both ways, {anchor:.3f} s in all")
    print(f"ratio cluster / file: {ours / anchor:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
