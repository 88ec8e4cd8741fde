"""What TLS and SASL cost on moverd's listeners, and what queued.max.request.bytes saves, each against its anchor in
the same run:

1. produce and fetch throughput over SSL and SASL_SSL against PLAINTEXT, with our client (below) and with kcat
   (librdkafka, a real client: `--skip-kcat` to leave it out);
2. connections per second that authenticate (SASL PLAIN, SCRAM-SHA-256; TLS) against PLAINTEXT connections that
   only ask ApiVersions;
3. RSS of moverd while 8 connections each hold 60 MB of a 100 MB frame: unlimited (Kafka's default, the anchor)
   against queued.max.request.bytes = 100 MB (`--skip-memory` to leave it out).

One real moverd process with four listeners (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; certificates made here) and
one client: mover.admin.client.BrokerConnection, the same code on every listener (only the transport differs), sending
Produce v9 (acks=1, ~1 MB batches) and Fetch v12 (4 MiB per partition) one request at a time. Rounds alternate the
listeners so that the machine's load drifts over all of them alike; the median round's rate is reported, and the
CPU over all rounds. Client and broker
share the machine's cores, so the wall-clock ratios include the client's side of TLS too (as any client on the same
box would pay it) and move with whatever else the machine runs; the CPU seconds moverd itself spent per MB (or per
connection), read from /proc through psutil, are the figure that does not depend on the neighbours.

Connections: open, (TLS handshake,) ApiVersions, (SaslHandshake + SaslAuthenticate: PLAIN, or SCRAM-SHA-256 with
4096 iterations, the client's PBKDF2 included,) close, in a loop for `--seconds` per kind; the anchor is the
PLAINTEXT connection with ApiVersions.

Usage: python bench/security.py [--mb 32] [--rounds 3] [--seconds 3] [--skip-kcat] [--skip-memory]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.admin.client import AuthenticationFailed, BrokerConnection  # noqa: E402
from mover.security.client_config import ClientSecurity  # noqa: E402
from mover.testing.batches import make_batch  # noqa: E402
from mover.testing.certs import Pki  # noqa: E402
from mover.testing.log_dirs_tool import create_topics  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.ports import free_ports  # noqa: E402
from mover.testing.wait import wait_for  # noqa: E402
from mover.wire.messages import FETCH, PRODUCE  # noqa: E402

MB = 1 << 20
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
USER, PASSWORD, MECHANISM = "bench", "bench-secret", "SCRAM-SHA-256"
PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-secret"
PLAIN_JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{PLAIN_USER}="{PLAIN_PASSWORD}";'
TOPIC = "bench"
RECORD = b"x" * 16384
BATCH_RECORDS = 60  # ~1 MB per batch, under message.max.bytes (1048588)
FETCH_PARTITION_BYTES = 4 * MB
# Fetch is several times faster than produce: read this many times --mb per round so each round lasts as long.
FETCH_FACTOR = 4
# A batch header: base offset (8), length (4), ...; the last offset delta sits at byte 23 (Kafka's v2 layout).
_BATCH_HEADER = 61


def start_broker(root: Path) -> tuple[Moverd, dict[str, int], Pki]:
    pki = Pki(root / "pki")
    server = pki.issue("localhost", server=True)
    ports = dict(zip(LISTENERS, free_ports(len(LISTENERS)), strict=True))
    d = Moverd(root / "broker", props={
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": server.keystore,
        "ssl.truststore.location": pki.ca_file,
        "sasl.enabled.mechanisms": f"PLAIN,{MECHANISM}",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "log.segment.bytes": 256 << 20,
    })
    (root / "broker").mkdir()
    d.start()
    return d, ports, pki


def add_user(d: Moverd, port: int, security: ClientSecurity) -> None:
    out = subprocess.run([sys.executable, "-m", "mover.daemon", "--config", str(d.config), "--add-scram-user", USER,
                          "--mechanism", MECHANISM], input=PASSWORD + "\n", capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"--add-scram-user failed: {out.stderr}")

    def accepted() -> bool:  # the running moverd re-reads its credential store on change
        try:
            BrokerConnection("127.0.0.1", port, security=security).close()
        except AuthenticationFailed:
            return False
        return True

    wait_for(accepted, message="moverd to accept the SCRAM user")


def securities(pki: Pki) -> dict[str, ClientSecurity]:
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{USER}" '
            f'password="{PASSWORD}";')
    tls = {"ssl.truststore.location": str(pki.ca_file)}
    sasl = {"sasl.mechanism": MECHANISM, "sasl.jaas.config": jaas}
    plain = {"sasl.mechanism": "PLAIN", "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                            f'required username="{PLAIN_USER}" '
                                                            f'password="{PLAIN_PASSWORD}";'}
    return {
        "PLAINTEXT": ClientSecurity(),
        "SSL": ClientSecurity.from_properties({"security.protocol": "SSL", **tls}),
        "SASL_PLAINTEXT": ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", **sasl}),
        "SASL_SSL": ClientSecurity.from_properties({"security.protocol": "SASL_SSL", **tls, **sasl}),
        "SASL_PLAINTEXT PLAIN": ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", **plain}),
    }


def produce_rate(conn: BrokerConnection, topic: str, batch: bytes, total: int) -> tuple[float, float]:
    body = {"acks": 1, "timeout_ms": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    sent = 0
    t0 = time.perf_counter()
    while sent < total:
        reply = conn.call(PRODUCE, body, 9)
        code = reply["responses"][0]["partition_responses"][0]["error_code"]
        if code:
            raise SystemExit(f"Produce failed with error {code}")
        sent += len(batch)
    return sent / (time.perf_counter() - t0) / MB, sent / MB


def next_offset(records: bytes, offset: int) -> tuple[int, int]:
    """(the offset after the last whole batch in `records`, the bytes of those whole batches)."""
    pos = 0
    while pos + _BATCH_HEADER <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        end = pos + 12 + length
        if end > len(records):
            break
        (last_delta,) = struct.unpack_from(">i", records, pos + 23)
        offset = base + last_delta + 1
        pos = end
    return offset, pos


def fetch_rate(conn: BrokerConnection, topic: str, total: int) -> tuple[float, float]:
    offset = received = 0
    t0 = time.perf_counter()
    while received < total:
        reply = conn.call(FETCH, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": FETCH_PARTITION_BYTES,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "partition_max_bytes": FETCH_PARTITION_BYTES}]}]}, 12)
        part = reply["responses"][0]["partitions"][0]
        if part["error_code"]:
            raise SystemExit(f"Fetch failed with error {part['error_code']}")
        records = bytes(part["records"] or b"")
        offset, whole = next_offset(records, offset)
        if whole == 0:
            offset = 0  # read to the end: start over (the same bytes, from the page cache, on every listener)
            continue
        received += whole
    return received / (time.perf_counter() - t0) / MB, received / MB


def connection_rate(port: int, security: ClientSecurity, seconds: float) -> tuple[float, float]:
    n = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        BrokerConnection("127.0.0.1", port, security=security).close()
        n += 1
    return n / (time.perf_counter() - t0), n


def kcat_opts(name: str, port: int, pki: Pki) -> list[str]:
    opts = ["-b", f"127.0.0.1:{port}", "-X", f"security.protocol={name.lower()}"]
    if name.endswith("SSL"):
        opts += ["-X", f"ssl.ca.location={pki.ca_file}"]
    if name.startswith("SASL"):
        opts += ["-X", "sasl.mechanisms=PLAIN", "-X", f"sasl.username={PLAIN_USER}", "-X",
                 f"sasl.password={PLAIN_PASSWORD}"]
    return opts


def kcat_throughput(ports: dict[str, int], pki: Pki, mb: int, tmp: Path) -> dict[str, tuple[float, float]]:
    """kcat -P of `mb` MB of 1 KiB lines, then kcat -C of all of them, per listener: {listener: (MB/s, MB/s)}."""
    payload = tmp / "payload.txt"
    line = b"x" * 1023 + b"\n"
    with open(payload, "wb") as f:
        for _ in range(mb * 1024):
            f.write(line)
    results: dict[str, tuple[float, float]] = {}
    for name in ("PLAINTEXT", "SSL", "SASL_SSL"):
        topic = f"kcat-{name.lower()}"
        opts = kcat_opts(name, ports[name], pki)
        t0 = time.perf_counter()
        subprocess.run(["kcat", *opts, "-P", "-t", topic, "-X", "linger.ms=5", "-X", "batch.size=1000000",
                        "-l", str(payload)], check=True, timeout=600)
        produce_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = subprocess.run(["kcat", *opts, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%S\n"],
                             check=True, timeout=600, capture_output=True)
        consume_s = time.perf_counter() - t0
        records = out.stdout.count(b"\n")
        assert records == mb * 1024, f"{name}: consumed {records} records"
        results[name] = (mb / produce_s, mb / consume_s)
    return results


def memory(tmp: Path, budget: int | None) -> tuple[float, int]:
    """moverd's RSS growth while 8 connections each send 60 MB of a 100 MB frame: (bytes, bytes sent)."""
    props: dict[str, object] = {"socket.request.max.bytes": 104857600}
    if budget is not None:
        props["queued.max.request.bytes"] = budget
    tmp.mkdir(parents=True, exist_ok=True)
    with Moverd(tmp, props=props) as d:
        assert d.proc is not None
        proc = psutil.Process(d.proc.pid)
        base = proc.memory_info().rss
        socks = []
        chunk = b"\0" * MB
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", d.port))
            s.setblocking(False)
            s.send(struct.pack(">i", 100 * MB))
            socks.append(s)
        # Push 60 MB per connection, as far as the broker reads (with a budget it stops reading: send blocks).
        deadline = time.monotonic() + 60
        sent = [0] * len(socks)
        while time.monotonic() < deadline and any(x < 60 * MB for x in sent):
            progressed = False
            for i, s in enumerate(socks):
                if sent[i] >= 60 * MB:
                    continue
                try:
                    sent[i] += s.send(chunk)
                    progressed = True
                except BlockingIOError:
                    pass
            if not progressed:
                time.sleep(0.05)  # every socket's buffers are full: the broker has stopped reading
                if budget is not None and time.monotonic() > deadline - 50:
                    break
        time.sleep(1.0)  # let the daemon take in what is in flight
        rss = proc.memory_info().rss - base
        for s in socks:
            s.close()
        return rss, sum(sent)


