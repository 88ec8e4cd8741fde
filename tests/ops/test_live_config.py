"""Live configuration of a real moverd: edits of server.properties (as editors save them) and SIGHUP change the
running throttle, seen through DescribeConfigs over the wire; a static key's change is logged as needing a
restart; an invalid edit keeps the old values and the daemon; a value set through IncrementalAlterConfigs wins."""

from __future__ import annotations

import itertools
import os
import signal
import threading
from pathlib import Path

from mover.testing.moverd import Moverd
from mover.testing.raw import raw_call
from mover.testing.wait import wait_for
from mover.wire.messages import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS

THROTTLE = "intra.broker.throttled.rate"
KAFKA_THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"
THREADS = "num.replica.alter.log.dirs.threads"
STATIC_BROKER_CONFIG, DYNAMIC_BROKER_CONFIG = 4, 2


def describe(d: Moverd, key: str) -> dict:
    body = raw_call(d.port, DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 4, "resource_name": "0", "configuration_keys": [key]}], "include_synonyms": True})
    (res,) = body["results"]
    assert res["error_code"] == 0, res
    (config,) = res["configs"]
    return config


def value(d: Moverd, key: str) -> str:
    return describe(d, key)["value"]


def save_like_an_editor(path: Path, props: dict) -> None:
    """Write a new file beside it and rename it over the original, as vim and most editors save."""
    tmp = path.with_name(path.name + ".swp")
    tmp.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    os.replace(tmp, path)


def test_edit_changes_the_throttle_at_once(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        assert value(d, THROTTLE) == str(2**63 - 1)
        save_like_an_editor(d.config, {**d.props, THROTTLE: 123456})
        wait_for(lambda: value(d, THROTTLE) == "123456", message="the edited throttle")
        assert describe(d, THROTTLE)["config_source"] == STATIC_BROKER_CONFIG
        # Kafka's name for the same setting, written in place (truncate and write) this time; and the move threads.
        with open(d.config, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in {**d.props, KAFKA_THROTTLE: 654321, THREADS: 5}.items()))
        wait_for(lambda: value(d, KAFKA_THROTTLE) == "654321" and value(d, THREADS) == "5", message="the second edit")
        assert value(d, THROTTLE) == "654321"


def test_sighup_rereads_a_file_the_watcher_cannot_see(tmp_path: Path) -> None:
    # server.properties as a symlink into another dir (a ConfigMap, a config-management checkout): edits of the
    # target make no event beside the link, so only SIGHUP (systemctl reload) picks them up.
    real = tmp_path / "managed" / "server.properties"
    real.parent.mkdir()
    real.touch()
    d = Moverd(tmp_path)
    d.config.symlink_to(real)  # Moverd writes its configuration through the link
    with d:
        real.write_text(real.read_text() + f"{THROTTLE}=777000\n")
        assert d.proc is not None
        d.proc.send_signal(signal.SIGHUP)
        try:
            wait_for(lambda: value(d, THROTTLE) == "777000", message="the throttle after SIGHUP")
        except AssertionError:
            raise AssertionError(d.log()) from None
        assert "reload (SIGHUP): intra.broker.throttled.rate changed from (unset) to 777000; applied" in d.log()
        # SIGHUP never stops the daemon, even when nothing changed.
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: d.log().count("(SIGHUP): 0 dynamic change(s) applied") == 1, message="the second reload")
        assert d.proc.poll() is None


def test_static_key_change_is_logged_and_not_applied(tmp_path: Path) -> None:
    with Moverd(tmp_path, props={"log.segment.bytes": 1048576}) as d:
        save_like_an_editor(d.config, {**d.props, "log.segment.bytes": 2097152, THROTTLE: 5000})
        wait_for(lambda: value(d, THROTTLE) == "5000", message="the dynamic part of the edit")
        assert ("log.segment.bytes changed from 1048576 to 2097152; it is static: the running value stays until "
                "moverd restarts") in d.log()
        assert value(d, "log.segment.bytes") == "1048576"


def test_invalid_edit_keeps_the_old_values_and_the_daemon(tmp_path: Path) -> None:
    with Moverd(tmp_path, props={THROTTLE: 5000}) as d:
        save_like_an_editor(d.config, {**d.props, THROTTLE: "fast", THREADS: 7})
        wait_for(lambda: "invalid value for intra.broker.throttled.rate: 'fast' is not an integer; keeping the "
                         "running configuration" in d.log(), message="the rejected edit to be logged")
        assert d.proc is not None and d.proc.poll() is None
        # All or nothing: the valid key of the rejected edit did not apply either.
        assert (value(d, THROTTLE), value(d, THREADS)) == ("5000", "2")
        save_like_an_editor(d.config, {**d.props, THROTTLE: 6000})  # the operator fixes the file
        wait_for(lambda: value(d, THROTTLE) == "6000", message="the corrected edit")


def test_value_set_at_run_time_wins_over_the_file(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        def alter(op: int, v: str | None) -> None:
            body = raw_call(d.port, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
                "resource_type": 4, "resource_name": "0",
                "configs": [{"name": THROTTLE, "config_operation": op, "value": v}]}], "validate_only": False})
            assert body["responses"][0]["error_code"] == 0, body

        alter(0, "777")  # SET
        save_like_an_editor(d.config, {**d.props, THROTTLE: 999})
        wait_for(lambda: "takes precedence" in d.log(), message="the reload to be logged")
        got = describe(d, THROTTLE)
        assert (got["value"], got["config_source"]) == ("777", DYNAMIC_BROKER_CONFIG)
        assert ("999", STATIC_BROKER_CONFIG) in [(s["value"], s["source"]) for s in got["synonyms"]]
        alter(1, None)  # DELETE: the file's value is the effective one again
        assert (value(d, THROTTLE), describe(d, THROTTLE)["config_source"]) == ("999", STATIC_BROKER_CONFIG)


def test_clean_stop_logs_no_error_while_files_are_renamed_out_of_its_dir(tmp_path: Path) -> None:
    """Files renamed out of the watched dir while moverd stops (watchdog holds each IN_MOVED_FROM for 0.5 s to pair
    it): the stop logs no ERROR (watchdog's `queue_events() called when the thread is inactive`)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "broker").mkdir()
    done = threading.Event()

    def rotate(d: Moverd) -> None:
        for i in itertools.count():
            if done.is_set():
                return
            (d.config.parent / "rotated.log").write_text("x")
            os.replace(d.config.parent / "rotated.log", elsewhere / f"rotated.{i}.log")

    with Moverd(tmp_path / "broker") as d:
        renamer = threading.Thread(target=rotate, args=(d,))
        renamer.start()
        try:
            wait_for(lambda: len(os.listdir(elsewhere)) > 100, message="renames under way")
            assert d.stop() == 0
        finally:
            done.set()
            renamer.join()
    log = d.log_file.read_text(errors="replace")
    assert "moverd ready" in log
    assert [line for line in log.splitlines() if " ERROR " in line or "Traceback" in line] == []
