"""Dynamic broker configs through ZooKeeper, written exactly as kafka-configs.sh --zookeeper writes them
(AdminZkClient.changeBrokerConfig: /config/brokers/<id|<default>> then a config_change_ notification), and
IncrementalAlterConfigs writing the same znodes."""

from __future__ import annotations

import json
from pathlib import Path

from kazoo.client import KazooClient

from mover.testing.moverd import Moverd
from mover.testing.raw import raw_call
from mover.testing.wait import wait_for
from mover.testing.zk_cluster import moverd_cluster, new_chroot, read_json, zk_client
from mover.testing.zookeeper import ZooKeeperServer
from mover.wire.messages import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS

THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"
UNLIMITED = str(2**63 - 1)
DEEP = b'{"version":1,"partitions":' + b"[" * 200_000 + b"]" * 200_000 + b"}"


def _kafka_configs(zk: KazooClient, entity: str, config: dict[str, str], notification_version: int = 2) -> None:
    """kafka-configs.sh --zookeeper ... --entity-type brokers --entity-name <entity> --alter --add-config."""
    data = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
    path = f"/config/brokers/{entity}"
    if zk.exists(path):
        zk.set(path, data)
    else:
        zk.create(path, data, makepath=True)
    if notification_version == 2:
        note = json.dumps({"version": 2, "entity_path": f"brokers/{entity}"}, separators=(",", ":"))
    else:
        note = json.dumps({"version": 1, "entity_type": "brokers", "entity_name": entity}, separators=(",", ":"))
    zk.create("/config/changes/config_change_", note.encode(), sequence=True, makepath=True)


def _throttle(d: Moverd) -> tuple[str, int]:
    body = raw_call(d.port, DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 4, "resource_name": str(0), "configuration_keys": [THROTTLE]}], "include_synonyms": False})
    c = body["results"][0]["configs"][0]
    return c["value"], c["config_source"]


def test_per_broker_wins_over_default_and_removal_falls_back(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    with moverd_cluster(tmp_path, connect, 1) as (b,), zk_client(connect) as zk:
        _kafka_configs(zk, "<default>", {THROTTLE: "2000000"})
        wait_for(lambda: _throttle(b) == ("2000000", 3), message="the default applied (DYNAMIC_DEFAULT_BROKER_CONFIG)")
        _kafka_configs(zk, "0", {THROTTLE: "1000000"}, notification_version=1)
        wait_for(lambda: _throttle(b) == ("1000000", 2), message="the per-broker value wins (DYNAMIC_BROKER_CONFIG)")
        _kafka_configs(zk, "0", {})
        wait_for(lambda: _throttle(b) == ("2000000", 3), message="removal falls back to the default")
        _kafka_configs(zk, "<default>", {})
        wait_for(lambda: _throttle(b)[0] == UNLIMITED, message="back to server.properties' value")
        # A notification for another broker changes nothing here.
        _kafka_configs(zk, "7", {THROTTLE: "5"})
        _kafka_configs(zk, "<default>", {THROTTLE: "3000000"})
        wait_for(lambda: _throttle(b) == ("3000000", 3), message="later notifications still processed")


def test_config_written_while_down_is_applied_at_start(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    with zk_client(connect) as zk:
        _kafka_configs(zk, "0", {THROTTLE: "4000000", "log.cleaner.threads": "2"})
        with moverd_cluster(tmp_path, connect, 1) as (b,):
            assert _throttle(b) == ("4000000", 2)


def test_incremental_alter_configs_writes_the_znodes(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    with zk_client(connect) as zk:
        # Keys moverd does not own (a real broker's settings) must survive its writes.
        _kafka_configs(zk, "0", {"log.cleaner.threads": "2"})
        with moverd_cluster(tmp_path, connect, 1) as (b,):
            body = raw_call(b.port, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
                "resource_type": 4, "resource_name": "0",
                "configs": [{"name": THROTTLE, "config_operation": 0, "value": "6000000"}]}], "validate_only": False})
            assert body["responses"][0]["error_code"] == 0
            wait_for(lambda: read_json(zk, "/config/brokers/0") == {
                "version": 1, "config": {"log.cleaner.threads": "2", THROTTLE: "6000000"}}, message="the znode written")
            changes = zk.get_children("/config/changes")
            notes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in changes]
            assert {"version": 2, "entity_path": "brokers/0"} in notes
            # Applied at once, and not undone by a read of the znode from before the write (a change not yet
            # written is newer than ZooKeeper's value).
            wait_for(lambda: _throttle(b) == ("6000000", 2), message="the broker to run at the value it wrote")
            body = raw_call(b.port, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
                "resource_type": 4, "resource_name": "",
                "configs": [{"name": THROTTLE, "config_operation": 0, "value": "7000000"}]}], "validate_only": False})
            assert body["responses"][0]["error_code"] == 0
            wait_for(lambda: read_json(zk, "/config/brokers/<default>") == {
                "version": 1, "config": {THROTTLE: "7000000"}}, message="the default written")


