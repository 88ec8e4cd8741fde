"""KIP-113 system test 1 on one daemon: move every replica to the other log dir and back while kafka-python and
kcat producers and consumers keep working; nothing acknowledged is lost, duplicated or reordered."""

from __future__ import annotations

import time
from pathlib import Path

from mover.testing.consumers import KcatConsumer, PyConsumer, end_offsets, wait_caught_up
from mover.testing.exactly_once import assert_clean, check
from mover.testing.history import TP, Acked, merge
from mover.testing.kcat import require_kcat
from mover.testing.log_dirs_tool import create_topics, execute, placement, reassignment_file, wait_verified
from mover.testing.moverd import Moverd
from mover.testing.producers import KcatProducer, Producer, PyProducer, prefill
from mover.testing.wait import wait_for

TOPICS = {f"load{i}": 2 for i in range(3)}
TPS: list[TP] = [(t, p) for t, n in TOPICS.items() for p in range(n)]
# ~1 MB per partition before the moves, copied at 2 MB/s: each round of 6 moves takes a few seconds, long enough
# for every producer and consumer to run through it, short enough to keep the test around half a minute.
PREFILL_RECORDS = 1000
RECORD_BYTES = 1000
THROTTLE = 2_000_000


def on_disk(dirs: list[Path]) -> dict[str, set[str]]:
    """Log dir -> names of the partition dirs in it (including .move / .delete ones)."""
    return {str(d): {p.name for p in d.iterdir() if p.is_dir()} for d in dirs}


def settled(dirs: list[Path], where: dict[TP, str]) -> bool:
    """Every partition's dir only in its log dir, and no copy or retired copy left anywhere."""
    names = on_disk(dirs)
    wanted = {d: {f"{t}-{p}" for (t, p), w in where.items() if w == d} for d in names}
    return all({n for n in names[d] if n.startswith("load")} == wanted[d] for d in names)


def acked_between(p: Producer, start: float, end: float) -> int:
    acked, _ = p.snapshot()
    return sum(start <= a.at <= end for a in acked)


def test_move_every_replica_and_back_under_load(tmp_path: Path) -> None:
    require_kcat()
    producers: list[Producer] = []
    consumers: list[PyConsumer | KcatConsumer] = []
    with Moverd(tmp_path, props={"intra.broker.throttled.rate": THROTTLE}) as d:
        try:
            create_topics(d.bootstrap, TOPICS)
            pre = prefill(d.bootstrap, TPS, PREFILL_RECORDS, RECORD_BYTES)

            consumers = [PyConsumer("pyc", d.bootstrap, TPS).start()]
            consumers += [KcatConsumer(f"kcatc-{t}", d.bootstrap, t, n, stderr_path=tmp_path / f"kcatc-{t}.err")
                          .start() for t, n in TOPICS.items()]
            producers = [
                PyProducer("idem", d.bootstrap, TPS, rate=60, pad=RECORD_BYTES),
                PyProducer("acks1", d.bootstrap, TPS, rate=60, pad=RECORD_BYTES,
                           config={"acks": 1, "enable_idempotence": False}),
                *(KcatProducer(f"kcat{p}", d.bootstrap, ("load0", p), rate=20, pad=RECORD_BYTES,
                               stderr_path=tmp_path / f"kcatp{p}.err") for p in range(2)),
            ]
            for p in producers:
                p.start()
            wait_for(lambda: all(p.acked_count() > 0 for p in producers if isinstance(p, PyProducer)),
                     message="every kafka-python producer's first acknowledgement")

            home = {tp: dirs[0][0] for tp, dirs in placement(d.bootstrap).items() if tp in TPS}
            assert set(home) == set(TPS) and all(len(v) == 1 for v in placement(d.bootstrap).values())
            assert len(set(home.values())) == 2, f"new partitions should be spread over both dirs: {home}"
            other = {tp: next(str(x) for x in d.dirs if str(x) != home[tp]) for tp in TPS}

            rounds = []
            for target, name in ((other, "there"), (home, "back")):
                source = home if target is other else other
                f = reassignment_file(tmp_path / f"{name}.json", target)
                read_before = [c.count() for c in consumers]
                started = time.monotonic()
                assert execute(d.bootstrap, f) == source  # the rollback assignment it printed
                verified = wait_verified(d.bootstrap, f)
                ended = time.monotonic()
                stalled = [c.name for c, n in zip(consumers, read_before, strict=True) if c.count() == n]
                assert not stalled, f"consumers read nothing while moving {name}: {stalled}"
                rounds.append((name, verified, started, ended))
                assert placement(d.bootstrap) == {tp: [(target[tp], False)] for tp in TPS}
                wait_for(lambda target=target: settled(d.dirs, target),
                         message=f"the on-disk layout after moving {name}")
                for p in producers:
                    if isinstance(p, PyProducer):
                        assert acked_between(p, started, ended) > 0, f"{p.name} got no ack during the moves"
            # The throttle makes the first round (with ~6 MB to copy) outlast at least one --verify poll, so the
            # moves really ran while records were being produced and consumed.
            assert rounds[0][1].in_progress_polls > 0, rounds

            for p in producers:
                p.stop()
            for p in producers:
                if isinstance(p, KcatProducer):
                    assert p.returncode == 0, f"{p.name} exited {p.returncode}:\n{p.stderr()}"
            ends = end_offsets(d.bootstrap, TPS)
            wait_caught_up(consumers, ends)
            py = consumers[0].stop()
            kc = merge(c.stop() for c in consumers[1:] if isinstance(c, KcatConsumer))
            consumers_all, consumers = consumers, []

            acked: list[Acked] = list(pre)
            for p in producers:
                ok, failed = p.snapshot()
                assert not failed, f"{p.name}: {len(failed)} records failed, e.g. {failed[:3]}"
                assert len(ok) == p.sent, f"{p.name}: sent {p.sent}, acknowledged {len(ok)}"
                acked += ok
            assert sum(ends.values()) == len(acked), "the log holds records nobody got an ack for"
            resets = [line for c in consumers_all if isinstance(c, KcatConsumer) for line in c.offset_resets()]
            print(f"kcat offset resets: {resets}")
            for consumed, who in ((py, "kafka-python consumer"), (kc, "kcat consumers")):
                report = check(who, consumed, ends, acked)
                print(f"{who}: consumed {report.consumed}, acked {report.acked}, lost {report.lost}, "
                      f"duplicates {report.duplicates}, out of order {report.out_of_order}")
                assert_clean(report)
            assert not resets, f"kcat was sent to another offset: {resets}"
            for name, verified, started, ended in rounds:
                print(f"move {name}: {ended - started:.1f} s, --verify polled {verified.polls} times "
                      f"({verified.in_progress_polls} in progress)")
            print("acked per producer: " + ", ".join(f"{p.name} {p.acked_count()}" for p in producers))
            # After moving back: each partition where it was born, and nothing else left behind.
            assert settled(d.dirs, home), on_disk(d.dirs)
        finally:
            for p in producers:
                p.close()
            for c in consumers:
                c.close()
