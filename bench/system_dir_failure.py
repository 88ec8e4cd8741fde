"""KIP-113 system test 2, larger: a real moverd (without DAC capabilities) with topic1 on its first log dir and
topic2 on its second, producers and consumers on both; `chmod 000` the second dir under load. Prints how long the
failure took to show in `mover-log-dirs --describe` and to reach topic2's producers, topic1's acknowledged records
per second after the failure against before it (anchor: 1.00 = the failure costs the healthy dir nothing), and,
after repairing the dir and restarting the daemon, records produced / acknowledged / consumed, lost and duplicated
(both must be 0) for both topics, and the restart time.
Usage: python bench/system_dir_failure.py [--partitions 8] [--rate 500] [--before-s 5] [--after-s 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.testing.consumers import KcatConsumer, PyConsumer, end_offsets, wait_caught_up  # noqa: E402
from mover.testing.exactly_once import check  # noqa: E402
from mover.testing.history import TP, merge  # noqa: E402
from mover.testing.kcat import require_kcat  # noqa: E402
from mover.testing.log_dirs_tool import (  # noqa: E402
    STORAGE_EXCEPTION,
    create_topics,
    dir_errors,
    execute,
    placement,
    reassignment_file,
    wait_verified,
)
from mover.testing.moverd import SETPRIV, Moverd  # noqa: E402
from mover.testing.producers import Producer, PyProducer  # noqa: E402
from mover.testing.raw import RawClient  # noqa: E402
from mover.testing.wait import wait_for  # noqa: E402
from mover.wire.messages import API_VERSIONS  # noqa: E402

DRAIN_DEADLINE_S = 300.0
DELIVERY_TIMEOUT_MS = 3000
FLUSH_TIMEOUT_S = 5.0


def acks_per_s(p: Producer, start: float, end: float) -> float:
    acked, _ = p.snapshot()
    return sum(start <= a.at < end for a in acked) / (end - start)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=8, help="partitions of each topic")
    ap.add_argument("--rate", type=float, default=500, help="records/s of each topic's main producer")
    ap.add_argument("--record-bytes", type=int, default=500)
    ap.add_argument("--before-s", type=float, default=5, help="traffic before the failure (the baseline)")
    ap.add_argument("--after-s", type=float, default=10, help="traffic after the failure")
    args = ap.parse_args()
    require_kcat()

    t1: list[TP] = [("topic1", p) for p in range(args.partitions)]
    t2: list[TP] = [("topic2", p) for p in range(args.partitions)]
    root = bench_root()
    rc = 1
    producers: list[Producer] = []
    consumers: list[PyConsumer | KcatConsumer] = []
    try:
        with Moverd(root, props={"log.dir.health.check.interval.ms": 50}, prefix=SETPRIV) as d:
            d1, d2 = map(str, d.dirs)
            try:
                create_topics(d.bootstrap, {"topic1": args.partitions, "topic2": args.partitions})
                f = reassignment_file(root / "place.json", {**{tp: d1 for tp in t1}, **{tp: d2 for tp in t2}})
                execute(d.bootstrap, f)
                wait_verified(d.bootstrap, f)

                pad = args.record_bytes
                p1 = PyProducer("p1", d.bootstrap, t1, rate=args.rate, pad=pad)
                p2 = PyProducer("p2", d.bootstrap, t2, rate=args.rate, pad=pad, flush_timeout=FLUSH_TIMEOUT_S,
                                config={"delivery_timeout_ms": DELIVERY_TIMEOUT_MS, "request_timeout_ms": 2000})
                p2b = PyProducer("p2b", d.bootstrap, t2, rate=args.rate / 4, pad=pad, flush_timeout=FLUSH_TIMEOUT_S,
                                 config={"acks": 1, "enable_idempotence": False, "retries": 0})
                producers = [p1.start(), p2.start(), p2b.start()]
                c1 = PyConsumer("c1", d.bootstrap, t1).start()
                k1 = KcatConsumer("k1", d.bootstrap, "topic1", args.partitions, stderr_path=root / "k1.err").start()
                c2 = PyConsumer("c2", d.bootstrap, t2).start()
                consumers = [c1, k1, c2]
                wait_for(lambda: all(p.acked_count() > 0 for p in producers), message="every producer's first ack")
                base_start = time.monotonic()
                time.sleep(args.before_s)  # the baseline: a fixed stretch of traffic on two healthy dirs

                failed_at = time.monotonic()
                os.chmod(d2, 0)
                wait_for(lambda: dir_errors(d.bootstrap)[d2] == STORAGE_EXCEPTION,
                         message="--describe to show the failure")
                detected = time.monotonic() - failed_at
                time.sleep(args.after_s)  # a fixed stretch of traffic with one dir failed
                after_end = time.monotonic()
                alive = d.proc is not None and d.proc.poll() is None
                with RawClient(d.port) as c:
                    answers = c.call(API_VERSIONS, 0, {})[1]["error_code"] == 0
                for p in producers:
                    p.stop()
                ends1 = end_offsets(d.bootstrap, t1)
                wait_caught_up([c1, k1], ends1, deadline_s=DRAIN_DEADLINE_S)
                live = {"kafka-python (live)": c1.stop(), "kcat (live)": k1.stop()}
                c2.close()
                consumers = []
            finally:
                for p in producers:
                    p.close()
                for c in consumers:
                    c.close()
                os.chmod(d2, 0o755)

            print(f"failure shown by --describe {detected:.2f} s after chmod 000 (health check every 50 ms); "
                  f"daemon alive: {alive}, ApiVersions answers: {answers}")
            before = acks_per_s(p1, base_start, failed_at)
            after = acks_per_s(p1, failed_at, after_end)
            print(f"topic1 acks/s before the failure {before:.0f}, after {after:.0f}, ratio "
                  f"{after / before if before else float('nan'):.2f}")
            for p in producers:
                ok, bad = p.snapshot()
                first = min((x.at for x in bad), default=None)
                print(f"producer {p.name}: sent {p.sent}, acked {len(ok)}, failed {len(bad)} "
                      f"{dict(Counter(x.error for x in bad))}"
                      + (f", first failure {first - failed_at:.2f} s after chmod" if first is not None else ""))
            acked1 = p1.snapshot()[0]
            acked = acked1 + p2.snapshot()[0] + p2b.snapshot()[0]
            worst = {"lost": 0, "duplicates": 0}
            for who, consumed in live.items():
                r = check(who, consumed, ends1, acked1)
                print(f"topic1 {who}: consumed {r.consumed}, lost {r.lost}, duplicates {r.duplicates}")
                worst = {"lost": max(worst["lost"], r.lost), "duplicates": max(worst["duplicates"], r.duplicates)}

            t0 = time.monotonic()
            d.restart()
            print(f"restart with the dir repaired: {time.monotonic() - t0:.2f} s; dirs: {dir_errors(d.bootstrap)}")
            assert placement(d.bootstrap) == {**{tp: [(d1, False)] for tp in t1}, **{tp: [(d2, False)] for tp in t2}}
            ends = end_offsets(d.bootstrap, t1 + t2)
            after_c: list[PyConsumer | KcatConsumer] = [
                PyConsumer("after", d.bootstrap, t1 + t2).start(),
                *(KcatConsumer(f"after-{t}", d.bootstrap, t, args.partitions, stderr_path=root / f"after-{t}.err")
                  .start() for t in ("topic1", "topic2"))]
            try:
                wait_caught_up(after_c, ends, deadline_s=DRAIN_DEADLINE_S)
                py = after_c[0].stop()
                kc = merge(c.stop() for c in after_c[1:] if isinstance(c, KcatConsumer))
            finally:
                for c in after_c:
                    c.close()
            for who, consumed in (("kafka-python after restart", py), ("kcat after restart", kc)):
                r = check(who, consumed, ends, acked)
                print(f"both topics, {who}: in the log {sum(ends.values())}, acked {r.acked}, consumed "
                      f"{r.consumed}, lost {r.lost}, duplicates {r.duplicates}, out of order {r.out_of_order}")
                for line in r.problems[:5]:
                    print("  " + line)
                worst = {"lost": max(worst["lost"], r.lost), "duplicates": max(worst["duplicates"], r.duplicates)}
            print(f"lost = {worst['lost']}, duplicates = {worst['duplicates']}")
            rc = 0 if worst == {"lost": 0, "duplicates": 0} and alive and answers and p1.snapshot()[1] == [] else 1
    finally:
        if rc == 0:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"failed; the daemon's log and data are kept in {root}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
