"""User errors: one line on stderr, a non-zero exit code, never a traceback; usage errors exit 2."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mover.admin.common import exception_class_name, some
from mover.testing.log_dirs_tool import cli, create_topics
from mover.testing.moverd import REPO


def one_line_error(r, code: int) -> str:  # noqa: ANN001
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert lines[0].startswith("mover-log-dirs: ")
    return lines[0]


@pytest.mark.parametrize(("args", "needle"), [
    ((), "one of --describe"),
    (("--describe",), "--bootstrap-server is required"),
    (("--zookeeper", "zk:2181", "--progress"), "--progress needs --bootstrap-server"),
    (("--zookeeper", "zk:2181", "--bootstrap-server", "h:1", "--describe"), "cannot be used together"),
    (("--bootstrap-server", "h:1", "--describe", "--verify"), "not allowed with"),
    (("--bootstrap-server", "h:1", "--execute"), "--execute needs --reassignment-json-file"),
    (("--bootstrap-server", "h:1", "--move", "--assignment", "f"), "--move needs --broker"),
    (("--bootstrap-server", "h:1", "--throttle", "abc"), "expected bytes per second"),
    (("--bootstrap-server", "h:1", "--throttle", "0"), "expected a positive number"),
    # Kafka's throttle is a long: a larger value is refused by every broker, after the run started.
    (("--bootstrap-server", "h:1", "--throttle", str(2**63)), "a Java long) or -1 for none, got"),
    (("--bootstrap-server", "h:1", "--execute", "--reassignment-json-file", "f", "--replica-alter-log-dirs-throttle",
      str(2**70)), "expected bytes per second (1 to 9223372036854775807, a Java long), got '1180591620717411303424'"),
    (("--bootstrap-server", "h:1", "--replica-alter-log-dirs-throttle", "-1", "--execute"), "a positive number"),
    (("--bootstrap-server", "h:1", "--describe", "--broker-list", "1,x"), "comma-separated broker ids"),
    (("--bootstrap-server", "h:1", "--progress", "--request", "-3"), "non-negative integer"),
    (("--bootstrap-server", "h:1", "--describe", "--request", "3"), "--request cannot be used with --describe"),
    (("--bootstrap-server", "h:1", "--verify", "--reassignment-json-file", "f", "--watch"), "--watch cannot"),
    (("--bootstrap-server", "h:1", "--describe", "--output", "xml"), "invalid choice"),
    (("--bootstrap-server", "h:1", "--describe", "--bogus"), "unrecognized arguments"),
])
def test_usage_errors_exit_2_with_one_line(args: tuple[str, ...], needle: str) -> None:
    assert needle in one_line_error(cli(*args), 2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_broker_is_one_line_and_exit_1() -> None:
    r = cli("--bootstrap-server", f"127.0.0.1:{free_port()}", "--describe")
    line = one_line_error(r, 1)
    assert "cannot connect to broker" in line
    assert r.stdout == ""


def test_bad_bootstrap_address() -> None:
    assert "HOST:PORT" in one_line_error(cli("--bootstrap-server", "nohost", "--describe"), 1)


@pytest.mark.parametrize(("content", "needle"), [
    ("{not json", "is not valid JSON"),
    ("[]", '"partitions" array'),
    ('{"version":2,"partitions":[]}', "unsupported version"),
    ('{"version":1,"partitions":[]}', "names no partitions"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[0],"log_dirs":["d2"]}]}', "absolute path"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[0],"log_dirs":["/a","/b"]}]}', "Size of replicas"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[0,0]}]}', "duplicate entries"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[0]},{"topic":"t","partition":0,"replicas":[0]}]}',
     "duplicate topic partitions"),
    ('{"partitions":[{"topic":"t","partition":"0","replicas":[0]}]}', '"partition"'),
    # Python's parser would recurse past the interpreter's limit (an "internal error" line before).
    ("[" * 100_000, "is not valid JSON: nested deeper than 512 levels"),
    (b'{"partitions": "\xff"}', "is not valid JSON: not UTF-8 (byte 0xff at offset 16)"),
])
def test_malformed_reassignment_files_fail_before_any_broker_is_asked(tmp_path: Path, content: str | bytes,
                                                                     needle: str) -> None:
    f = tmp_path / "r.json"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    # Nothing listens on the port: the file is checked first, so the error is about the file.
    r = cli("--bootstrap-server", f"127.0.0.1:{free_port()}", "--execute", "--reassignment-json-file", str(f))
    assert needle in one_line_error(r, 1)


def test_missing_file(tmp_path: Path) -> None:
    r = cli("--bootstrap-server", "127.0.0.1:1", "--verify", "--reassignment-json-file", str(tmp_path / "nope"))
    assert "cannot read" in one_line_error(r, 1)


def test_move_file_needs_a_log_dir(tmp_path: Path) -> None:
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"version": 1, "partitions": [{"topic": "t", "partition": 0, "log_dir": "any"}]}))
    r = cli("--bootstrap-server", "127.0.0.1:1", "--move", "--broker", "0", "--assignment", str(f))
    assert "needs a log dir" in one_line_error(r, 1)


def test_module_entry_point_and_help() -> None:
    r = subprocess.run([sys.executable, "-m", "mover.cli.log_dirs", "--help"], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    for option in ("--describe", "--execute", "--verify", "--progress", "--cancel", "--throttle", "--watch"):
        assert option in r.stdout


def test_exception_class_names_are_kafkas() -> None:
    assert exception_class_name(56) == "org.apache.kafka.common.errors.KafkaStorageException"
    assert exception_class_name(57) == "org.apache.kafka.common.errors.LogDirNotFoundException"
    assert exception_class_name(-1) == "org.apache.kafka.common.errors.UnknownServerException"
    assert exception_class_name(42) == "org.apache.kafka.common.errors.InvalidRequestException"


@pytest.mark.parametrize("prog", ["mover-log-dirs", "mover-reassign"])
def test_unreachable_zookeeper_is_the_warning_and_one_line(prog: str, capfd: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """kazoo's own warning for each refused attempt does not reach stderr (no logging is configured, as in the
    console scripts): the deprecation warning, then the one error line."""
    import logging

    from mover.admin import zookeeper
    from mover.cli import log_dirs, reassign_partitions

    monkeypatch.setattr(zookeeper, "CONNECT_TIMEOUT_S", 1.5)
    # As in a console script: no handler anywhere, so a record with none of its own goes to the last resort.
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    address = f"127.0.0.1:{free_port()}"
    main = {"mover-log-dirs": log_dirs.main, "mover-reassign": reassign_partitions.main}[prog]
    args = ["--describe"] if prog == "mover-log-dirs" else ["--list"]
    assert main(["--zookeeper", address, *args]) == 1
    out, err = capfd.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("Warning: --zookeeper is deprecated")
    assert lines[1] == f"{prog}: error: cannot connect to ZooKeeper at {address} within 1.5 s"
    assert out == ""


@pytest.mark.parametrize("option", ["--throttle", "--replica-alter-log-dirs-throttle"])
def test_mover_reassign_refuses_a_throttle_kafka_refuses(option: str, reassign_cli) -> None:  # noqa: ANN001
    rc, out, err = reassign_cli(["--bootstrap-server", "127.0.0.1:1", "--execute", "--reassignment-json-file", "f",
                                 option, str(2**63)])
    assert rc == 2 and out == ""
    assert err.strip() == (f"mover-reassign: error: argument {option}: expected bytes per second (1 to "
                           f"9223372036854775807, a Java long), got '9223372036854775808' (see --help)")


def test_some_names_the_first_ten_and_a_count() -> None:
    assert some([]) == "" and some(range(3), ",") == "0,1,2"
    assert some(range(10)) == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9"
    assert some(f"t-{p}" for p in range(200_000)) == \
        "t-0, t-1, t-2, t-3, t-4, t-5, t-6, t-7, t-8, t-9 and 199,990 more (200,000 in all)"


def test_a_file_of_200000_unknown_partitions_is_one_short_line(tmp_path: Path, moverd, reassign_cli) -> None:  # noqa: ANN001
    # The line named every partition: 2.4 MB on stderr.
    d = moverd()
    create_topics(d.bootstrap, {"t": 1})
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": p, "replicas": [0]} for p in range(1, 200_001)]}))
    line = one_line_error(cli("--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f)), 1)
    assert line == ("mover-log-dirs: error: The proposed assignment contains non-existent partitions: t-1, t-2, t-3, "
                    "t-4, t-5, t-6, t-7, t-8, t-9, t-10 and 199,990 more (200,000 in all)")
    rc, out, err = reassign_cli(["--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f)])
    assert (rc, out) == (1, "")
    assert err == ("mover-reassign: error: Unable to find partition: t-1, t-2, t-3, t-4, t-5, t-6, t-7, t-8, t-9, "
                   "t-10 and 199,990 more (200,000 in all)\n")
