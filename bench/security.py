"""Security costs, each against its anchor in the same run (one moverd, four listeners):

1. produce and consume throughput over SSL and SASL_SSL, with kcat (librdkafka), as ratios of PLAINTEXT's;
2. connections per second that authenticate with SCRAM-SHA-256 / PLAIN, against plain TCP connections that send one
   ApiVersions (the anchor);
3. RSS of moverd while 8 connections each hold 60 MB of a 100 MB frame: unlimited (Kafka's default, the anchor)
   against queued.max.request.bytes = 100 MB.

    .venv/bin/python -m bench.security [--mb 64] [--connections 200] [--skip-memory]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from scramp import ScramClient

from mover.testing.certs import Pki
from mover.testing.moverd import Moverd
from mover.testing.ports import free_port
from mover.wire import decode_response, encode_request, join_chunks
from mover.wire.messages import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def start(tmp: Path, pki: Pki, extra: dict[str, object] | None = None) -> tuple[Moverd, dict[str, int]]:
    server = pki.issue("localhost", server=True)
    ports = {p: free_port() for p in PROTOCOLS}
    props: dict[str, object] = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "ssl.keystore.location": server.keystore,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "log.segment.bytes": 256 << 20,
    }
    props.update(extra or {})
    tmp.mkdir(parents=True, exist_ok=True)
    d = Moverd(tmp, props=props)
    d.start()
    return d, ports


def kcat_opts(name: str, port: int, pki: Pki) -> list[str]:
    opts = ["-b", f"127.0.0.1:{port}", "-X", f"security.protocol={name.lower()}"]
    if name.endswith("SSL"):
        opts += ["-X", f"ssl.ca.location={pki.ca_file}"]
    if name.startswith("SASL"):
        opts += ["-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    return opts


def throughput(d: Moverd, ports: dict[str, int], pki: Pki, mb: int, tmp: Path) -> None:
    payload = tmp / "payload.txt"
    line = b"x" * 1023 + b"\n"
    with open(payload, "wb") as f:
        for _ in range(mb * 1024):
            f.write(line)
    results: dict[str, tuple[float, float]] = {}
    for name in ("PLAINTEXT", "SSL", "SASL_SSL"):
        topic = f"bench-{name.lower()}"
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
        print(f"  {name:10s} produce {mb / produce_s:7.1f} MB/s   consume {mb / consume_s:7.1f} MB/s")
    base_p, base_c = results["PLAINTEXT"]
    for name in ("SSL", "SASL_SSL"):
        p, c = results[name]
        print(f"  {name} / PLAINTEXT: produce {p / base_p:.2f}, consume {c / base_c:.2f}")


def _call(sock: socket.socket, api, version: int, body: dict, corr: int) -> dict:  # noqa: ANN001
    sock.sendall(join_chunks(encode_request(api, version, corr, body, client_id="bench")))
    head = _exact(sock, 4)
    _, reply = decode_response(api, version, _exact(sock, struct.unpack(">i", head)[0]))
    return reply


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def connect_rate(port: int, n: int, mechanism: str | None) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port)) as s:
            assert _call(s, API_VERSIONS, 3, {"client_software_name": "b", "client_software_version": "1"}, 1)[
                "error_code"] == 0
            if mechanism is None:
                continue
            assert _call(s, SASL_HANDSHAKE, 1, {"mechanism": mechanism}, 2)["error_code"] == 0
            if mechanism == "PLAIN":
                r = _call(s, SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"}, 3)
                assert r["error_code"] == 0
                continue
            c = ScramClient([mechanism], "carol", "carol-secret")
            first = _call(s, SASL_AUTHENTICATE, 1, {"auth_bytes": c.get_client_first().encode()}, 3)
            c.set_server_first(first["auth_bytes"].decode())
            final = _call(s, SASL_AUTHENTICATE, 1, {"auth_bytes": c.get_client_final().encode()}, 4)
            assert final["error_code"] == 0
            c.set_server_final(final["auth_bytes"].decode())
    return n / (time.perf_counter() - t0)


def connections(d: Moverd, ports: dict[str, int], n: int) -> None:
    out = subprocess.run([sys.executable, "-m", "mover.daemon", "--config", str(d.config), "--add-scram-user",
                          "carol", "--mechanism", "SCRAM-SHA-256"], input="carol-secret\n", text=True,
                         capture_output=True, check=True)
    assert "stored" in out.stdout
    anchor = connect_rate(ports["PLAINTEXT"], n, None)
    plain = connect_rate(ports["SASL_PLAINTEXT"], n, "PLAIN")
    scram = connect_rate(ports["SASL_PLAINTEXT"], n, "SCRAM-SHA-256")
    print(f"  plain TCP + ApiVersions   {anchor:7.0f} conn/s (anchor)")
    print(f"  SASL PLAIN                {plain:7.0f} conn/s  ratio {plain / anchor:.2f}")
    print(f"  SASL SCRAM-SHA-256 (4096) {scram:7.0f} conn/s  ratio {scram / anchor:.2f}  (client PBKDF2 included)")


def memory(tmp: Path, pki: Pki, budget: int | None) -> float:
    extra: dict[str, object] = {"socket.request.max.bytes": 104857600}
    if budget is not None:
        extra["queued.max.request.bytes"] = budget
    d, ports = start(tmp, pki, extra)
    try:
        proc = psutil.Process(d.proc.pid)  # type: ignore[union-attr]
        base = proc.memory_info().rss
        socks = []
        chunk = b"\0" * (1 << 20)
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", ports["PLAINTEXT"]))
            s.setblocking(False)
            s.send(struct.pack(">i", 100 << 20))
            socks.append(s)
        # Push 60 MB per connection, as far as the broker reads (with a budget it stops reading: send blocks).
        deadline = time.monotonic() + 60
        sent = [0] * len(socks)
        while time.monotonic() < deadline and any(x < 60 << 20 for x in sent):
            progressed = False
            for i, s in enumerate(socks):
                if sent[i] >= 60 << 20:
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
        print(f"  {'unlimited' if budget is None else f'queued.max.request.bytes={budget >> 20} MB':34s} "
              f"sent {sum(sent) >> 20:4d} MB, RSS +{rss / (1 << 20):7.1f} MB")
        for s in socks:
            s.close()
        return rss
    finally:
        d.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=64, help="MB produced and consumed per protocol")
    p.add_argument("--connections", type=int, default=200)
    p.add_argument("--skip-memory", action="store_true")
    args = p.parse_args()
    if shutil.which("kcat") is None:
        sys.exit("bench/security.py needs kcat")
    tmp = Path(tempfile.mkdtemp(prefix="bench-security-"))
    try:
        pki = Pki(tmp / "pki")
        d, ports = start(tmp / "broker", pki)
        try:
            print(f"throughput, {args.mb} MB of 1 KiB records, kcat:")
            throughput(d, ports, pki, args.mb, tmp)
            print(f"connections with authentication, {args.connections} sequential:")
            connections(d, ports, args.connections)
        finally:
            d.stop()
        if not args.skip_memory:
            print("memory held by 8 connections each sending 60 MB of a 100 MB frame:")
            unlimited = memory(tmp / "m1", pki, None)
            bounded = memory(tmp / "m2", pki, 100 << 20)
            print(f"  bounded / unlimited RSS growth: {bounded / max(unlimited, 1):.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
