"""--describe against a real moverd: kafka-log-dirs.sh's output, checked against the daemon's dirs on disk."""

from __future__ import annotations

from pathlib import Path

from mover.storage.names import TopicPartition
from mover.testing.log_dirs_tool import cli, describe_json
from mover.testing.moverd import Moverd
from mover.testing.records import write_partition


def test_describe_json_matches_the_daemons_state(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    size_a0 = write_partition(d1, TopicPartition("a", 0), 3).size
    size_a1 = write_partition(d2, TopicPartition("a", 1), 5).size
    size_b0 = write_partition(d2, TopicPartition("b", 0), 1).size
    with Moverd(tmp_path) as d:
        r = cli("--bootstrap-server", d.bootstrap, "--describe")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[:2] == ["Querying brokers for log directories information",
                             "Received log directory information from brokers 0"]
        got = describe_json(d.bootstrap)
        assert got["version"] == 1
        [broker] = got["brokers"]
        assert broker["broker"] == 0
        dirs = {x["logDir"]: x for x in broker["logDirs"]}
        assert set(dirs) == {str(d1), str(d2)}
        assert all(x["error"] is None for x in dirs.values())

        def parts(d: Path) -> dict[str, tuple[int, int, bool]]:
            return {p["partition"]: (p["size"], p["offsetLag"], p["isFuture"]) for p in dirs[str(d)]["partitions"]}

        assert parts(d1) == {"a-0": (size_a0, 0, False)}
        assert parts(d2) == {"a-1": (size_a1, 0, False), "b-0": (size_b0, 0, False)}
        # Sizes are what is on disk.
        assert size_a1 == sum(f.stat().st_size for f in (d2 / "a-1").glob("*.log"))

        only_b = describe_json(d.bootstrap, "--topic-list", "b")
        assert [p["partition"] for x in only_b["brokers"][0]["logDirs"] for p in x["partitions"]] == ["b-0"]
        # The JSON is compact, as Kafka's Json.encodeAsString writes it.
        assert ", " not in lines[2] and '": ' not in lines[2]

        assert describe_json(d.bootstrap, "--broker-list", "0")["brokers"][0]["broker"] == 0


def test_describe_unknown_broker_in_broker_list(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        r = cli("--bootstrap-server", d.bootstrap, "--describe", "--broker-list", "0,5")
        assert r.returncode == 1
        assert r.stderr.strip().endswith("The given brokers do not exist from --broker-list: 5. "
                                         "Current existent brokers: 0")


def test_describe_offline_dir_reports_kafkas_exception_class(tmp_path: Path) -> None:
    d1 = tmp_path / "d1"
    write_partition(d1, TopicPartition("a", 0), 1)
    # A file where a log dir should be: the daemon cannot use it and marks it offline.
    (tmp_path / "d2").write_text("not a directory")
    with Moverd(tmp_path) as d:
        got = describe_json(d.bootstrap)
        dirs = {x["logDir"]: x for x in got["brokers"][0]["logDirs"]}
        assert dirs[str(tmp_path / "d2")]["error"] == "org.apache.kafka.common.errors.KafkaStorageException"
        assert dirs[str(tmp_path / "d2")]["partitions"] == []
        assert dirs[str(d1)]["error"] is None


def log_dir_cells(table: str) -> str:
    """The table's log-dir column, its lines joined in order."""
    return "".join(line.split("│")[2].strip() for line in table.splitlines() if line.count("│") > 3)


def test_describe_table(tmp_path: Path) -> None:
    write_partition(tmp_path / "d1", TopicPartition("a", 0), 2)
    with Moverd(tmp_path) as d:
        r = cli("--bootstrap-server", d.bootstrap, "--describe", "--output", "table")
        assert r.returncode == 0, r.stderr
        # A long temp path is folded over lines of its cell: its pieces, read in order, give it back whole.
        assert str(tmp_path / "d1") in log_dir_cells(r.stdout) and str(tmp_path / "d2") in log_dir_cells(r.stdout)
        for heading in ("Log dir", "Total", "Usable", "Used", "Partitions"):
            assert heading in r.stdout
        rows = [line for line in r.stdout.splitlines() if "online" in line]
        assert len(rows) == 2 and all("%" in row for row in rows), r.stdout


def test_describe_table_never_cuts_a_long_log_dir_path(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    dirs = [deep / "d1", deep / "d2"]
    with Moverd(tmp_path, dirs=dirs) as d:
        r = cli("--bootstrap-server", d.bootstrap, "--describe", "--output", "table")
        assert r.returncode == 0, r.stderr
        assert "…" not in r.stdout
        # The path is folded over several lines of its cell: its pieces, read in order, give it back whole.
        assert str(dirs[0]) in log_dir_cells(r.stdout) and str(dirs[1]) in log_dir_cells(r.stdout)
