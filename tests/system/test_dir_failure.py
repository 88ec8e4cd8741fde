"""KIP-113 system test 2 on one daemon: a log dir that fails at run time (chmod 000) takes down only the replicas
on it. Clients of the other dir's topic keep working with nothing lost; the failed dir's topic reports the storage
error to its clients and to `mover-log-dirs --describe`; the daemon stays up; after the dir is repaired and the
daemon restarted, every record that was acknowledged is there."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

from mover.testing.consumers import KcatConsumer, PyConsumer, end_offsets, wait_caught_up
from mover.testing.exactly_once import assert_clean, check
from mover.testing.history import TP, merge
from mover.testing.kcat import require_kcat
from mover.testing.log_dirs_tool import (
    STORAGE_EXCEPTION,
    create_topics,
    dir_errors,
    placement,
    reassignment_file,
    wait_verified,
)
from mover.testing.log_dirs_tool import execute as execute_moves
from mover.testing.moverd import SETPRIV, Moverd
from mover.testing.producers import Producer, PyProducer
from mover.testing.raw import RawClient, fetch, fetch_partitions
from mover.testing.wait import wait_for
from mover.wire.messages import API_VERSIONS

PARTITIONS = 2
T1: list[TP] = [("topic1", p) for p in range(PARTITIONS)]
T2: list[TP] = [("topic2", p) for p in range(PARTITIONS)]
RATE = 100  # records per second per producer
RECORD_BYTES = 200
# Records topic1 must still get acknowledged after the failure was noticed: a few seconds of its producer.
ACKS_AFTER_FAILURE = 300
# The failed topic's producer gives up on a record after this long (kafka-python's default is 120 s), so the
# failure reaches the application within the test.
DELIVERY_TIMEOUT_MS = 3000
# At stop, how long topic2's producers may take to settle what is pending before it is abandoned.
FLUSH_TIMEOUT_S = 5.0


def api_versions_answers(port: int) -> bool:
    with RawClient(port) as c:
        _, body = c.call(API_VERSIONS, 0, {})
    return body["error_code"] == 0 and any(k["api_key"] == API_VERSIONS.key for k in body["api_keys"])


def test_a_failed_log_dir_takes_down_only_its_replicas(tmp_path: Path) -> None:
    require_kcat()
    producers: list[Producer] = []
    consumers: list[PyConsumer | KcatConsumer] = []
    with Moverd(tmp_path, props={"log.dir.health.check.interval.ms": 50}, prefix=SETPRIV) as d:
        d1, d2 = map(str, d.dirs)
        try:
            create_topics(d.bootstrap, {"topic1": PARTITIONS, "topic2": PARTITIONS})
            # topic1 entirely on the first dir, topic2 on the second, as an operator would arrange it.
            f = reassignment_file(tmp_path / "place.json", {**{tp: d1 for tp in T1}, **{tp: d2 for tp in T2}})
            execute_moves(d.bootstrap, f)
            wait_verified(d.bootstrap, f)
            assert placement(d.bootstrap) == {**{tp: [(d1, False)] for tp in T1}, **{tp: [(d2, False)] for tp in T2}}

            p1 = PyProducer("p1", d.bootstrap, T1, rate=RATE, pad=RECORD_BYTES)
            # topic2 gets the default (idempotent, acks=all, retrying) producer, bounded by a delivery timeout, and
            # one that never retries, so the broker's own error reaches the application as it was sent.
            p2 = PyProducer("p2", d.bootstrap, T2, rate=RATE, pad=RECORD_BYTES, flush_timeout=FLUSH_TIMEOUT_S,
                            config={"delivery_timeout_ms": DELIVERY_TIMEOUT_MS, "request_timeout_ms": 2000})
            p2b = PyProducer("p2b", d.bootstrap, T2, rate=RATE / 4, pad=RECORD_BYTES, flush_timeout=FLUSH_TIMEOUT_S,
                             config={"acks": 1, "enable_idempotence": False, "retries": 0})
            producers = [p1.start(), p2.start(), p2b.start()]
            c1 = PyConsumer("c1", d.bootstrap, T1).start()
            c2 = PyConsumer("c2", d.bootstrap, T2).start()
            k1 = KcatConsumer("k1", d.bootstrap, "topic1", PARTITIONS, stderr_path=tmp_path / "k1.err").start()
            k2 = KcatConsumer("k2", d.bootstrap, "topic2", PARTITIONS, stderr_path=tmp_path / "k2.err").start()
            consumers = [c1, c2, k1, k2]
            wait_for(lambda: p1.acked_count() >= 50 and p2.acked_count() >= 50, message="both producers to get going")
            wait_for(lambda: c2.consumed.count() > 0 and k2.consumed.count() > 0, message="topic2's consumers to read")

            os.chmod(d2, 0)
            failed_at = time.monotonic()
            wait_for(lambda: dir_errors(d.bootstrap)[d2] == STORAGE_EXCEPTION,
                     message="--describe to report the dir failed")
            detected_s = time.monotonic() - failed_at
            describe_errors = dir_errors(d.bootstrap)
            assert describe_errors == {d1: None, d2: STORAGE_EXCEPTION}, describe_errors
            # topic1 is untouched; topic2's replicas are no longer listed under any live dir.
            now = placement(d.bootstrap)
            assert {tp: now.get(tp) for tp in T1} == {tp: [(d1, False)] for tp in T1}
            assert not any(tp in now for tp in T2), now

            # topic2's producer is told: its records fail (what kafka-python reports is recorded below).
            wait_for(lambda: p2.snapshot()[1] and p2b.snapshot()[1],
                     message="topic2's producers to see their sends fail",
                     timeout=DELIVERY_TIMEOUT_MS / 1000 + 30)
            # topic1 keeps working: more acknowledgements after the failure, and its consumers keep up.
            before = p1.acked_count()
            wait_for(lambda: p1.acked_count() >= before + ACKS_AFTER_FAILURE, message="topic1's producer to keep going")
            wait_caught_up([c1, k1], end_offsets(d.bootstrap, T1))
            assert d.proc is not None and d.proc.poll() is None, f"moverd died:\n{d.log()}"
            assert api_versions_answers(d.port)
            # The consumers' side, which kafka-python and librdkafka retry without telling the application: one
            # Fetch, as they send it, gets KAFKA_STORAGE_ERROR for topic2 and records for topic1.
            with RawClient(d.port) as c:
                got = fetch_partitions(fetch(c, [(t, p, 0) for t, p in T1 + T2]))
            assert {tp: got[tp]["error_code"] for tp in T1 + T2} == {**{tp: 0 for tp in T1}, **{tp: 56 for tp in T2}}

            for p in producers:
                p.stop()
            ends1 = end_offsets(d.bootstrap, T1)
            wait_caught_up([c1, k1], ends1)
            live1 = {c.name: c.stop() for c in (c1, k1)}
            for c in (c2, k2):
                c.close()
            consumers = []
            acked1, failed1 = p1.snapshot()
            assert not failed1, f"topic1's producer lost records: {failed1[:3]}"
            assert len(acked1) == p1.sent
            for who, consumed in live1.items():
                assert_clean(check(who, consumed, ends1, acked1))
            acked2 = []
            print(f"dir failure noticed by --describe {detected_s:.2f} s after chmod 000; topic1's producer: "
                  f"{len(acked1)} acked, 0 failed")
            for p in (p2, p2b):
                ok, failed = p.snapshot()
                acked2 += ok
                errors = Counter(f.error for f in failed)
                print(f"topic2's producer {p.name}: {len(ok)} acked, {len(failed)} failed {dict(errors)}, first "
                      f"failure {min(f.at for f in failed) - failed_at:.1f} s after chmod, "
                      f"{'abandoned pending records at stop' if p.abandoned else 'flushed at stop'}")
                assert failed, f"{p.name} never saw an error"
            # The producer that does not retry is handed the broker's answer itself.
            assert "KafkaStorageError" in {f.error for f in p2b.snapshot()[1]}, p2b.snapshot()[1][:3]
            said = [line for line in k2.stderr().splitlines() if "Reached end of topic" not in line]
            print(f"kcat consumer of topic2 said (besides end-of-partition notes): {said[-5:]}")
        finally:
            for p in producers:
                p.close()
            for c in consumers:
                c.close()
            os.chmod(d2, 0o755)

        d.restart()
        assert dir_errors(d.bootstrap) == {d1: None, d2: None}
        assert placement(d.bootstrap) == {**{tp: [(d1, False)] for tp in T1}, **{tp: [(d2, False)] for tp in T2}}
        ends = end_offsets(d.bootstrap, T1 + T2)
        after = [PyConsumer("after", d.bootstrap, T1 + T2).start(),
                 *(KcatConsumer(f"after-{t}", d.bootstrap, t, PARTITIONS, stderr_path=tmp_path / f"after-{t}.err")
                   .start() for t in ("topic1", "topic2"))]
        try:
            wait_caught_up(after, ends)
            py = after[0].stop()
            kc = merge(c.stop() for c in after[1:] if isinstance(c, KcatConsumer))
        finally:
            for c in after:
                c.close()
        for who, consumed in (("kafka-python after restart", py), ("kcat after restart", kc)):
            assert_clean(check(who, consumed, ends, acked1 + acked2))
