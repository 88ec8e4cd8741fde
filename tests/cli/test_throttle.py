"""--throttle / --remove-throttle change the daemon's dynamic move throttle (read back with DescribeConfigs)."""

from __future__ import annotations

from pathlib import Path

from mover.admin.client import Client
from mover.storage.names import TopicPartition
from mover.testing.log_dirs_tool import cli, reassignment_file
from mover.testing.moverd import Moverd
from mover.testing.records import write_partition
from mover.testing.wait import wait_for
from mover.wire.messages import DESCRIBE_CONFIGS

KEY = "intra.broker.throttled.rate"


def throttle_of(bootstrap: str) -> tuple[str | None, int]:
    """(value, config_source) of the throttle as the broker describes it."""
    with Client(bootstrap) as c:
        reply = c.connection(0).call(DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": 4, "resource_name": "0", "configuration_keys": [KEY]}]})
    [result] = reply["results"]
    assert result["error_code"] == 0, result
    [entry] = [e for e in result["configs"] if e["name"] == KEY]
    return entry["value"], entry["config_source"]


def test_throttle_set_and_removed(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        before = throttle_of(d.bootstrap)
        r = cli("--bootstrap-server", d.bootstrap, "--throttle", "200000")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "The replica-alter-dir throttle limit was set to 200000 B/s on brokers 0"
        assert throttle_of(d.bootstrap)[0] == "200000"

        r = cli("--bootstrap-server", d.bootstrap, "--throttle", "-1", "--broker-list", "0")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "Throttle was removed on brokers 0"
        assert throttle_of(d.bootstrap) == before

        assert cli("--bootstrap-server", d.bootstrap, "--throttle", "300000").returncode == 0
        assert throttle_of(d.bootstrap)[0] == "300000"
        assert cli("--bootstrap-server", d.bootstrap, "--remove-throttle").returncode == 0
        assert throttle_of(d.bootstrap) == before

        r = cli("--bootstrap-server", d.bootstrap, "--throttle", "1000", "--broker-list", "7")
        assert r.returncode == 1 and "do not exist from --broker-list: 7" in r.stderr


def test_execute_with_throttle_and_verify_removes_it_when_done(tmp_path: Path) -> None:
    write_partition(tmp_path / "d1", TopicPartition("big", 0), 200)  # ~2 MB: 20 s at the throttle
    with Moverd(tmp_path) as d:
        default = throttle_of(d.bootstrap)
        f = reassignment_file(tmp_path / "r.json", {("big", 0): str(tmp_path / "d2")})
        r = cli("--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f),
                "--replica-alter-log-dirs-throttle", "100000")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[5:9] == [
            "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is "
            "removed.",
            "The replica-alter-dir throttle limit was set to 100000 B/s",
            "Successfully started partition reassignment for big-0",
            "Successfully started log directory move for: big-0-0"]
        assert throttle_of(d.bootstrap)[0] == "100000"

        v = cli("--bootstrap-server", d.bootstrap, "--verify", "--reassignment-json-file", str(f))
        assert v.returncode == 3 and "Clearing broker-level throttles" not in v.stdout
        assert throttle_of(d.bootstrap)[0] == "100000"  # kept while the move runs

        assert cli("--bootstrap-server", d.bootstrap, "--throttle", "1000000000").returncode == 0

        def done() -> bool:
            return cli("--bootstrap-server", d.bootstrap, "--verify", "--reassignment-json-file", str(f),
                       "--preserve-throttles").returncode == 0

        wait_for(done, message="the move to complete")
        assert throttle_of(d.bootstrap)[0] == "1000000000"  # --preserve-throttles
        v = cli("--bootstrap-server", d.bootstrap, "--verify", "--reassignment-json-file", str(f))
        assert v.returncode == 0
        # Kafka 3.x's lines: printed whenever all is done, whether a throttle was set or not.
        assert v.stdout.splitlines()[-2:] == ["Clearing broker-level throttles on broker 0",
                                              "Clearing topic-level throttles on topic big"]
        assert throttle_of(d.bootstrap) == default
