"""The step engine's loop against a simulated KIP-455 controller (in memory: a step's new replicas join the ISR a few
polls after it starts, then the controller drops the old ones), so the loop's rules are checked in milliseconds:
limits at every poll, limits changed mid-run applying to what starts next, the preferred leader elected, the steps a
partition goes through equal to the calculator's, a cancelled step stopping the run. The real cluster is in
tests/kafka/reassign/."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from mover.admin.reassign import progress, step_engine
from mover.admin.reassign.step_engine import PartitionRun, RunLimits, StepEngine
from mover.admin.reassign.steps import Limits, plan_steps
from mover.testing.history import TP
from mover.testing.sim_controller import SimController
from mover.wire.errors import ErrorCode


class NoThrottle:
    def set_rate(self, brokers: Any, rate: Any) -> None:
        pass

    def set_replicas(self, moving: Any) -> None:
        pass


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(assignment: dict[TP, tuple[int, ...]], sync_polls: int = 2) -> SimController:
        c = SimController(assignment, sync_polls)
        for name in ("partition_states", "list_reassignments", "alter_reassignments", "elect_preferred"):
            monkeypatch.setattr(step_engine, name, getattr(c, name))
        monkeypatch.setattr(progress, "describe_broker", lambda client, broker, topics: [])
        return c
    return install


def engine(runs: list[PartitionRun], limits: Limits, **kw: Any) -> StepEngine:
    """An engine on the simulated controller; what it says is kept in its `out`."""
    client = type("C", (), {"brokers": {b: ("127.0.0.1", 9000 + b) for b in range(10)},
                            "reconnect": lambda self, b: None})()
    out = io.StringIO()
    e = StepEngine(client, runs, RunLimits(limits), NoThrottle(), say=lambda line: print(line, file=out),  # type: ignore[arg-type]
                   poll_s=0, **kw)
    e.out = out  # type: ignore[attr-defined]
    return e


def test_limits_leaders_and_the_calculators_steps(sim: Any) -> None:
    start = {("t", p): (1, 2, 3) for p in range(8)}
    start[("ex", 0)] = (0, 1, 2, 3, 4)
    finals = {("t", p): (4, 5, 6) if p % 2 else (2, 4, 5) for p in range(8)}
    finals[("ex", 0)] = (5, 6, 7, 8, 9)
    c = sim(start)
    limits = Limits(max_partition_movements=3, max_replica_movements=2, max_leader_movements=1)
    e = engine([PartitionRun(tp, f, 2) for tp, f in finals.items()], limits)
    result = e.run()
    assert result.ok, (result, e.out.getvalue())  # type: ignore[attr-defined]
    assert all(c.replicas[tp] == f and c.leader[tp] == f[0] for tp, f in finals.items())
    assert max(s.partitions for s in result.samples) <= 3
    assert max(s.leaders for s in result.samples) <= 1
    assert max(s.max_replicas_added for s in result.samples) <= 2
    # Each partition went through exactly the calculator's steps.
    for tp, f in finals.items():
        assert c.history[tp] == [start[tp]] + [s.target for s in plan_steps(start[tp], f, 2, 2)]
    assert c.history[("ex", 0)][1:] == [(5, 0, 1, 2, 3, 4), (5, 6, 2, 3, 4), (5, 6, 7, 8, 4), (5, 6, 7, 8, 9)]


def test_limits_file_changes_apply_to_the_next_steps(sim: Any, tmp_path: Path) -> None:
    start = {("t", p): (1, 2, 3) for p in range(10)}
    finals = {tp: (1, 2, 4) for tp in start}
    sim(start, sync_polls=3)
    path = tmp_path / "limits.json"
    path.write_text(json.dumps({"max_partition_movements": 1}))
    polls = []

    def on_tick(e: StepEngine) -> None:
        polls.append(len(e.running()))
        if len(polls) == 6:
            path.write_text(json.dumps({"max_partition_movements": 4}))

    e = engine([PartitionRun(tp, f, 2) for tp, f in finals.items()], Limits(1, 1, 1), limits_path=path,
               on_tick=on_tick)
    result = e.run()
    assert result.ok
    assert max(polls[:6]) == 1 and max(polls[6:]) == 4  # raised at the next step, and used


def test_a_cancelled_step_stops_the_run_from_the_request(sim: Any) -> None:
    start = {("t", p): (1, 2, 3) for p in range(4)}
    c = sim(start, sync_polls=50)
    cancelled = {"now": False}

    def on_tick(e: StepEngine) -> None:
        if e.running() and not cancelled["now"]:
            c.alter_reassignments(None, {r.tp: None for r in e.running()})  # --cancel, from another process
            cancelled["now"] = True

    e = engine([PartitionRun(tp, (4, 5, 6), 2) for tp in start], Limits(2, 1, 2), on_tick=on_tick,
               should_stop=lambda: cancelled["now"])
    result = e.run()
    assert result.stopped and not result.done and len(result.remaining) == 4
    assert c.replicas == start and not c.ongoing and len(c.cancelled) == 2


def test_progress_and_watch_read_the_request_and_the_cluster(sim: Any, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from mover.admin.log_dir_state import DirInfo, PartitionInfo
    from mover.admin.reassign import request_progress
    from mover.cli import reassign_brokers
    from mover.testing.file_request_store import RequestStore

    c = sim({("t", 0): (1, 2, 3), ("t", 1): (1, 2, 3)}, sync_polls=1000)
    store = RequestStore("c", tmp_path)
    rid = store.new_request([{"topic": "t", "partition": p, "replicas": [4, 2, 3]} for p in range(2)])
    c.alter_reassignments(None, {("t", 0): (4, 1, 2, 3)})
    sizes = {1: 1000, 4: 250}
    for name in ("partition_states", "list_reassignments"):
        monkeypatch.setattr(request_progress, name, getattr(c, name))
    monkeypatch.setattr(request_progress, "check_apis", lambda client: None)
    monkeypatch.setattr(progress, "describe_broker", lambda client, b, topics: [DirInfo(
        "/d", 0, -1, -1, tuple(PartitionInfo("t", p, sizes.get(b, 0), 0, False) for p in topics["t"]))])
    out = io.StringIO()
    client = type("C", (), {"brokers": {b: ("127.0.0.1", 9000 + b) for b in range(10)}})()
    assert reassign_brokers.progress(client, store, None, out) == 3  # type: ignore[arg-type]
    text = out.getvalue()
    assert f"Request {rid}: running, 2 partitions" in text
    assert "Partition t-0: step running: 1,2,3 -> 4,1,2,3 (adding 4, removing -)" in text
    assert "Partition t-1: waiting for its next step" in text
    assert "Replica t-0-4: 250 of 1000 bytes (25.0%), in progress" in text
    assert "Total: 0 of 2 partitions done, 1 with a step running; running steps 250 of 1000 bytes" in text
    for tp in c.replicas:
        c.replicas[tp] = (4, 2, 3)
    c.ongoing.clear()
    watched = io.StringIO()
    assert reassign_brokers._watch(lambda: (client, store), rid, 0.01, watched) == 0  # type: ignore[arg-type,return-value]
    assert "partitions done" in watched.getvalue()


def test_reassign_watch_waits_out_a_restart_landing_on_a_handshake_or_a_poll(
        sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """mover-reassign --progress --watch, in-process against the simulated controller: a restart landing on the
    bootstrap's ApiVersions, then on the ApiVersions of the broker connection the KIP-455 check opens, then on a poll
    (no broker answers Metadata), then on ListPartitionReassignments (answered NOT_CONTROLLER, as while the controller
    restarts) is retried each time by the watches' one loop, and the watch then sees the request finish. Before, the
    first of them was its error line, exit 1 (the one-shot commands still end that way)."""
    from mover.admin.client import ConnectionClosed
    from mover.admin.common import BrokersUnreachable
    from mover.admin.reassign import kip455 as reassignment
    from mover.admin.reassign import request_progress
    from mover.cli import reassign_brokers, reassign_partitions
    from mover.testing.file_request_store import STATE_DIR_ENV, RequestStore

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    c = sim({("t", 0): (1, 2, 3)}, sync_polls=3)
    rid = RequestStore("c", tmp_path).new_request([{"topic": "t", "partition": 0, "replicas": [4, 2, 3]}])
    c.alter_reassignments(None, {("t", 0): (4, 2, 3)})  # its one step, running: done on the third Metadata
    failures = {"bootstrap": 1, "broker connection": 1, "metadata": 1, "list": 1}

    def reset(what: str) -> bool:
        if failures[what]:
            failures[what] -= 1
            return True
        return False

    class Conn:
        def supports(self, api: Any) -> bool:
            return True

    class FakeClient:
        cluster_id = "c"
        brokers = {1: ("127.0.0.1", 9092)}

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if reset("bootstrap"):
                raise ConnectionClosed("broker 127.0.0.1:9092 closed the connection on ApiVersions v4: Connection "
                                       "reset by peer")

        def connection(self, broker: int) -> Conn:  # what the real check_apis opens
            if reset("broker connection"):
                raise ConnectionClosed("broker 1 (127.0.0.1:9092) closed the connection on ApiVersions v4: "
                                       "Connection reset by peer")
            return Conn()

        def close(self) -> None:
            pass

    def partition_states(client: Any, topics: Any) -> Any:
        if reset("metadata"):
            raise BrokersUnreachable("no broker answered Metadata: broker 1 (127.0.0.1:9092): cannot connect: "
                                     "Connection refused")
        return c.partition_states(client, topics)

    def not_controller(client: Any, api: Any, body: Any, code: Any) -> dict[str, Any]:
        return {"error_code": ErrorCode.NOT_CONTROLLER, "error_message": None, "topics": []}

    def list_reassignments(client: Any, partitions: Any = None) -> Any:
        if reset("list"):  # the real decoding of the answer, so the real error is what the watch meets
            with monkeypatch.context() as m:
                m.setattr(reassignment, "call_controller", not_controller)
                return reassignment.list_reassignments(client, partitions)
        return c.list_reassignments(client, partitions)

    class LocalStore:  # the simulated cluster has no status topic: its requests come from the file store
        @staticmethod
        def open(client: Any, tool: str) -> RequestStore:
            return RequestStore("c", tmp_path)

    monkeypatch.setattr(reassign_partitions, "Client", FakeClient)
    monkeypatch.setattr(reassign_brokers, "RequestStore", LocalStore)
    monkeypatch.setattr(request_progress, "partition_states", partition_states)
    monkeypatch.setattr(request_progress, "list_reassignments", list_reassignments)
    monkeypatch.setattr(progress, "describe_broker", lambda client, b, topics: [])
    rc = reassign_partitions.main(["--bootstrap-server", "127.0.0.1:9092", "--progress", "--watch",
                                   "--poll-interval", "0.01"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert failures == {"bootstrap": 0, "broker connection": 0, "metadata": 0, "list": 0}  # each outage happened
    assert c.replicas[("t", 0)] == (4, 2, 3)
    assert f"request {rid}: partitions done" in captured.out  # rich's final frame
    assert captured.err == ""


def test_a_new_replica_that_does_not_grow_is_reported_stalled(sim: Any) -> None:
    sim({("t", 0): (1, 2, 3)}, sync_polls=10**6)  # its new replica never catches up (describe_broker: 0 bytes)
    ticks = {"n": 0}

    def on_tick(e: StepEngine) -> None:
        ticks["n"] += 1
        if ticks["n"] == 5:
            e.stop.set()
            raise KeyboardInterrupt  # as a second Ctrl-C: leave now

    e = engine([PartitionRun(("t", 0), (4, 2, 3), 2)], Limits(1, 1, 1), stall_s=0.0, on_tick=on_tick)
    with pytest.raises(KeyboardInterrupt):
        e.run()
    lines = [line for line in e.out.getvalue().splitlines() if line.startswith("Stalled:")]  # type: ignore[attr-defined]
    assert len(lines) == 1 and "replica t-0-4 has not grown" in lines[0]  # said once, not every poll


@pytest.mark.parametrize(("code", "waited"), [(ErrorCode.NOT_CONTROLLER, True), (ErrorCode.REQUEST_TIMED_OUT, True),
                                              (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, False)])
def test_list_reassignments_tells_a_retriable_answer_from_a_refusal(code: ErrorCode, waited: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """ListPartitionReassignments answered with an error: a retriable code is ClusterUnavailable, which a watch
    waits out; any other is a plain AdminError, the one line of watch and one-shot command alike."""
    from mover.admin.common import AdminError, ClusterUnavailable
    from mover.admin.reassign import kip455 as reassignment

    monkeypatch.setattr(reassignment, "call_controller",
                        lambda client, api, body, _code: {"error_code": code, "error_message": "m", "topics": []})
    with pytest.raises(AdminError, match=f"ListPartitionReassignments: {code.name}: m") as e:
        reassignment.list_reassignments(None)  # type: ignore[arg-type]
    assert isinstance(e.value, ClusterUnavailable) is waited



def test_the_run_waits_out_a_controller_that_answers_retriable_codes_or_no_broker_at_all(
        sim: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A KRaft controller restarting: ListPartitionReassignments and AlterPartitionReassignments answered with a
    retriable code (ClusterUnavailable), then no broker answering Metadata (BrokersUnreachable). The run goes on
    polling (the steps go on in the cluster), says each outage once, not every poll, and ends at the targets. Before,
    the first of them ended mover-reassign --execute with exit 1 while its step ran on unfollowed."""
    from mover.admin.common import BrokersUnreachable, ClusterUnavailable

    c = sim({("t", 0): (1, 2, 3), ("t", 1): (1, 2, 3)}, sync_polls=8)  # the steps outlast the outages
    outages = {"alter": 1, "list": 3, "metadata": 2}

    def failing(what: str, real: Any, error: Exception) -> Any:
        def call(*args: Any) -> Any:
            if outages[what]:
                outages[what] -= 1
                raise error
            return real(*args)
        return call

    monkeypatch.setattr(step_engine, "alter_reassignments", failing(
        "alter", c.alter_reassignments, ClusterUnavailable("AlterPartitionReassignments: NOT_CONTROLLER")))
    # The list fails only once a step runs: the outage falls mid-step.
    real_list = c.list_reassignments
    monkeypatch.setattr(step_engine, "list_reassignments", lambda client, partitions=None: (
        failing("list", real_list, ClusterUnavailable("ListPartitionReassignments: REQUEST_TIMED_OUT"))(
            client, partitions) if c.ongoing else real_list(client, partitions)))
    real_states = c.partition_states
    monkeypatch.setattr(step_engine, "partition_states", lambda client, topics: (
        failing("metadata", real_states, BrokersUnreachable("no broker answered Metadata"))(client, topics)
        if not outages["list"] and outages["metadata"] else real_states(client, topics)))
    finals = {("t", 0): (4, 2, 3), ("t", 1): (4, 5, 3)}
    e = engine([PartitionRun(tp, f, 2) for tp, f in finals.items()], Limits(2, 2, 2))
    result = e.run()
    out = e.out.getvalue()  # type: ignore[attr-defined]
    assert result.ok, (result, out)
    assert outages == {"alter": 0, "list": 0, "metadata": 0}  # every outage happened
    assert all(c.replicas[tp] == f for tp, f in finals.items())
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert warnings == ["warning: AlterPartitionReassignments: NOT_CONTROLLER; retrying",
                        "warning: ListPartitionReassignments: REQUEST_TIMED_OUT; retrying",
                        "warning: no broker answered Metadata; retrying"], out
    assert out.count("The cluster answers again") == 2, out  # the list and Metadata outages back to back: one
