"""An independent check of our log-dir encodings: Debian's tshark decodes a loopback capture of them (v0-1)."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from kafka.admin import NewTopic

from mover.storage.log import LogConfig
from mover.storage.names import TopicPartition
from mover.testing.moverd import Moverd
from mover.testing.raw import RawClient
from mover.testing.records import dir_of, write_partition
from mover.testing.wait import wait_for
from mover.wire.messages import ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS
from tests.api.helpers import admin

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")

# pcap global header size: a capture file with at least this many bytes has been opened by dumpcap.
PCAP_HEADER_BYTES = 24


def _fields(pcap: Path, port: int, *fields: str) -> list[list[str]]:
    args = ["tshark", "-r", str(pcap), "-d", f"tcp.port=={port},kafka", "-Y", "kafka", "-T", "fields",
            "-E", "separator=|", "-E", "aggregator=,"]
    for f in fields:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120,
                         stdin=subprocess.DEVNULL).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def test_tshark_decodes_describe_and_alter_v0_v1(tmp_path: Path) -> None:
    tp = TopicPartition("cap", 0)
    d = Moverd(tmp_path / "broker")
    (tmp_path / "broker").mkdir()
    with d, admin(d) as a:
        a.create_topics([NewTopic("cap", 1, 1)])
    src = dir_of(d.dirs, tp.topic, tp.partition)
    size = write_partition(src, tp, 3, records_per_batch=2, record_bytes=100,
                           segment_bytes=LogConfig().segment_bytes).size
    dst = next(p for p in d.dirs if p != src)
    pcap = tmp_path / "lo.pcap"
    with d:
        cap = subprocess.Popen(["tshark", "-i", "lo", "-f", f"tcp port {d.port}", "-w", str(pcap), "-q"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: pcap.exists() and pcap.stat().st_size >= PCAP_HEADER_BYTES,
                     message="tshark to start capturing")
            with RawClient(d.port) as c:
                for v in (0, 1):
                    c.call(DESCRIBE_LOG_DIRS, v, {"topics": None})
                c.call(ALTER_REPLICA_LOG_DIRS, 0, {"dirs": [{"path": "/not/a/dir",
                                                              "topics": [{"name": "cap", "partitions": [0]}]}]})
                c.call(ALTER_REPLICA_LOG_DIRS, 1, {"dirs": [{"path": str(dst),
                                                              "topics": [{"name": "cap", "partitions": [0]}]}]})
                wait_for(lambda: (dst / "cap-0").is_dir(), message="the move to finish")
                # A last request whose packets must be in the file before we stop: our own marker.
                marker = c.call(DESCRIBE_LOG_DIRS, 1, {"topics": []})[0]

            def captured() -> bool:
                rows = _fields(pcap, d.port, "kafka.correlation_id")
                return sum(1 for r in rows if r[0] == str(marker)) >= 2  # request and response

            wait_for(captured, message="the capture to contain the last exchange")
        finally:
            cap.send_signal(signal.SIGINT)
            try:
                cap.wait(30)
            except subprocess.TimeoutExpired:
                cap.kill()
                cap.wait()
    rows = _fields(pcap, d.port, "kafka.api_key", "kafka.api_version", "kafka.log_dir", "kafka.topic_name",
                   "kafka.partition_id", "kafka.error", "kafka.segment_size", "kafka.offset_lag", "kafka.future")
    # Requests carry an api version; tshark labels each response with its request's api key but no version.
    requests = [r for r in rows if r[1]]
    responses = [r for r in rows if not r[1]]
    assert [(r[0], r[1]) for r in requests] == [("35", "0"), ("35", "1"), ("34", "0"), ("34", "1"), ("35", "1")]
    dirs = ",".join(map(str, d.dirs))
    describe = [r[2:] for r in responses if r[0] == "35"]
    # Both describe answers: every log dir, no error, our partition with its real size, no lag, not a future copy.
    assert describe[:2] == [[dirs, "cap", "0", "0,0", str(size), "0", "0"]] * 2
    assert describe[2] == [dirs, "", "", "0,0", "", "", ""]  # topics [] = none
    assert [r[2:5] for r in requests if r[0] == "34"] == [["/not/a/dir", "cap", "0"], [str(dst), "cap", "0"]]
    # tshark 4.0 files the response's topic name under kafka.log_dir; the partition and error are what matter.
    assert [(r[2] or r[3], r[4], r[5]) for r in responses if r[0] == "34"] == [("cap", "0", "57"), ("cap", "0", "0")]
