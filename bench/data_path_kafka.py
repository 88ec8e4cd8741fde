"""The data path against a real Kafka 3.7: the same kcat against moverd and against a Kafka broker, side by side.

Both brokers run at once on this machine (one moverd with one log dir; one KRaft Kafka 3.7 node, broker and
controller, one log dir, started by mover/testing/kafka_cluster.py at Kafka's own defaults: the heap of its start
script, 1 GB, and its default configs except a 1 s delete delay and single-copy internal topics, which a one-node bench
that deletes each round's topics needs). Each measure runs on moverd and on
Kafka alternately (the order swaps every round), --rounds rounds; the medians and moverd / Kafka are printed:
1. produce, --records-single records of 512 B, one record per request: kcat -P with `linger.ms=0`,
   `batch.num.messages=1`, acks=all (librdkafka pipelines requests: this is requests/s at its default in-flight);
2. produce --records-bulk x 512 B in big batches: kcat -P with librdkafka's defaults (batch.num.messages 10000,
   linger.ms 5), acks=all;
3. consume those records: kcat -C from the beginning to the end of the partition, its output read by a process that
   counts the lines (as any consumer's output goes somewhere: it shares the two cores with the broker), and the
   broker's CPU seconds per GB consumed, from /proc (steadier than throughput on a shared machine); then the same
   with kcat's fetch queue limits raised (UNBOUNDED_QUEUE), so that librdkafka's stall after a full queue does not
   decide the figure (docs/data-path.md);
4. latency of acks=all single-record produce: one Python client sends one Produce v9 with one 512 B record and
   waits for the answer, --latency-requests times; p50 / p99 per broker (the same bytes to both).
Each round writes a new topic (one partition) on each broker, so the consume reads what that round produced; each
produce starts after an os.sync(), so neither broker is throttled by the writeback of the other's data, and each
round's topics are deleted (and their files gone) before the next round: on this VM a page cache that grows past
what the machine has recently used writes at ~450 MB/s instead of ~5 GB/s (`dd` of 1 GB files, kept: 4.9 GB/s,
then 0.42-0.46 GB/s each; overwritten: 4.7-5.6 GB/s), so a run that kept every round's gigabyte measured the
machine's memory, not the brokers, after its first round.
Neither broker fsyncs per append (Kafka's defaults; moverd follows them: docs/data-path.md).
The machine is shared: expect noise; the ratios of one run side by side are what count, and the spread of the rounds
is printed beside each median.
Usage: python bench/data_path_kafka.py [--rounds 3] [--records-single 20000] [--records-bulk 2000000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root, pct  # noqa: E402
from mover.testing.batches import make_batch  # noqa: E402
from mover.testing.kafka_cluster import KafkaCluster  # noqa: E402
from mover.testing.kafka_home import SKIP_REASON, kafka_home  # noqa: E402
from mover.testing.kafka_node import KAFKA_DEFAULT_PROPS, KAFKA_START_SCRIPT_HEAP  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.wire import encode_request, join_chunks  # noqa: E402
from mover.wire.messages import CREATE_TOPICS, DELETE_TOPICS, PRODUCE  # noqa: E402

RECORD = 512
# kcat's fetch queue limits raised past a bulk topic (librdkafka's maxima): its fetcher never stops for a full queue.
UNBOUNDED_QUEUE = ["-X", "queued.min.messages=10000000", "-X", "queued.max.messages.kbytes=2097151"]


def record_file(root: Path, n: int) -> Path:
    """n lines of RECORD bytes: kcat sends each line (without its newline) as one record."""
    path = root / f"records-{n}.txt"
    line = b"x" * RECORD + b"\n"
    with open(path, "wb") as f:
        chunk = line * 10000
        for _ in range(n // 10000):
            f.write(chunk)
        f.write(line * (n % 10000))
    return path


def kcat(args: list[str], *, stdin: Path | None = None) -> float:
    """Run kcat; seconds it took. Fails loudly on a non-zero exit."""
    t0 = time.perf_counter()
    with open(stdin if stdin else os.devnull, "rb") as inp:
        proc = subprocess.run(["kcat", *args], stdin=inp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return took


def kcat_counted(args: list[str], expect: int) -> float:
    """Run a consuming kcat whose output is read by `wc -l` through a pipe; seconds it took. Fails unless exactly
    `expect` records came out."""
    t0 = time.perf_counter()
    consumer = subprocess.Popen(["kcat", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    counter = subprocess.run(["wc", "-l"], stdin=consumer.stdout, capture_output=True, text=True)
    assert consumer.stdout is not None and consumer.stderr is not None
    consumer.stdout.close()
    err = consumer.stderr.read()
    rc = consumer.wait()
    took = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"kcat {' '.join(args)} exited {rc}: {err.decode()[-2000:]}")
    if int(counter.stdout.split()[0]) != expect:
        raise RuntimeError(f"kcat {' '.join(args)} printed {counter.stdout.strip()} records, not {expect}")
    return took


def call(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    head = _recv(sock, 4)
    (size,) = struct.unpack(">i", head)
    return _recv(sock, size)


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def create_topic(port: int, topic: str) -> None:
    body = {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 30000, "validate_only": False}
    with socket.create_connection(("127.0.0.1", port)) as s:
        call(s, join_chunks(encode_request(CREATE_TOPICS, 5, 1, body, client_id="bench")))


def delete_topics(port: int, topics: list[str], log_dirs: list[Path]) -> None:
    """Delete the topics and wait until their directories (and the `-delete` ones) are gone from `log_dirs`."""
    body = {"topic_names": topics, "timeout_ms": 30000}
    with socket.create_connection(("127.0.0.1", port)) as s:
        call(s, join_chunks(encode_request(DELETE_TOPICS, 4, 1, body, client_id="bench")))
    deadline = time.monotonic() + 120
    while any(p.name.split("-", 1)[0] in topics for d in log_dirs if d.exists() for p in d.iterdir()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topics} still in {log_dirs}")
        time.sleep(0.2)


def wait_leader(bootstrap: str, topic: str) -> None:
    """Until kcat sees the partition with a leader (Kafka's metadata propagates after CreateTopics answers)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run(["kcat", "-L", "-b", bootstrap, "-t", topic, "-J"], capture_output=True, text=True)
        if out.returncode == 0 and '"leader":' in out.stdout and '"leader":-1' not in out.stdout:
            return
        time.sleep(0.2)
    raise TimeoutError(f"no leader for {topic} on {bootstrap}")


def latencies(port: int, topic: str, n: int) -> list[float]:
    """Round trips of n sequential acks=all Produce requests of one 512 B record each."""
    batch = make_batch([b"x" * RECORD])
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    out = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(n + 50):
            data = join_chunks(encode_request(PRODUCE, 9, i, body, client_id="bench"))
            t0 = time.perf_counter()
            call(s, data)
            if i >= 50:  # the first ones warm both brokers' paths up
                out.append(time.perf_counter() - t0)
    return out


def cpu_seconds(pid: int) -> float:
    """CPU the process's live threads used so far, from the scheduler's nanosecond counters (/proc/.../schedstat;
    the tick-sampled user + system times of /proc/<pid>/stat are 10 ms grains, a tenth of a latency round's CPU):
    per-request CPU does not depend on how busy the shared machine is, unlike requests/s."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # the thread ended meanwhile
    return total / 1e9


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float], digits: int = 0) -> str:
    return f"[{min(xs):,.{digits}f} .. {max(xs):,.{digits}f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records-single", type=int, default=20000)
    ap.add_argument("--records-bulk", type=int, default=2_000_000)
    ap.add_argument("--latency-requests", type=int, default=2000)
    ap.add_argument("--only", choices=["single", "bulk", "latency"], default=None)
    ap.add_argument("--moverd-only", action="store_true", help="no Kafka (for profiling)")
    args = ap.parse_args()

    root = bench_root()
    (root / "kafka").mkdir()
    single_file = record_file(root, args.records_single)
    bulk_file = record_file(root, args.records_bulk)
    brokers: dict[str, str] = {}
    moverd = Moverd(root / "moverd", n_dirs=1, props={"auto.create.topics.enable": "false",
                                                     "log.segment.delete.delay.ms": 1000})
    (root / "moverd").mkdir()
    home = kafka_home()
    if home is None and not args.moverd_only:
        raise SystemExit(SKIP_REASON)
    kafka = (KafkaCluster(root / "kafka", home, brokers=1, log_dirs=1, heap=KAFKA_START_SCRIPT_HEAP,
                          props={**KAFKA_DEFAULT_PROPS, "log.segment.delete.delay.ms": 1000})
             if home is not None else None)
    try:
        moverd.start()
        brokers["moverd"] = moverd.bootstrap
        pids: dict[str, int] = {"moverd": moverd.proc.pid if moverd.proc else 0}
        print(f"moverd pid {moverd.proc.pid if moverd.proc else '?'} on {moverd.bootstrap}", flush=True)
        if not args.moverd_only:
            assert kafka is not None
            kafka.start()
            brokers["kafka"] = kafka.bootstrap
            pids["kafka"] = kafka.brokers[0].pid
            print(f"kafka pid {kafka.brokers[0].pid} on {brokers['kafka']}", flush=True)
        res: dict[str, dict[str, list[float]]] = {b: {} for b in brokers}
        lat: dict[str, list[float]] = {b: [] for b in brokers}

        def note(broker: str, what: str, value: float) -> None:
            res[broker].setdefault(what, []).append(value)

        def run_step(step: str, b: str, r: int) -> None:
            # Each produce starts with no dirty pages: otherwise the broker that goes second in a round writes
            # while the first one's gigabyte is written back, past the kernel's dirty threshold, and is throttled
            # for it (the first round's first broker was up to 2x faster than any later writer for that alone).
            if step in ("single", "bulk"):
                os.sync()
            if step == "single":
                c0 = cpu_seconds(pids[b])
                s = kcat(["-P", "-b", brokers[b], "-t", f"single{r}", "-p", "0", "-X", "linger.ms=0",
                          "-X", "batch.num.messages=1", "-X", "acks=all"], stdin=single_file)
                note(b, "single", args.records_single / s)
                note(b, "single_cpu", (cpu_seconds(pids[b]) - c0) / args.records_single * 1e6)
            elif step == "bulk":
                s = kcat(["-P", "-b", brokers[b], "-t", f"bulk{r}", "-p", "0", "-X", "acks=all"], stdin=bulk_file)
                note(b, "bulk", args.records_bulk / s)
            elif step == "consume":
                consume = ["-C", "-b", brokers[b], "-t", f"bulk{r}", "-p", "0", "-o", "beginning", "-e", "-q", "-c",
                           str(args.records_bulk)]
                c0 = cpu_seconds(pids[b])
                s = kcat_counted(consume, args.records_bulk)
                note(b, "consume", args.records_bulk / s)
                note(b, "consume_cpu", (cpu_seconds(pids[b]) - c0) / (args.records_bulk * RECORD / 1e9))
                # The same with librdkafka's local fetch queue never full: a fetcher whose queue passed
                # queued.min.messages stops fetching until a wake-up up to a second later, however soon the queue
                # drains (docs/data-path.md, "Consume at kcat's defaults"): this row leaves that stall out.
                s = kcat_counted([*consume, *UNBOUNDED_QUEUE], args.records_bulk)
                note(b, "consume_unbounded", args.records_bulk / s)
            else:
                c0 = cpu_seconds(pids[b])
                got = latencies(int(brokers[b].rsplit(":", 1)[1]), f"lat{r}", args.latency_requests)
                # Warm-up requests included: CPU per request whatever the machine's load, unlike the round trips.
                note(b, "latency_cpu", (cpu_seconds(pids[b]) - c0) / (args.latency_requests + 50) * 1e6)
                lat[b] += got
                note(b, "p50", pct(got, 50) * 1e6)
                note(b, "p99", pct(got, 99) * 1e6)

        for r in range(args.rounds):
            order = list(brokers) if r % 2 == 0 else list(reversed(brokers))
            for b in order:
                port = int(brokers[b].rsplit(":", 1)[1])
                for t in (f"single{r}", f"bulk{r}", f"lat{r}"):
                    create_topic(port, t)
                    wait_leader(brokers[b], t)
            steps = []
            if args.only in (None, "single"):
                steps.append("single")
            if args.only in (None, "bulk"):
                steps += ["bulk", "consume"]
            if args.only in (None, "latency"):
                steps.append("latency")
            for step in steps:
                for b in order:
                    run_step(step, b, r)
            for b in order:
                dirs = moverd.dirs if b == "moverd" else kafka.brokers[0].log_dirs  # type: ignore[union-attr]
                delete_topics(int(brokers[b].rsplit(":", 1)[1]), [f"single{r}", f"bulk{r}", f"lat{r}"], dirs)
            print(f"round {r + 1}: " + "; ".join(
                f"{b} " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in res[b].items()) for b in order), flush=True)

        print()
        labels = {"single": "produce 1 record/request (req/s)", "single_cpu": "same, broker CPU per request (us)",
                  "bulk": "produce big batches (rec/s)",
                  "consume": "consume, output read (rec/s)", "consume_cpu": "same, broker CPU s per GB",
                  "consume_unbounded": "same, kcat's fetch queue unbounded",
                  "p50": "acks=all 1-record latency p50 (us)",
                  "p99": "acks=all 1-record latency p99 (us)", "latency_cpu": "same, broker CPU per request (us)"}
        for key, label in labels.items():
            if key not in res["moverd"]:
                continue
            m = res["moverd"][key]
            digits = 2 if key == "consume_cpu" else 0  # seconds per GB: a few, not thousands
            line = f"{label:38s} moverd {med(m):>11,.{digits}f} {spread(m, digits):>22s}"
            if "kafka" in res:
                k = res["kafka"][key]
                ratio = med(m) / med(k)
                lower = key in ("p50", "p99", "single_cpu", "latency_cpu", "consume_cpu")
                tag = "moverd/kafka (lower is better)" if lower else "moverd/kafka"
                line += f"   kafka {med(k):>11,.{digits}f} {spread(k, digits):>22s}   {tag} {ratio:.2f}x"
            print(line)
        if lat.get("moverd") and lat.get("kafka"):
            print(f"latency over all rounds: moverd p50 {pct(lat['moverd'], 50) * 1e6:.0f} us p99 "
                  f"{pct(lat['moverd'], 99) * 1e6:.0f} us; kafka p50 {pct(lat['kafka'], 50) * 1e6:.0f} us p99 "
                  f"{pct(lat['kafka'], 99) * 1e6:.0f} us")
        print(f"(noise: the machine is shared; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at "
              "the end; [min .. max] of the rounds beside each median)")
    finally:
        if moverd.proc is not None:
            moverd.stop()
            # How often the event loop's quick appends fell back to the I/O threads for a while (docs/data-path.md):
            # each such period makes moverd's one-record figure that of the slow path.
            fallbacks = moverd.log().count("appends on the event loop to")
            print(f"moverd: quick appends sent to the I/O threads {fallbacks} time(s) (10 s each)")
        if kafka is not None:
            kafka.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
