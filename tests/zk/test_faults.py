"""Faults: ZooKeeper restarted mid-move, the daemon's session expired, the elected broker killed. moverd keeps
serving and moving throughout, registers again, and carries out reassignments written while it was away."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from kazoo.client import KazooClient

from mover.storage.names import TopicPartition
from mover.testing.log_dirs_tool import replica_dirs
from mover.testing.moverd import Moverd
from mover.testing.raw import raw_call
from mover.testing.records import write_partition
from mover.testing.wait import wait_for
from mover.testing.zk_cluster import (
    REASSIGN,
    alter_dir_reply,
    broker_props,
    moverd_cluster,
    new_chroot,
    reassignment_entry,
    replica_state,
    write_reassignment,
    zk_client,
)
from mover.testing.zookeeper import ZooKeeperServer
from mover.wire.messages import DESCRIBE_LOG_DIRS

# 20 batches of 10 KB at 100 KB/s: a move of about 2 s, long enough to be caught mid-way.
SLOW = {"replica.alter.log.dirs.io.max.bytes.per.second": 100_000}


def _leader(zk: KazooClient) -> int:
    children = sorted(zk.get_children("/moverd/reassignment_cleaner"), key=lambda c: c[-10:])
    return int(zk.get(f"/moverd/reassignment_cleaner/{children[0]}")[0])


def test_zookeeper_restart_mid_move(tmp_path: Path, tmp_path_factory) -> None:  # noqa: ANN001
    # A server of its own: stopping the module's would disturb nothing else here, but keeps this test independent.
    with ZooKeeperServer(tmp_path_factory.mktemp("zk-restart")) as server:
        connect = new_chroot(server)
        for p in range(2):
            write_partition(tmp_path / "broker0" / "d1", TopicPartition("t", p), 20)
        with moverd_cluster(tmp_path, connect, 1, **SLOW) as (b,):
            with zk_client(connect) as zk:
                wait_for(lambda: zk.exists("/brokers/topics/t"), message="topic registered")
                write_reassignment(zk, [reassignment_entry("t", 0, [0], [str(b.dirs[1])])])
                wait_for(lambda: (replica_state(zk, 0, "t", 0) or {}).get("state") == "copying",
                         message="the move running")
            server.stop()
            # ZooKeeper is gone: clients are still served, moves still run, a wire request still answers.
            assert len(raw_call(b.port, DESCRIBE_LOG_DIRS, 1, {"topics": None})["results"]) == 2
            reply = alter_dir_reply(b, "t", 1, str(b.dirs[1]))
            assert reply["results"][0]["partitions"][0]["error_code"] == 0
            wait_for(lambda: replica_dirs(b.bootstrap, "t", 0) == {str(b.dirs[1]): False}, message="the move finished")
            server.start()
            with zk_client(connect) as zk:
                # The entry that finished while ZooKeeper was away is reported and cleaned up once it is back.
                wait_for(lambda: not zk.exists(REASSIGN), message="the finished entry cleaned up after the restart")
                assert replica_state(zk, 0, "t", 0)["state"] == "completed"
                # The wire request answered while ZooKeeper was down is recorded once it is back.
                wait_for(lambda: (replica_state(zk, 0, "t", 1) or {}).get("state") == "completed",
                         message="the wire request's status recorded after the restart")
                rid = replica_state(zk, 0, "t", 1)["request_id"]
                descriptor = json.loads(zk.get(f"/admin/reassign_partitions_status/{rid}")[0])
                assert descriptor["local_request_id"] == reply["request_id"]
                zk.create(REASSIGN, json.dumps({"version": 1, "partitions": [
                    reassignment_entry("t", 0, [0], [str(b.dirs[0])])]}).encode())
                wait_for(lambda: not zk.exists(REASSIGN), message="a new reassignment carried out")
                assert replica_dirs(b.bootstrap, "t", 0) == {str(b.dirs[0]): False}
                assert zk.exists("/brokers/ids/0")


def test_session_expiry_reregisters_and_rereads(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    write_partition(tmp_path / "broker0" / "d1", TopicPartition("t", 0), 20)
    with moverd_cluster(tmp_path, connect, 1) as (b,), zk_client(connect) as zk:
        owner = zk.get("/brokers/ids/0")[1].ephemeralOwner
        assert b.proc is not None
        # Frozen past its 2 s session timeout: ZooKeeper expires the session and drops the ephemeral znode.
        b.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: not zk.exists("/brokers/ids/0"), message="the session expired")
            write_reassignment(zk, [reassignment_entry("t", 0, [0], [str(b.dirs[1])])])
        finally:
            b.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: zk.exists("/brokers/ids/0"), message="registered again")
        assert zk.get("/brokers/ids/0")[1].ephemeralOwner != owner
        wait_for(lambda: not zk.exists(REASSIGN), message="the reassignment written meanwhile carried out")
        assert replica_dirs(b.bootstrap, "t", 0) == {str(b.dirs[1]): False}
        assert "ZooKeeper session expired" in b.log_file.read_text(errors="replace")


def test_elected_broker_killed(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    for i in range(2):
        write_partition(tmp_path / f"broker{i}" / "d1", TopicPartition("t", i), 5)
    with moverd_cluster(tmp_path, connect, 2) as brokers, zk_client(connect) as zk:
        wait_for(lambda: zk.exists("/moverd/reassignment_cleaner") and zk.get_children("/moverd/reassignment_cleaner"),
                 message="a broker elected")
        leader = _leader(zk)
        survivor = 1 - leader
        brokers[leader].kill()
        write_reassignment(zk, [reassignment_entry("t", survivor, [survivor], [str(brokers[survivor].dirs[1])])])
        wait_for(lambda: not zk.exists(REASSIGN), message="the survivor elected and cleaning up")
        assert _leader(zk) == survivor
        assert replica_state(zk, survivor, "t", survivor)["state"] == "completed"


def test_broker_killed_mid_move_resumes_and_reports(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    write_partition(tmp_path / "broker0" / "d1", TopicPartition("t", 0), 20)
    with moverd_cluster(tmp_path, connect, 1, **SLOW) as (b,), zk_client(connect) as zk:
        wait_for(lambda: zk.exists("/brokers/topics/t"), message="topic registered")
        write_reassignment(zk, [reassignment_entry("t", 0, [0], [str(b.dirs[1])])])
        wait_for(lambda: (replica_state(zk, 0, "t", 0) or {}).get("state") == "copying", message="the move running")
        request_id = replica_state(zk, 0, "t", 0)["request_id"]
        b.kill()
        b.start()
        wait_for(lambda: not zk.exists(REASSIGN), message="the resumed move finished and cleaned up")
        state = replica_state(zk, 0, "t", 0)
        assert (state["state"], state["request_id"]) == ("completed", request_id)
        assert replica_dirs(b.bootstrap, "t", 0) == {str(b.dirs[1]): False}


def _lines(d: Moverd, text: str) -> list[str]:
    return [line for line in d.log_file.read_text(errors="replace").splitlines() if text in line]


def test_broker_whose_id_was_taken_while_expired_is_fenced(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """Broker 1 frozen past its session timeout, a second moverd registers as broker 1, the first resumes: it must
    not act as broker 1 (the other's status stands) until the id is its own again."""
    connect = new_chroot(zookeeper)
    for name in ("first", "second"):
        write_partition(tmp_path / name / "d1", TopicPartition("t", 0), 5)
    with zk_client(connect) as zk, Moverd(tmp_path / "first", props=broker_props(connect, 1)) as first:
        wait_for(lambda: zk.exists("/brokers/topics/t"), message="topic registered")
        assert first.proc is not None
        second = Moverd(tmp_path / "second", props=broker_props(connect, 1))
        first.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: not zk.exists("/brokers/ids/1"), message="the first broker's session expired")
            second.start()
        finally:
            first.proc.send_signal(signal.SIGCONT)
        try:
            wait_for(lambda: _lines(first, "registered in ZooKeeper by another live broker"),
                     message="the first broker finding its id taken")
            # A move into a dir only the first broker has: the second answers 57, the first must not move it.
            write_reassignment(zk, [reassignment_entry("t", 0, [1], [str(first.dirs[1])])])
            wait_for(lambda: not zk.exists(REASSIGN), message="the entry failed on the second broker and removed")
            state = replica_state(zk, 1, "t", 0)
            assert state is not None and (state["state"], state["error_code"]) == ("failed", 57), state
            assert replica_dirs(first.bootstrap, "t", 0) == {str(first.dirs[0]): False}
            assert not _lines(first, "reassignment: moving")
            assert second.bootstrap.encode() in zk.get("/brokers/ids/1")[0], "the second broker's registration stands"
        finally:
            second.stop()
        # The second broker is gone: the first holds the id again and acts again.
        wait_for(lambda: _lines(first, "no longer fenced"), message="the first broker registered again")
        write_reassignment(zk, [reassignment_entry("t", 0, [1], [str(first.dirs[1])])])
        wait_for(lambda: not zk.exists(REASSIGN), message="the reassignment carried out by the first broker")
        assert replica_dirs(first.bootstrap, "t", 0) == {str(first.dirs[1]): False}
        assert replica_state(zk, 1, "t", 0)["state"] == "completed"
        assert len(_lines(first, "fenced:")) == 1, "fenced is said once, not at every retry"
        assert "Traceback" not in first.log_file.read_text(errors="replace")