@dataclass
class Sample:
    rate: float  # MB/s or connections/s, wall clock: the median round
    server_cpu: float  # moverd's CPU seconds per unit (MB or connection), over all rounds


def median_rounds(rounds: int, kinds: tuple[str, ...], server: psutil.Process,
                  measure: Callable[[str], tuple[float, float]]) -> dict[str, Sample]:
    """`measure(kind)` -> (rate, units done); each round runs every kind once, in turn."""
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    cpu = dict.fromkeys(kinds, 0.0)
    done = dict.fromkeys(kinds, 0.0)
    for _ in range(rounds):
        for k in kinds:
            before = server.cpu_times()
            rate, units = measure(k)
            after = server.cpu_times()
            rates[k].append(rate)
            cpu[k] += after.user + after.system - before.user - before.system
            done[k] += units
    # CPU times tick at 10 ms: summed over the rounds, not a median of per-round quotients of a few ticks.
    return {k: Sample(statistics.median(rates[k]), cpu[k] / done[k]) for k in kinds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=32, help="MiB produced and fetched per listener per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="per connection kind per round")
    ap.add_argument("--skip-kcat", action="store_true", help="leave out the kcat throughput")
    ap.add_argument("--skip-memory", action="store_true", help="leave out the partial-frame memory runs")
    args = ap.parse_args()
    kcat = not args.skip_kcat and shutil.which("kcat") is not None
    root = bench_root()
    d: Moverd | None = None
    try:
        d, ports, pki = start_broker(root)
        assert d.proc is not None
        server = psutil.Process(d.proc.pid)
        sec = securities(pki)
        add_user(d, ports["SASL_PLAINTEXT"], sec["SASL_PLAINTEXT"])
        data = ("PLAINTEXT", "SSL", "SASL_SSL")
        create_topics(f"127.0.0.1:{ports['PLAINTEXT']}", {f"{TOPIC}-{k}": 1 for k in data})
        conns = {k: BrokerConnection("127.0.0.1", ports[k], security=sec[k]) for k in data}
        batch = make_batch([RECORD] * BATCH_RECORDS)
        total = args.mb * MB
        produce_rate(conns["PLAINTEXT"], f"{TOPIC}-PLAINTEXT", batch, 8 * MB)  # warm-up: files, pool, caches
        produced = median_rounds(args.rounds, data, server,
                                 lambda k: produce_rate(conns[k], f"{TOPIC}-{k}", batch, total))
        fetched = median_rounds(args.rounds, data, server,
                                lambda k: fetch_rate(conns[k], f"{TOPIC}-PLAINTEXT", FETCH_FACTOR * total))
        for c in conns.values():
            c.close()
        kinds = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT PLAIN", "SASL_PLAINTEXT", "SASL_SSL")
        connected = median_rounds(args.rounds, kinds, server,
                                  lambda k: connection_rate(ports[k.split()[0]], sec[k], args.seconds))
        kcat_results = kcat_throughput(ports, pki, args.mb, root) if kcat else None
        d.stop()
        memory_results = None
        if not args.skip_memory:
            memory_results = (memory(root / "m1", None), memory(root / "m2", 100 * MB))
    finally:
        if d is not None and d.proc is not None:
            d.stop()
        shutil.rmtree(root, ignore_errors=True)

    print(f"moverd, one client, one request in flight; {args.rounds} rounds (rates: median round; CPU: all rounds); "
          f"per listener per round {args.mb} MiB produced in ~1 MB batches, {FETCH_FACTOR * args.mb} MiB fetched")
    print(f"{'':<16}{'produce':^40}     {'fetch':^40}")
    header = f"{'MB/s':>8}{'ratio':>7}{'moverd CPU ms/MB':>18}{'ratio':>7}"
    print(f"{'listener':<16}{header}     {header}")
    for k in data:
        cells = []
        for got in (produced, fetched):
            base = got["PLAINTEXT"]
            cells.append(f"{got[k].rate:>8.1f}{got[k].rate / base.rate:>7.2f}{got[k].server_cpu * 1000:>18.2f}"
                         f"{got[k].server_cpu / base.server_cpu:>7.2f}")
        print(f"{k:<16}{cells[0]}     {cells[1]}")
    print(f"\nconnections per second (one client, sequential: connect, ApiVersions, authenticate, close; "
          f"{args.seconds:g} s per kind per round)")
    labels = {"PLAINTEXT": "PLAINTEXT + ApiVersions (anchor)", "SSL": "SSL (TLS handshake)",
              "SASL_PLAINTEXT PLAIN": "SASL_PLAINTEXT PLAIN",
              "SASL_PLAINTEXT": f"SASL_PLAINTEXT {MECHANISM}", "SASL_SSL": f"SASL_SSL {MECHANISM}"}
    base = connected["PLAINTEXT"]
    print(f"{'':<36}{'conn/s':>9}{'ratio':>8}{'moverd CPU ms/conn':>20}{'ratio':>8}")
    for k in kinds:
        c = connected[k]
        print(f"{labels[k]:<36}{c.rate:>9.0f}{c.rate / base.rate:>8.2f}{c.server_cpu * 1000:>20.2f}"
              f"{c.server_cpu / base.server_cpu:>8.2f}")
    if kcat_results is not None:
        print(f"\nkcat (librdkafka), {args.mb} MB of 1 KiB records, produce then consume, one pass:")
        base_p, base_c = kcat_results["PLAINTEXT"]
        for k, (p, c) in kcat_results.items():
            print(f"  {k:<10} produce {p:7.1f} MB/s ({p / base_p:.2f})   consume {c:7.1f} MB/s ({c / base_c:.2f})")
    if memory_results is not None:
        print("\nmemory held by 8 connections each sending 60 MB of a 100 MB frame:")
        (unlimited, sent_u), (bounded, sent_b) = memory_results
        print(f"  unlimited (anchor)                  sent {sent_u >> 20:4d} MB, RSS +{unlimited / MB:7.1f} MB")
        print(f"  queued.max.request.bytes=100 MB     sent {sent_b >> 20:4d} MB, RSS +{bounded / MB:7.1f} MB")
        print(f"  bounded / unlimited RSS growth: {bounded / max(unlimited, 1):.2f}")


if __name__ == "__main__":
    main()
