"""Every verb of mover-log-dirs against a real Apache Kafka 3.7 (KRaft, two log dirs, a SASL_PLAINTEXT listener),
compared with Kafka's own kafka-log-dirs.sh / kafka-reassign-partitions.sh on the same broker where Kafka has the
verb. The move throttle is observed: a move of 15x the rate is held back, the key that lands is Kafka's, nothing
stray is left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import KafkaProducer

from mover.admin import throttle
from mover.admin.client import Client
from mover.config.broker import THROTTLE_KAFKA_KEY, THROTTLE_KEY
from mover.security.client_config import ClientSecurity
from mover.testing import prefork
from mover.testing.broker_configs import another_brokers_id_refusals
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.log_dirs_tool import VERIFY_DONE, VERIFY_IN_PROGRESS, cli
from mover.testing.wait import wait_for
from mover.wire.errors import ErrorCode
from mover.wire.messages import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS

BROKER = 1
USER, PASSWORD = "admin", "admin-secret"
JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{USER}" password="{PASSWORD}";'
SASL_PROPS = {
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{USER}" '
        f'password="{PASSWORD}" user_{USER}="{PASSWORD}";',
}
# Kafka's quota for log-dir moves lets about 10-11 s worth of the rate through before it bites (11 one-second
# windows, docs/kafka-compat.md): a move of 15 s worth must then take at least the other 4 (unthrottled it takes a
# fraction of a second). Measured here, Kafka 3.7 took about size / rate.
RATE = 1_000_000
MOVE_BYTES = 15 * RATE
FREE_WINDOWS_S = 11


@pytest.fixture(scope="module")
def kafka(kafka_cluster: Callable[..., KafkaCluster]) -> KafkaCluster:
    return kafka_cluster(brokers=1, log_dirs=2, listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}, props=SASL_PROPS)


def fill(kafka: KafkaCluster, topic: str, partition: int, nbytes: int, record: int = 10_000) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, acks=1, batch_size=1 << 20, linger_ms=20,
                             max_request_size=2 << 20)
    try:
        value = b"x" * record
        for _ in range(max(1, nbytes // record)):
            producer.send(topic, value=value, partition=partition)
        producer.flush(120)
    finally:
        producer.close()


def dynamic(kafka: KafkaCluster) -> dict[str, tuple[str | None, bool]]:
    """Every config set dynamically on the broker: {name: (value, sensitive)}."""
    with Client(kafka.bootstrap) as c:
        reply = c.connection(BROKER).call(DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": 4, "resource_name": str(BROKER), "configuration_keys": None}]})
    return {e["name"]: (e["value"], e["is_sensitive"]) for r in reply["results"] for e in r["configs"]
            if e["config_source"] == throttle.DYNAMIC_BROKER_CONFIG}


def settled(kafka: KafkaCluster, check: Callable[[dict[str, tuple[str | None, bool]]], bool]) -> None:
    """Wait until the broker's dynamic configs pass `check`: KRaft answers IncrementalAlterConfigs once the
    controller has the change, and the broker applies it from its metadata log a moment later."""
    last: list[dict[str, tuple[str | None, bool]]] = []

    def ok() -> bool:
        last[:] = [dynamic(kafka)]
        return check(last[0])

    try:
        wait_for(ok, timeout=15, message="the broker's dynamic configs", interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"dynamic configs: {last}") from e


def exactly(kafka: KafkaCluster, wanted: dict[str, tuple[str | None, bool]]) -> None:
    settled(kafka, lambda held: held == wanted)


def plant_stray(kafka: KafkaCluster) -> None:
    """What mover-log-dirs did before it told Kafka from moverd: KIP-113's key, which Kafka 3.7 takes and keeps."""
    with Client(kafka.bootstrap) as c:
        reply = c.connection(BROKER).call(INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 4, "resource_name": str(BROKER),
             "configs": [{"name": THROTTLE_KEY, "config_operation": 0, "value": "500000"}]}]})
    assert reply["responses"][0]["error_code"] == 0
    settled(kafka, lambda held: held.get(THROTTLE_KEY) == (None, True))  # Kafka's answer for a key it does not know


