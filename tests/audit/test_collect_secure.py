"""mover-audit against a real moverd behind SASL_SSL: collect --command-config writes a snapshot (locally and inside
Spark tasks), a fleet file names a client config per cluster, a refused cluster is a failed row while the rest go on,
and execute carries a plan out over the secured listener."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mover.admin.reassign.status_log import TOPIC
from mover.audit.cli import build_parser, main
from mover.audit.collect import collect_spark
from mover.audit.execute import run as execute_run
from mover.audit.fleet import ClusterSource, discover
from mover.audit.snapshot import list_snapshots
from mover.security.client_config import ClientSecurity
from mover.testing.batches import make_batch
from mover.testing.certs import Pki
from mover.testing.execute_plan import write_plan
from mover.testing.log_dirs_tool import create_topics
from mover.testing.raw import RawClient, produce
from tests.security.helpers import SCRAM_JAAS, SecureBroker, add_scram_user


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureBroker]:
    b = SecureBroker(tmp_path_factory.mktemp("broker"), pki, pki.issue("localhost", server=True))
    b.start()
    try:
        add_scram_user(b, "audit", "audit-secret", "SCRAM-SHA-256")
        create_topics(b.address("PLAINTEXT"), {"a": 2})
        with RawClient(b.ports["PLAINTEXT"]) as c:
            for p in range(2):
                produce(c, "a", p, make_batch([b"y" * 500] * 20))
        yield b
    finally:
        b.stop()


def client_config(path: Path, pki: Pki, *, password: str = "audit-secret") -> Path:
    path.write_text("security.protocol=SASL_SSL\n"
                    "sasl.mechanism=SCRAM-SHA-256\n"
                    f"sasl.jaas.config={SCRAM_JAAS.format('audit', password)}\n"
                    f"ssl.truststore.location={pki.ca_file}\n"
                    "ssl.truststore.type=PEM\n")
    return path


def rows(snapshot: Path, name: str) -> list[dict[str, Any]]:
    return sorted(pq.read_table(snapshot / name).to_pylist(), key=lambda r: json.dumps(r, default=str))


def only_snapshot(root: Path) -> Path:
    [snap] = list_snapshots(root)
    return snap


def test_collect_over_sasl_ssl_writes_a_snapshot(secure: SecureBroker, pki: Pki, tmp_path: Path) -> None:
    config = client_config(tmp_path / "client.properties", pki)
    assert main(["collect", "--local", "--bootstrap-server", secure.address("SASL_SSL"), "--command-config",
                 str(config), "--cluster", "secure", "--out", str(tmp_path / "snap")]) == 0
    snap = only_snapshot(tmp_path / "snap")
    [broker] = rows(snap, "brokers")
    assert broker["error"] is None and broker["port"] == secure.ports["SASL_SSL"], broker
    replicas = rows(snap, "replicas")
    assert sorted((r["topic"], r["partition"]) for r in replicas) == [("a", 0), ("a", 1)]
    assert all(r["size_bytes"] > 10_000 for r in replicas)
    assert len(rows(snap, "log_dirs")) == 2


def test_fleet_file_names_a_client_config_per_cluster(secure: SecureBroker, pki: Pki, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    client_config(tmp_path / "secure.properties", pki)
    client_config(tmp_path / "wrong.properties", pki, password="not-it")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[clusters.secure]\nbootstrap = "{secure.address("SASL_SSL")}"\n'
                     'command_config = "secure.properties"\n'
                     f'[clusters.plain]\nbootstrap = "{secure.address("PLAINTEXT")}"\n'
                     f'[clusters.wrong]\nbootstrap = "{secure.address("SASL_SSL")}"\n'
                     'command_config = "wrong.properties"\n')
    assert main(["collect", "--local", "--fleet", str(fleet), "--out", str(tmp_path / "snap")]) == 0
    snap = only_snapshot(tmp_path / "snap")
    brokers = {b["cluster"]: b for b in rows(snap, "brokers")}
    assert brokers["secure"]["error"] is None and brokers["secure"]["port"] == secure.ports["SASL_SSL"]
    assert brokers["plain"]["error"] is None and brokers["plain"]["port"] == secure.ports["PLAINTEXT"]
    assert brokers["wrong"]["broker"] is None
    assert "authentication failed: broker" in brokers["wrong"]["error"], brokers["wrong"]
    assert sorted(r["cluster"] for r in rows(snap, "replicas")) == ["plain", "plain", "secure", "secure"]
    assert "not-it" not in capsys.readouterr().out


def test_command_config_is_the_default_for_fleet_clusters_naming_none(secure: SecureBroker, pki: Pki,
                                                                       tmp_path: Path) -> None:
    config = client_config(tmp_path / "client.properties", pki)
    (tmp_path / "plain.properties").write_text("security.protocol=PLAINTEXT\n")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[clusters.x]\nbootstrap = "{secure.address("SASL_SSL")}"\n'
                     f'[clusters.y]\nbootstrap = "{secure.address("PLAINTEXT")}"\n'
                     'command_config = "plain.properties"\n')
    assert main(["collect", "--local", "--fleet", str(fleet), "--command-config", str(config), "--out",
                 str(tmp_path / "snap")]) == 0
    brokers = {b["cluster"]: b for b in rows(only_snapshot(tmp_path / "snap"), "brokers")}
    assert brokers["x"]["error"] is None and brokers["x"]["port"] == secure.ports["SASL_SSL"], brokers["x"]
    assert brokers["y"]["error"] is None and brokers["y"]["port"] == secure.ports["PLAINTEXT"], brokers["y"]


def test_bad_client_config_in_a_fleet_names_the_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.properties").write_text("security.protocol=SASL_SSL\n")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[clusters.east]\nbootstrap = "127.0.0.1:1"\ncommand_config = "bad.properties"\n')
    assert main(["collect", "--local", "--fleet", str(fleet), "--out", str(tmp_path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "cluster 'east'" in line and "bad.properties" in line and "sasl.mechanism is not set" in line, line
    assert not list_snapshots(tmp_path)


def test_execute_over_sasl_ssl(secure: SecureBroker, pki: Pki, tmp_path: Path) -> None:
    config = client_config(tmp_path / "client.properties", pki)
    assert main(["collect", "--local", "--bootstrap-server", secure.address("SASL_SSL"), "--command-config",
                 str(config), "--cluster", "east", "--out", str(tmp_path / "snap")]) == 0
    [replica] = [r for r in rows(only_snapshot(tmp_path / "snap"), "replicas")
                 if (r["topic"], r["partition"]) == ("a", 0)]
    to_dir = next(str(d) for d in secure.d.dirs if str(d) != replica["log_dir"])
    plan = write_plan(tmp_path / "plan", [{
        "cluster": "east", "broker": 0, "topic": "a", "partition": 0, "from_dir": replica["log_dir"],
        "to_dir": to_dir, "size_bytes": replica["size_bytes"], "step": 0}])
    argv = ["execute", "--plan", str(plan), "--bootstrap-server", secure.address("SASL_SSL"), "--command-config",
            str(config), "--cluster", "east", "--poll-interval", "0.05"]
    parser, _ = build_parser(argv)
    out = io.StringIO()
    assert execute_run(parser.parse_args(argv), out) == 0, out.getvalue()
    assert main(["collect", "--local", "--bootstrap-server", secure.address("SASL_SSL"), "--command-config",
                 str(config), "--cluster", "east", "--out", str(tmp_path / "after")]) == 0
    [moved] = [r for r in rows(only_snapshot(tmp_path / "after"), "replicas")
               if (r["topic"], r["partition"]) == ("a", 0)]
    assert moved["log_dir"] == to_dir and not moved["is_future"]


@pytest.fixture(scope="module")
def spark_session() -> Any:
    from mover.audit.spark import session

    return session("local[2]", 2)


def test_collect_in_spark_tasks_over_sasl_ssl(secure: SecureBroker, pki: Pki, tmp_path: Path,
                                              spark_session: Any) -> None:
    """The client settings travel to the Spark tasks with the brokers they query (pickled), and each task builds its
    own TLS context from the same files."""
    security = ClientSecurity.from_file(client_config(tmp_path / "client.properties", pki))
    views = [discover(ClusterSource("secure", bootstrap=secure.address("SASL_SSL"), security=security))]
    snap = collect_spark(spark_session, views, tmp_path / "snap", parallelism=2)
    [broker] = rows(snap, "brokers")
    assert broker["error"] is None, broker
    # Less the tools' status topic, which execute creates when it first records a throttle (an earlier test's).
    assert sorted((r["topic"], r["partition"]) for r in rows(snap, "replicas") if r["topic"] != TOPIC) == [
        ("a", 0), ("a", 1)]