def test_malformed_config_znodes_are_ignored(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    with moverd_cluster(tmp_path, connect, 1) as (b,), zk_client(connect) as zk:
        zk.create("/config/brokers/0", b"{not json", makepath=True)
        zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"brokers/0"}', sequence=True,
                  makepath=True)
        zk.create("/config/changes/config_change_", b"garbage", sequence=True)
        zk.create("/config/changes/config_change_", b'{"version":3}', sequence=True)
        # Nested 200,000 deep, as a notification and as a config: ignored with one line each, no traceback.
        zk.create("/config/changes/config_change_", DEEP, sequence=True)
        zk.create("/config/brokers/<default>", DEEP)
        zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"brokers/<default>"}',
                  sequence=True)
        wait_for(lambda: len(_deep_lines(b)) >= 2, message="both deeply nested znodes read")
        _kafka_configs(zk, "<default>", {THROTTLE: "not a number"})
        _kafka_configs(zk, "<default>", {THROTTLE: "8000000"})
        wait_for(lambda: _throttle(b) == ("8000000", 3), message="a valid change after malformed ones applied")
        assert b.proc is not None and b.proc.poll() is None
        log = b.log_file.read_text(errors="replace")
        assert "ignoring config notification" in log
        assert "Traceback" not in log and "RecursionError" not in log
        assert len(_deep_lines(b)) == 2, log[-3000:]


def _deep_lines(d: Moverd) -> list[str]:
    return [line for line in d.log_file.read_text(errors="replace").splitlines() if "nested deeper than" in line]


def test_cordon_through_zookeeper(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """cordoned.log.dirs (KIP-1066) set with kafka-configs.sh --zookeeper on /config/brokers/0 cordons the dir live
    (DescribeLogDirs v5); on <default> it is ignored (a per-broker key); removed, the cordon is lifted."""
    from mover.wire.messages import DESCRIBE_LOG_DIRS

    def cordoned(b: Moverd) -> list[str]:
        body = raw_call(b.port, DESCRIBE_LOG_DIRS, 5, {"topics": []})
        return [r["log_dir"] for r in body["results"] if r["is_cordoned"]]

    connect = new_chroot(zookeeper)
    with moverd_cluster(tmp_path, connect, 1) as (b,), zk_client(connect) as zk:
        second = str(b.dirs[1])
        _kafka_configs(zk, "<default>", {"cordoned.log.dirs": "*"})
        _kafka_configs(zk, "0", {"cordoned.log.dirs": second})
        wait_for(lambda: cordoned(b) == [second], message="the per-broker cordon applied")
        assert "ignoring cordoned.log.dirs='*' from" in b.log()
        _kafka_configs(zk, "0", {})
        wait_for(lambda: cordoned(b) == [], message="the cordon lifted")
