"""What TLS and SASL cost on moverd's listeners: produce and fetch throughput over SSL and SASL_SSL against
PLAINTEXT, and connections per second with SCRAM-SHA-256 against PLAINTEXT connections that only ask ApiVersions.

One real moverd process with four listeners (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; certificates made here) and
one client: mover.client.BrokerConnection, the same code on every listener (only the transport differs), sending
Produce v9 (acks=1, ~1 MB batches) and Fetch v12 (4 MiB per partition) one request at a time. Rounds alternate the
listeners so that the machine's load drifts over all of them alike; the median round is reported. Client and broker
share the machine's cores, so the wall-clock ratios include the client's side of TLS too (as any client on the same
box would pay it) and move with whatever else the machine runs; the CPU seconds moverd itself spent per MB (or per
connection), read from /proc through psutil, are the figure that does not depend on the neighbours.

Connections: open, (TLS handshake,) ApiVersions, (SaslHandshake + SaslAuthenticate SCRAM-SHA-256 with 4096
iterations,) close, in a loop for `--seconds` per kind; the anchor is the PLAINTEXT connection with ApiVersions.

Usage: python bench/security.py [--mb 32] [--rounds 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import shutil
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
from mover.client import AuthenticationFailed, BrokerConnection  # noqa: E402
from mover.security.client_config import ClientSecurity  # noqa: E402
from mover.testing.batches import make_batch  # noqa: E402
from mover.testing.certs import Pki  # noqa: E402
from mover.testing.log_dirs_tool import create_topics  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.ports import free_port  # noqa: E402
from mover.testing.wait import wait_for  # noqa: E402
from mover.wire.messages import FETCH, PRODUCE  # noqa: E402

MB = 1 << 20
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
USER, PASSWORD, MECHANISM = "bench", "bench-secret", "SCRAM-SHA-256"
TOPIC = "bench"
RECORD = b"x" * 16384
BATCH_RECORDS = 60  # ~1 MB per batch, under message.max.bytes (1048588)
FETCH_PARTITION_BYTES = 4 * MB
# A batch header: base offset (8), length (4), ...; the last offset delta sits at byte 23 (Kafka's v2 layout).
_BATCH_HEADER = 61


def start_broker(root: Path) -> tuple[Moverd, dict[str, int], Pki]:
    pki = Pki(root / "pki")
    server = pki.issue("localhost", server=True)
    ports = {name: free_port() for name in LISTENERS}
    d = Moverd(root / "broker", props={
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": server.keystore,
        "ssl.truststore.location": pki.ca_file,
        "sasl.enabled.mechanisms": MECHANISM,
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
    return {
        "PLAINTEXT": ClientSecurity(),
        "SSL": ClientSecurity.from_properties({"security.protocol": "SSL", **tls}),
        "SASL_PLAINTEXT": ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", **sasl}),
        "SASL_SSL": ClientSecurity.from_properties({"security.protocol": "SASL_SSL", **tls, **sasl}),
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


@dataclass
class Sample:
    rate: float  # MB/s or connections/s, wall clock
    server_cpu: float  # moverd's CPU seconds per unit (MB or connection)


def median_rounds(rounds: int, kinds: tuple[str, ...], server: psutil.Process,
                  measure: Callable[[str], tuple[float, float]]) -> dict[str, Sample]:
    """`measure(kind)` -> (rate, units done); each round runs every kind once, in turn."""
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    cpus: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(rounds):
        for k in kinds:
            before = server.cpu_times()
            rate, units = measure(k)
            after = server.cpu_times()
            rates[k].append(rate)
            cpus[k].append((after.user + after.system - before.user - before.system) / units)
    return {k: Sample(statistics.median(rates[k]), statistics.median(cpus[k])) for k in kinds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=32, help="MiB produced and fetched per listener per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="per connection kind per round")
    args = ap.parse_args()
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
                                lambda k: fetch_rate(conns[k], f"{TOPIC}-PLAINTEXT", total))
        for c in conns.values():
            c.close()
        kinds = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
        connected = median_rounds(args.rounds, kinds, server,
                                  lambda k: connection_rate(ports[k], sec[k], args.seconds))
    finally:
        if d is not None and d.proc is not None:
            d.stop()
        shutil.rmtree(root, ignore_errors=True)

    print(f"moverd, one client, one request in flight; {args.rounds} rounds, median; {args.mb} MiB per listener "
          f"per round, ~1 MB batches")
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
              "SASL_PLAINTEXT": f"SASL_PLAINTEXT {MECHANISM}", "SASL_SSL": f"SASL_SSL {MECHANISM}"}
    base = connected["PLAINTEXT"]
    print(f"{'':<36}{'conn/s':>9}{'ratio':>8}{'moverd CPU ms/conn':>20}{'ratio':>8}")
    for k in kinds:
        c = connected[k]
        print(f"{labels[k]:<36}{c.rate:>9.0f}{c.rate / base.rate:>8.2f}{c.server_cpu * 1000:>20.2f}"
              f"{c.server_cpu / base.server_cpu:>8.2f}")


if __name__ == "__main__":
    main()