def reassignment(path: Path, where: dict[tuple[str, int], Path]) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": [BROKER], "log_dirs": [str(d)]}
        for (t, p), d in sorted(where.items())]}))
    return path


def other_dir(kafka: KafkaCluster, topic: str, partition: int) -> Path:
    here = kafka.dir_of(BROKER, topic, partition)
    return next(d for d in kafka.log_dirs(BROKER) if d != here)


def kafka_tool(kafka: KafkaCluster, name: str, *args: str) -> str:
    return kafka.tool(name, "--bootstrap-server", kafka.bootstrap, *args).stdout


def test_describe_json_is_byte_identical_to_kafkas_tool(kafka: KafkaCluster) -> None:
    kafka.create_topic("many", partitions=24)
    kafka.create_topic("few", partitions=3)
    fill(kafka, "few", 1, 50_000, record=1000)
    for extra in ([], ["--topic-list", "few"], ["--broker-list", str(BROKER), "--topic-list", "few,many"]):
        ours = cli("--bootstrap-server", kafka.bootstrap, "--describe", *extra)
        assert ours.returncode == 0, ours.stderr
        assert ours.stdout == kafka_tool(kafka, "kafka-log-dirs.sh", "--describe", *extra)
    described = json.loads(ours.stdout.splitlines()[2])
    assert {d["logDir"] for d in described["brokers"][0]["logDirs"]} == {str(d) for d in kafka.log_dirs(BROKER)}


def test_describe_table_shows_total_and_usable(kafka: KafkaCluster) -> None:
    r = cli("--bootstrap-server", kafka.bootstrap, "--describe", "--output", "table")
    assert r.returncode == 0, r.stderr
    for d in kafka.log_dirs(BROKER):
        row = next(line for line in r.stdout.splitlines() if str(d) in line)
        total_gib = shutil.disk_usage(d).total / (1 << 30)
        assert "online" in row and f"{total_gib:.1f} GiB" in row, row


def test_throttle_and_remove_throttle_use_kafkas_key_and_drop_strays(kafka: KafkaCluster) -> None:
    plant_stray(kafka)
    r = cli("--bootstrap-server", kafka.bootstrap, "--throttle", "12345678")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"The replica-alter-dir throttle limit was set to 12345678 B/s on brokers {BROKER}"
    settled(kafka, lambda held: held.get(THROTTLE_KAFKA_KEY) == ("12345678", False) and THROTTLE_KEY not in held)
    # The same as Kafka's own tool reads it back.
    assert "replica.alter.log.dirs.io.max.bytes.per.second=12345678" in kafka_tool(
        kafka, "kafka-configs.sh", "--describe", "--entity-type", "brokers", "--entity-name", str(BROKER))

    plant_stray(kafka)
    r = cli("--bootstrap-server", kafka.bootstrap, "--remove-throttle")
    assert r.returncode == 0, r.stderr
    settled(kafka, lambda held: THROTTLE_KAFKA_KEY not in held and THROTTLE_KEY not in held)


