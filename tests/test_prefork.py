"""The harness's zygote (mover/testing/prefork.py): a forked start is the process the console script or `python -m`
would have started, as far as a test can see: argv, environment, directory, stdio, exit status, signals, its own
descriptors, and the crash points read from the environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mover.testing import prefork
from mover.testing.moverd import MOVERD_SCRIPT, Moverd
from mover.testing.wait import wait_for

pytestmark = pytest.mark.skipif(not prefork.enabled(), reason="prefork is off (MOVER_TEST_PREFORK=0 or no pidfd)")
LOG_DIRS = str(Path(sys.executable).with_name("mover-log-dirs"))


def test_a_console_script_answers_as_its_own_process_does(tmp_path: Path) -> None:
    """The same exit status, stdout and stderr as the console script started by exec, for a refusal, a usage text
    (argparse reads COLUMNS from the child's environment) and an error."""
    (tmp_path / "bad.properties").write_text("log.retention.ms=soon\n")
    env = os.environ | {"COLUMNS": "50"}
    for argv in ([LOG_DIRS, "--bootstrap-server", "127.0.0.1:1", "--describe"], [LOG_DIRS, "--help"],
                 [LOG_DIRS, "--describe"],
                 [sys.executable, "-m", "mover.cli.reassign_partitions", "--bootstrap-server", "127.0.0.1:1", "--list"],
                 [str(MOVERD_SCRIPT), "--config", "bad.properties"],
                 [sys.executable, "-m", "mover.daemon", "--config", "bad.properties"]):
        forked = prefork.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        execd = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
                               stdin=subprocess.DEVNULL)
        assert (forked.returncode, forked.stdout, forked.stderr) == (execd.returncode, execd.stdout, execd.stderr)
    assert forked.returncode == 2
    assert forked.stderr.strip() == "moverd: invalid value for log.retention.ms: 'soon' is not an integer"


def test_a_forked_moverd_is_a_process_of_its_own(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        assert isinstance(d.proc, prefork.ForkedProcess)
        pid = d.proc.pid
        assert pid not in (os.getpid(), os.getppid())
        # Only what moverd opened itself, as a moverd started by exec has: none of the zygote's sockets or pipes.
        (tmp_path / "execd").mkdir()
        with Moverd(tmp_path / "execd", prefix=("env",)) as execd:
            assert isinstance(execd.proc, subprocess.Popen)
            assert _descriptor_kinds(pid) == _descriptor_kinds(execd.proc.pid)
        assert Path(os.readlink(f"/proc/{pid}/cwd")) == Path(__file__).resolve().parents[1]
        d.proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T",
                 message="the child to stop")
        d.proc.send_signal(signal.SIGCONT)
        assert d.proc.poll() is None
        d.kill()
    assert d.proc is None
    with Moverd(tmp_path) as again:
        assert again.stop() == 0  # SIGTERM: moverd's own clean exit


def _descriptor_kinds(pid: int) -> list[str]:
    kinds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    return sorted(k.split("[")[0] if "[" in k else "file" for k in kinds)


def test_the_crash_points_come_from_each_childs_environment(tmp_path: Path) -> None:
    """mover/faults.py reads MOVERD_CRASH_AT when imported: the zygote imported it without one, the child must
    still crash where its own environment says."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    d = Moverd(tmp_path, env={"MOVERD_CRASH_AT": "delete.rename"})
    with d:
        admin = KafkaAdminClient(bootstrap_servers=d.bootstrap, client_id="prefork-test")
        try:
            admin.create_topics([NewTopic("t", 1, 1)], timeout_ms=10000)
            try:
                admin.delete_topics(["t"], timeout_ms=5000)
            except Exception:  # noqa: BLE001 (the broker dies under the request: any client error will do)
                pass
        finally:
            admin.close()
        assert d.proc is not None
        assert d.proc.wait(60) == -signal.SIGKILL, d.log()
        d.proc = None


def test_pipes_in_both_directions_and_a_timeout(tmp_path: Path) -> None:
    proc = prefork.Popen([str(MOVERD_SCRIPT), "--add-scram-user", "u", "--config", "missing.properties"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         cwd=tmp_path)
    assert isinstance(proc, prefork.ForkedProcess)
    out, err = proc.communicate(60)
    assert err is None and proc.returncode != 0 and "missing.properties" in out, out
    sleeper = prefork.Popen([sys.executable, "-m", "mover.testing.driver", "--config", str(tmp_path / "none")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert isinstance(sleeper, prefork.ForkedProcess)
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(0.01)
    sleeper.kill()
    assert sleeper.wait(60) in (-signal.SIGKILL, 1, 2)


def test_any_other_command_is_left_to_subprocess() -> None:
    proc = prefork.Popen([sys.executable, "-c", "print(1)"], stdout=subprocess.PIPE)
    assert isinstance(proc, subprocess.Popen)
    assert proc.communicate(60)[0] == b"1\n"
