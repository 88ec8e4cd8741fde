"""Reassignment requests kept in the cluster (mover/admin/reassign/status_store.py), against a real moverd and a real
Kafka 3.7 (KRaft): ids from the log's offsets, one run per partition, a second machine's view, a run killed -9 read
as dead and resumed, expiry after the retention, throttle owners."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mover.admin.client import Client
from mover.admin.common import AdminError
from mover.admin.reassign.status_log import TOPIC
from mover.admin.reassign.status_store import COMPLETED, DEAD, RUNNING, StatusStore
from mover.admin.reassignment import TOPIC_RESOURCE
from mover.testing.kafka import KafkaCluster
from mover.testing.moverd import Moverd
from mover.testing.wait import wait_for
from mover.wire.messages import DESCRIBE_CONFIGS

REPO = Path(__file__).resolve().parents[2]
# Short heartbeats keep the dead-run test quick; the store's judgement is the same at any period.
BEAT_S = 0.3


@pytest.fixture(scope="module", params=["moverd", "kafka"])
def bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "moverd":
        with Moverd(tmp_path_factory.mktemp("moverd")) as d:
            yield d.bootstrap
    else:
        cluster: KafkaCluster = request.getfixturevalue("kafka_cluster")(brokers=1, log_dirs=1)
        yield cluster.bootstrap


@pytest.fixture
def stores(bootstrap: str) -> Iterator[Callable[..., StatusStore]]:
    """new(**options) -> a StatusStore on a client of its own: each one another machine."""
    clients: list[Client] = []

    def new(**options: Any) -> StatusStore:
        client = Client(bootstrap)
        clients.append(client)
        options.setdefault("heartbeat_s", BEAT_S)
        return StatusStore(client, tool="test", **options)

    yield new
    for c in clients:
        c.close()


_topic_seq = iter(range(1_000_000))


def parts(*names: str, replicas: tuple[int, ...] = (1, 2, 3)) -> list[dict[str, Any]]:
    return [{"topic": n, "partition": 0, "replicas": list(replicas)} for n in names]


@pytest.fixture
def topic() -> str:
    """A partition name no other test claims (the status topic outlives each test within the module)."""
    return f"t{os.getpid()}-{next(_topic_seq)}"


def test_claims_at_once_get_distinct_ids_and_one_of_two_overlapping_wins(stores: Callable[..., StatusStore],
                                                                         topic: str) -> None:
    a, b, c, d = stores(), stores(), stores(), stores()
    start = threading.Barrier(4)
    results: dict[str, Any] = {}

    def run(name: str, store: StatusStore, what: list[dict[str, Any]]) -> None:
        start.wait()
        try:
            results[name] = store.claim(what)[0]
        except AdminError as e:
            results[name] = e

    threads = [threading.Thread(target=run, args=args) for args in (
        ("a", a, parts(topic + "a")), ("b", b, parts(topic + "b")),            # disjoint
        ("c", c, parts(topic + "x", topic + "c")), ("d", d, parts(topic + "x", topic + "d")))]  # overlapping
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(results["a"], int) and isinstance(results["b"], int) and results["a"] != results["b"]
    won = [k for k in "cd" if isinstance(results[k], int)]
    lost = [k for k in "cd" if isinstance(results[k], AdminError)]
    assert len(won) == 1 and len(lost) == 1, results
    message = str(results[lost[0]])
    assert f"request {results[won[0]]} " in message and "pid" in message and f"{topic}x-0" in message
    ids = {r.id for r in a.list()}
    assert {results["a"], results["b"], results[won[0]]} <= ids
    # The loser closed its own claim: the partitions it did not overlap are free at once.
    assert stores().claim(parts(topic + ("c" if lost[0] == "c" else "d")))[0] > 0


def test_a_second_machine_sees_the_same_requests_and_progress(stores: Callable[..., StatusStore], topic: str,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    first = stores()
    rid, resumed = first.claim(parts(topic))
    assert not resumed
    first.record_progress(rid, [{"topic": topic, "partition": 0, "broker": 2, "numerator": 10, "denominator": 40}])
    first.heartbeat(rid)
    monkeypatch.setenv("HOME", str(tmp_path))  # nothing on disk takes part
    other = stores()
    seen = other.get(rid)
    assert seen.status() == RUNNING and seen.origin["tool"] == "test" and seen.origin["pid"] == os.getpid()
    assert seen.progress == [{"topic": topic, "partition": 0, "broker": 2, "numerator": 10, "denominator": 40}]
    assert [r.id for r in other.list()] == [r.id for r in first.list()]
    first.finish(rid, COMPLETED)
    assert other.get(rid).status() == COMPLETED and other.get(rid).ended_ms > 0


_KILLED_RUN = """
import sys, threading
from mover.admin.client import Client
from mover.admin.reassign.request_store import ClusterRequestStore
store = ClusterRequestStore.open(Client(sys.argv[1]), tool="mover-reassign", heartbeat_s=float(sys.argv[3]))
rid, _ = store.claim([{"topic": sys.argv[2], "partition": 0, "replicas": [1, 2, 3]}])
print(rid, flush=True)
threading.Event().wait()
"""


def test_a_run_killed_9_reads_dead_and_the_same_file_resumes_it(stores: Callable[..., StatusStore], topic: str,
                                                                bootstrap: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, bootstrap, topic, str(BEAT_S)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        rid = int(proc.stdout.readline())
        watcher = stores()
        wait_for(lambda: watcher.get(rid).heartbeat_ms > watcher.get(rid).started_ms, message="a heartbeat")
        with pytest.raises(AdminError, match=f"request {rid} .*pid {proc.pid}"):
            watcher.claim(parts(topic))  # alive: even the same file is refused
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    wait_for(lambda: watcher.get(rid).status() == DEAD, message="the killed run read as dead")
    with pytest.raises(AdminError, match=f"request {rid} .*dead: only --execute of its file resumes it"):
        stores().claim(parts(topic, replicas=(3, 2, 1)))  # another file touching it
    resumer = stores()
    assert resumer.claim(parts(topic)) == (rid, True)
    assert resumer.get(rid).status() == RUNNING and resumer.get(rid).owner["pid"] == os.getpid()
    assert resumer.get(rid).origin["pid"] == proc.pid  # where it was started stays said


def test_requests_older_than_the_retention_are_forgotten(stores: Callable[..., StatusStore], topic: str) -> None:
    store = stores()
    rid, _ = store.claim(parts(topic))
    store.finish(rid, COMPLETED)
    short = stores(retention_ms=500)
    assert rid in short.requests()
    wait_for(lambda: rid not in short.requests(), message="the request forgotten after 500 ms")
    assert store.get(rid).status() == COMPLETED  # the default retention (1 day) keeps it
    with pytest.raises(AdminError, match=f"unknown request id {rid}"):
        short.get(rid)


def test_throttle_originals_have_owners(stores: Callable[..., StatusStore], topic: str) -> None:
    a, b = stores(), stores()
    ra, _ = a.claim(parts(topic + "a"))
    rb, _ = b.claim(parts(topic + "b"))
    resource = f"broker:{topic}"
    assert a.hold_throttle(ra, resource, lambda: {"rate": "own"}) == {"rate": "own"}
    # b reads the resource after a set its throttle: it must take a's record of the original, not a's value.
    assert b.hold_throttle(rb, resource, lambda: {"rate": "a's throttle"}) == {"rate": "own"}
    assert a.release_throttle(ra, resource) is None  # b still holds it: a leaves it alone
    a.throttle_ended(ra, resource)
    assert b.release_throttle(rb, resource) == {"rate": "own"}  # the last to leave restores the original
    b.throttle_ended(rb, resource)
    # A later run starts a new chain: its own reading is the original.
    rc, _ = stores().claim(parts(topic + "c"))
    c = stores()
    rc, _ = c.claim(parts(topic + "cc"))
    assert c.hold_throttle(rc, resource, lambda: {"rate": "later"}) == {"rate": "later"}


def test_the_topic_is_created_once_with_its_configs(stores: Callable[..., StatusStore], bootstrap: str) -> None:
    store = stores()
    store.claim(parts(f"{TOPIC}-probe-{os.getpid()}"))
    with Client(bootstrap) as client:
        meta = client.metadata([TOPIC])["topics"][0]
        configs = client.any_connection().call(DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": TOPIC, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})["results"][0]["configs"]
    assert meta["error_code"] == 0 and len(meta["partitions"]) == 1
    values = {c["name"]: c["value"] for c in configs}
    if "cleanup.policy" in values:  # Kafka; moverd takes no per-topic configs (its log.retention.ms applies)
        assert values["cleanup.policy"] == "compact,delete"
        assert values["retention.ms"] == str(24 * 3600 * 1000)