def test_a_broker_refuses_another_brokers_config(kafka: KafkaCluster) -> None:
    """What the fakes copy (tests/cli/test_kafka_versions.py): the real broker refuses another broker's id."""
    with Client(kafka.bootstrap) as client:
        alter, describe = another_brokers_id_refusals(client, asked=BROKER, other=BROKER + 1)
    assert alter == (ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {BROKER}, but received {BROKER + 1}")
    assert describe[0] == ErrorCode.INVALID_REQUEST and "Unexpected broker id" in (describe[1] or "")


def test_audits_throttle_api_keeps_and_restores_a_brokers_own_value(kafka: KafkaCluster) -> None:
    """mover-audit execute: read the broker's own throttle, set the run's, put the broker's own back."""
    with Client(kafka.bootstrap) as client:
        assert not throttle.is_moverd(client, BROKER)
        throttle.set_throttle(client, [BROKER], 7_777_777)
        plant_stray(kafka)
        original = throttle.dynamic_throttle(client, BROKER)
        assert original == {THROTTLE_KAFKA_KEY: "7777777"}  # the stray is not the broker's own throttle
        throttle.set_throttle(client, [BROKER], 100_000_000)
        exactly(kafka, {THROTTLE_KAFKA_KEY: ("100000000", False)})
        throttle.restore_throttle(client, BROKER, original)
        exactly(kafka, {THROTTLE_KAFKA_KEY: ("7777777", False)})
        throttle.restore_throttle(client, BROKER, {})
        exactly(kafka, {})


def test_throttled_execute_is_observed_and_verify_prints_what_kafka_prints(kafka: KafkaCluster,
                                                                        tmp_path: Path) -> None:
    kafka.create_topic("big", partitions=1)
    fill(kafka, "big", 0, MOVE_BYTES)
    size = sum(f.stat().st_size for f in (kafka.dir_of(BROKER, "big", 0) / "big-0").glob("*.log"))  # type: ignore[operator]
    assert size >= MOVE_BYTES
    plant_stray(kafka)
    plan = reassignment(tmp_path / "r.json", {("big", 0): other_dir(kafka, "big", 0)})

    started = time.monotonic()
    r = cli("--bootstrap-server", kafka.bootstrap, "--execute", "--reassignment-json-file", str(plan),
            "--replica-alter-log-dirs-throttle", str(RATE))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[5:] == [
        "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is "
        "removed.",
        f"The replica-alter-dir throttle limit was set to {RATE} B/s",
        "Successfully started partition reassignment for big-0",
        f"Successfully started log directory move for: big-0-{BROKER}"]
    exactly(kafka, {THROTTLE_KAFKA_KEY: (str(RATE), False)})  # Kafka's key, and no stray

    # While it moves, ours and Kafka's --verify print the same.
    ours = cli("--bootstrap-server", kafka.bootstrap, "--verify", "--reassignment-json-file", str(plan))
    theirs = kafka_tool(kafka, "kafka-reassign-partitions.sh", "--verify", "--reassignment-json-file", str(plan))
    assert ours.returncode == VERIFY_IN_PROGRESS, ours.stdout + ours.stderr
    assert ours.stdout == theirs
    assert f"Reassignment of replica big-0-{BROKER} is still in progress." in ours.stdout.splitlines()

    progress = cli("--bootstrap-server", kafka.bootstrap, "--progress")
    assert progress.returncode == VERIFY_IN_PROGRESS, progress.stdout + progress.stderr
    assert f"big-0-{BROKER}" in progress.stdout

    between_swaps: list[str] = []

    def done() -> bool:
        v = cli("--bootstrap-server", kafka.bootstrap, "--verify", "--reassignment-json-file", str(plan),
                "--preserve-throttles")
        if v.returncode == 1 and "is not being moved" in v.stdout:
            # Kafka's swap has a moment where DescribeLogDirs shows the replica in its old dir and no future copy
            # (Kafka's own tool says the same then); a move that is really gone stays so.
            between_swaps.append(v.stdout)
            assert len(between_swaps) < 5, v.stdout
            return False
        between_swaps.clear()
        assert v.returncode in (VERIFY_DONE, VERIFY_IN_PROGRESS), v.stdout + v.stderr
        return v.returncode == VERIFY_DONE

    wait_for(done, timeout=300, message="the throttled move to finish", interval=0.2)
    elapsed = time.monotonic() - started
    held_back = (size - FREE_WINDOWS_S * RATE) / RATE
    print(f"moved {size} B at {RATE} B/s in {elapsed:.1f} s (at least {held_back:.1f} s expected; "
          f"size/rate {size / RATE:.1f} s)")
    assert elapsed >= held_back, f"{size} B at {RATE} B/s took only {elapsed:.1f} s: the throttle did not hold"
    exactly(kafka, {THROTTLE_KAFKA_KEY: (str(RATE), False)})  # --preserve-throttles kept it

    ours = cli("--bootstrap-server", kafka.bootstrap, "--verify", "--reassignment-json-file", str(plan))
    assert ours.returncode == VERIFY_DONE, ours.stdout + ours.stderr
    exactly(kafka, {})  # ours cleared Kafka's key (and would have any stray)
    theirs = kafka_tool(kafka, "kafka-reassign-partitions.sh", "--verify", "--reassignment-json-file", str(plan))
    assert ours.stdout == theirs
    assert ours.stdout.splitlines()[-3:] == [f"Reassignment of replica big-0-{BROKER} completed successfully.",
                                             f"Clearing broker-level throttles on broker {BROKER}",
                                             "Clearing topic-level throttles on topic big"]


def test_move_progress_and_cancel(kafka: KafkaCluster, tmp_path: Path) -> None:
    kafka.create_topic("slow", partitions=1)
    fill(kafka, "slow", 0, 12 * 200_000)
    source = kafka.dir_of(BROKER, "slow", 0)
    target = other_dir(kafka, "slow", 0)
    assert cli("--bootstrap-server", kafka.bootstrap, "--throttle", "200000").returncode == 0
    move = tmp_path / "m.json"
    move.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "slow", "partition": 0, "log_dir": str(target)}]}))
    r = cli("--bootstrap-server", kafka.bootstrap, "--move", "--broker", str(BROKER), "--assignment", str(move))
    assert r.returncode == 0, r.stderr
    assert "Successfully started moving replicas." in r.stdout.splitlines()
    assert json.loads(r.stdout.splitlines()[2]) == {"version": 1, "partitions": [
        {"topic": "slow", "partition": 0, "log_dir": str(source)}]}

    p = cli("--bootstrap-server", kafka.bootstrap, "--progress")
    assert p.returncode == VERIFY_IN_PROGRESS, p.stdout + p.stderr
    assert f"slow-0-{BROKER}" in p.stdout and str(target) in p.stdout

    plan = reassignment(tmp_path / "r.json", {("slow", 0): target})
    c = cli("--bootstrap-server", kafka.bootstrap, "--cancel", "--reassignment-json-file", str(plan))
    assert c.returncode == 0, c.stderr
    assert c.stdout.strip() == f"Cancelled the move of replica slow-0-{BROKER} to {target}; it stays in {source}"

    def settled() -> bool:
        d = json.loads(cli("--bootstrap-server", kafka.bootstrap, "--describe", "--topic-list", "slow")
                       .stdout.splitlines()[2])
        return [(x["logDir"], p["isFuture"]) for x in d["brokers"][0]["logDirs"] for p in x["partitions"]] == [
            (str(source), False)]

    wait_for(settled, message="the cancelled copy to be gone")
    # The file now names a dir the replica is not in and not moving to: the same lines as Kafka's tool.
    ours = cli("--bootstrap-server", kafka.bootstrap, "--verify", "--reassignment-json-file", str(plan))
    assert ours.returncode == 1, ours.stdout + ours.stderr
    assert ours.stdout == kafka_tool(kafka, "kafka-reassign-partitions.sh", "--verify", "--reassignment-json-file",
                                     str(plan))
    # No copy runs, so Kafka clears the throttles even though the replica is not where the file says.
    assert ours.stdout.splitlines()[-3:] == [
        f"Partition slow-0 on broker {BROKER} is not being moved from log dir {source} to {target}.",
        f"Clearing broker-level throttles on broker {BROKER}", "Clearing topic-level throttles on topic slow"]
    exactly(kafka, {})  # --verify cleared the throttle


