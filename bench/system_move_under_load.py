"""KIP-113 system test 1, larger: move every replica of a real moverd to the other log dir and back, several
rounds, while kafka-python and kcat producers and consumers run. Prints records produced / acknowledged / consumed,
moves done, time per round, lost and duplicated records (both must be 0), and each producer's acknowledged records
per second during the moves against before them (anchor: 1.00 = moves cost producers nothing).

The `idem` producer (kafka-python's default: idempotent, acks=all) sends as fast as it can, so its ratio measures
what the moves take from the broker; the others are rate-limited and show that nobody stalls.
Usage: python bench/system_move_under_load.py [--topics 4] [--partitions 4] [--prefill-mib 2] [--rounds 3]
       [--throttle-mib 20] [--warmup-s 5]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.testing.consumers import KcatConsumer, PyConsumer, end_offsets, wait_caught_up  # noqa: E402
from mover.testing.exactly_once import check  # noqa: E402
from mover.testing.history import TP, Acked, merge  # noqa: E402
from mover.testing.kcat import require_kcat  # noqa: E402
from mover.testing.log_dirs_tool import create_topics, execute, placement, reassignment_file, wait_verified  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.producers import KcatProducer, Producer, PyProducer, prefill  # noqa: E402
from mover.testing.wait import wait_for  # noqa: E402

RECORD_BYTES = 1000
# Bigger runs take longer to drain; a run that needs longer than this is broken.
DRAIN_DEADLINE_S = 300.0


def rate(p: Producer, windows: list[tuple[float, float]]) -> float:
    acked, _ = p.snapshot()
    n = sum(any(a <= x.at < b for a, b in windows) for x in acked)
    span = sum(b - a for a, b in windows)
    return n / span if span else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--prefill-mib", type=float, default=2, help="data per partition before the moves")
    ap.add_argument("--rounds", type=int, default=3, help="move rounds (there, back, there, ...)")
    ap.add_argument("--throttle-mib", type=float, default=20, help="intra.broker.throttled.rate, MiB/s")
    ap.add_argument("--warmup-s", type=float, default=5, help="traffic before the first move (the baseline)")
    ap.add_argument("--rate", type=float, default=200, help="records/s of each rate-limited kafka-python producer")
    ap.add_argument("--kcat-rate", type=float, default=50, help="records/s of each kcat producer")
    ap.add_argument("--idem-rate", type=float, default=None,
                    help="records/s of the idempotent producer (default: as fast as it goes)")
    ap.add_argument("--delete-delay-ms", type=int, default=100,
                    help="log.segment.delete.delay.ms: how long a moved-away copy stays open (tests use 100; "
                         "Kafka's default is 60000)")
    args = ap.parse_args()
    require_kcat()

    topics = {f"load{i}": args.partitions for i in range(args.topics)}
    tps: list[TP] = [(t, p) for t, n in topics.items() for p in range(n)]
    root = bench_root()
    producers: list[Producer] = []
    consumers: list[PyConsumer | KcatConsumer] = []
    props = {"intra.broker.throttled.rate": int(args.throttle_mib * 2**20),
             "log.segment.delete.delay.ms": args.delete_delay_ms}
    rc = 1
    try:
        with Moverd(root, props=props) as d:
            try:
                create_topics(d.bootstrap, topics)
                t0 = time.monotonic()
                per_partition = int(args.prefill_mib * 2**20 / RECORD_BYTES)
                pre = prefill(d.bootstrap, tps, per_partition, RECORD_BYTES)
                print(f"prefill: {len(pre)} records ({len(pre) * RECORD_BYTES / 2**20:.0f} MiB) over {len(tps)} "
                      f"partitions in {time.monotonic() - t0:.1f} s")

                consumers = [PyConsumer("pyc", d.bootstrap, tps).start()]
                consumers += [KcatConsumer(f"kcatc-{t}", d.bootstrap, t, n, stderr_path=root / f"kcatc-{t}.err")
                              .start() for t, n in topics.items()]
                producers = [
                    PyProducer("idem", d.bootstrap, tps, rate=args.idem_rate, pad=RECORD_BYTES),
                    PyProducer("acks1", d.bootstrap, tps, rate=args.rate, pad=RECORD_BYTES,
                               config={"acks": 1, "enable_idempotence": False}),
                    *(KcatProducer(f"kcat{p}", d.bootstrap, ("load0", p), rate=args.kcat_rate, pad=RECORD_BYTES,
                                   stderr_path=root / f"kcatp{p}.err") for p in range(min(2, args.partitions))),
                ]
                for p in producers:
                    p.start()
                wait_for(lambda: all(p.acked_count() > 0 for p in producers if isinstance(p, PyProducer)),
                         message="the producers' first acknowledgements")
                base_start = time.monotonic()
                time.sleep(args.warmup_s)  # the baseline: a fixed stretch of traffic with no move running
                base_end = time.monotonic()

                home = {tp: dirs[0][0] for tp, dirs in placement(d.bootstrap).items() if tp in tps}
                other = {tp: next(str(x) for x in d.dirs if str(x) != home[tp]) for tp in tps}
                windows: list[tuple[float, float]] = []
                for r in range(args.rounds):
                    target = other if r % 2 == 0 else home
                    f = reassignment_file(root / f"round{r}.json", target)
                    started = time.monotonic()
                    execute(d.bootstrap, f)
                    verified = wait_verified(d.bootstrap, f, deadline_s=DRAIN_DEADLINE_S)
                    ended = time.monotonic()
                    windows.append((started, ended))
                    assert placement(d.bootstrap) == {tp: [(target[tp], False)] for tp in tps}
                    print(f"round {r + 1}: {len(tps)} moves in {ended - started:.2f} s "
                          f"(--verify polled {verified.polls} times)")

                for p in producers:
                    p.stop()
                ends = end_offsets(d.bootstrap, tps)
                wait_caught_up(consumers, ends, deadline_s=DRAIN_DEADLINE_S)
                py = consumers[0].stop()
                kc = merge(c.stop() for c in consumers[1:] if isinstance(c, KcatConsumer))
                for c in consumers:
                    if isinstance(c, KcatConsumer):
                        for line in c.offset_resets():
                            print(f"{c.name}: {line}")
                consumers = []

                acked: list[Acked] = list(pre)
                failed = 0
                print(f"{'producer':<8} {'sent':>8} {'acked':>8} {'failed':>6} {'acks/s before':>14} "
                      f"{'acks/s moving':>14} {'ratio':>6}")
                for p in producers:
                    ok, bad = p.snapshot()
                    acked += ok
                    failed += len(bad)
                    if isinstance(p, KcatProducer):
                        # kcat's delivery reports are read when it exits, so they carry no useful time.
                        print(f"{p.name:<8} {p.sent:>8} {len(ok):>8} {len(bad):>6} {'-':>14} {'-':>14} {'-':>6}")
                        continue
                    before = rate(p, [(base_start, base_end)])
                    during = rate(p, windows)
                    print(f"{p.name:<8} {p.sent:>8} {len(ok):>8} {len(bad):>6} {before:>14.0f} {during:>14.0f} "
                          f"{during / before if before else float('nan'):>6.2f}")
                print(f"records in the log: {sum(ends.values())}, acknowledged: {len(acked)}, failed: {failed}")
                lost = dup = 0
                for consumed, who in ((py, "kafka-python consumer"), (kc, "kcat consumers")):
                    report = check(who, consumed, ends, acked)
                    lost, dup = max(lost, report.lost), max(dup, report.duplicates)
                    print(f"{who}: consumed {report.consumed}, lost {report.lost}, duplicates {report.duplicates}, "
                          f"out of order {report.out_of_order}")
                    for line in report.problems[:5]:
                        print("  " + line)
                per_round = sum(b - a for a, b in windows) / max(args.rounds, 1)
                print(f"moves: {len(tps) * args.rounds} in {args.rounds} rounds, {per_round:.2f} s per round; "
                      f"lost = {lost}, duplicates = {dup}")
                rc = 0 if lost == dup == failed == 0 else 1
            finally:
                for p in producers:
                    p.close()
                for c in consumers:
                    c.close()
    finally:
        if rc == 0:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"failed; the daemon's log and data are kept in {root}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