def test_command_config_over_sasl_plaintext(kafka: KafkaCluster, tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={JAAS}\n")
    assert not ClientSecurity.from_file(config).warnings
    sasl = kafka.bootstrap_for("SASL_PLAINTEXT")
    ours = cli("--bootstrap-server", sasl, "--command-config", str(config), "--describe")
    assert ours.returncode == 0, ours.stderr
    theirs = kafka.tool("kafka-log-dirs.sh", "--bootstrap-server", sasl, "--command-config", str(config),
                        "--describe").stdout
    assert ours.stdout == theirs
    r = cli("--bootstrap-server", sasl, "--command-config", str(config), "--throttle", "3000000")
    assert r.returncode == 0, r.stderr
    exactly(kafka, {THROTTLE_KAFKA_KEY: ("3000000", False)})
    assert cli("--bootstrap-server", sasl, "--command-config", str(config), "--remove-throttle").returncode == 0
    exactly(kafka, {})

    wrong = tmp_path / "wrong.properties"
    wrong.write_text(config.read_text().replace(PASSWORD, "nope"))
    r = cli("--bootstrap-server", sasl, "--command-config", str(wrong), "--describe")
    assert r.returncode == 1 and "authentication failed" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_mover_reassign_verify_of_log_dirs_prints_what_kafka_prints(kafka: KafkaCluster, tmp_path: Path) -> None:
    """mover-reassign --verify judges the file's log_dirs as Kafka 3.7's tool does, with its lines: partitions
    sorted, then the replicas with a dir, then (nothing moving) the throttle lines; nothing between brokers moves,
    so no KIP-455 request is needed (moverd has none)."""
    kafka.create_topic("order", partitions=2)
    here = kafka.dir_of(BROKER, "order", 0)
    elsewhere = other_dir(kafka, "order", 0)
    env = {**os.environ, "MOVER_REASSIGN_STATE_DIR": str(tmp_path / "state")}

    def both(dirs: list[str]) -> tuple[subprocess.CompletedProcess[str], str]:
        plan = tmp_path / "r.json"
        # The file lists partition 1 first: both tools print the partitions sorted.
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "order", "partition": 1, "replicas": [BROKER], "log_dirs": ["any"]},
            {"topic": "order", "partition": 0, "replicas": [BROKER], "log_dirs": dirs}]}))
        ours = prefork.run([sys.executable, "-m", "mover.cli.reassign_partitions", "--bootstrap-server",
                            kafka.bootstrap, "--verify", "--reassignment-json-file", str(plan)],
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env=env)
        return ours, kafka_tool(kafka, "kafka-reassign-partitions.sh", "--verify", "--reassignment-json-file",
                                str(plan))

    ours, theirs = both([str(here)])
    assert ours.returncode == VERIFY_DONE, ours.stdout + ours.stderr
    assert ours.stdout == theirs
    assert ours.stdout.splitlines() == [
        "Status of partition reassignment:", "Reassignment of partition order-0 is completed.",
        "Reassignment of partition order-1 is completed.", f"Reassignment of replica order-0-{BROKER} completed "
        "successfully.", f"Clearing broker-level throttles on broker {BROKER}",
        "Clearing topic-level throttles on topic order"]

    ours, theirs = both([str(elsewhere)])
    assert ours.returncode == 1, ours.stdout + ours.stderr
    assert ours.stdout == theirs
    assert f"Partition order-0 on broker {BROKER} is not being moved from log dir {here} to {elsewhere}." in (
        ours.stdout.splitlines())

    ours, theirs = both(["any"])  # no dir named: Kafka's empty block, a blank line before the throttles'
    assert ours.returncode == VERIFY_DONE, ours.stdout + ours.stderr
    assert ours.stdout == theirs
    assert "" in ours.stdout.splitlines()
