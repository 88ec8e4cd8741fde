"""Reassignment requests kept in the cluster (mover/admin/reassign/status_store.py), against a real moverd and a real
Kafka 3.7 (KRaft): ids from the log's offsets, one run per partition, a second machine's view, a run killed -9 read
as dead and resumed, expiry after the retention, throttle owners."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mover.admin.client import Client
from mover.admin.common import AdminError
from mover.admin.reassign.kip455 import TOPIC_RESOURCE
from mover.admin.reassign.status_log import TOPIC
from mover.admin.reassign.status_store import COMPLETED, DEAD, RUNNING, STOPPED, StatusStore
from mover.testing import prefork
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.moverd import Moverd
from mover.testing.wait import wait_for
from mover.wire.messages import DESCRIBE_CONFIGS

REPO = Path(__file__).resolve().parents[2]
# Short heartbeats keep the dead-run test quick; the store's judgement is the same at any period.
BEAT_S = 0.3


@pytest.fixture(scope="module")
def kafka2(kafka_cluster: Callable[..., KafkaCluster]) -> KafkaCluster:
    """Two brokers (and their controller): the status topic gets replication factor 2, and mover-reassign has
    somewhere to move a replica."""
    # Small replica fetches: a throttled copy of a few hundred KB takes long enough to kill its tool mid-way (one
    # fetch of Kafka's default 1 MiB would copy it whole before the throttle bites).
    return kafka_cluster(brokers=2, log_dirs=1, props={"replica.fetch.max.bytes": 10000})


@pytest.fixture(scope="module", params=["moverd", "kafka"])
def bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "moverd":
        with Moverd(tmp_path_factory.mktemp("moverd")) as d:
            yield d.bootstrap
    else:
        yield request.getfixturevalue("kafka2").bootstrap


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
from mover.testing import prefork
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


def test_a_run_whose_heartbeats_came_too_late_learns_it_was_taken_over(stores: Callable[..., StatusStore],
                                                                       topic: str) -> None:
    """A run whose heartbeats read 3 periods old (its host frozen, or its clock that far behind) is resumed by the
    same file elsewhere; its next heartbeat says so, and it stops."""
    late = stores(clock=lambda: int(time.time() * 1000) - 10_000)
    rid, _ = late.claim(parts(topic))
    other = stores()
    assert other.get(rid).status() == DEAD
    assert other.claim(parts(topic)) == (rid, True)
    assert late.heartbeat(rid) is False
    assert other.heartbeat(rid) is True and other.get(rid).status() == RUNNING


def test_a_run_records_its_replicas_progress_at_its_first_look_then_every_period(
        stores: Callable[..., StatusStore], topic: str, bootstrap: str) -> None:
    from types import SimpleNamespace

    from mover.admin.reassign.progress import Progress, ReplicaStatus
    from mover.admin.reassign.request_store import ClusterRequestStore

    with Client(bootstrap) as client, ClusterRequestStore.open(client, tool="test", heartbeat_s=BEAT_S) as run:
        rid, _ = run.claim(parts(topic))
        run.progress_tick(rid, [])  # no step yet: nothing recorded, and the first snapshot is not held back
        replica = ReplicaStatus(topic, 0, 3, "In progress", progress=Progress(250, 1000))
        step = SimpleNamespace(tp=(topic, 0), progress={3: replica}, stalled=set())
        run.progress_tick(rid, [step])
        replica.progress.numerator = 500
        run.progress_tick(rid, [step])  # within the period: not recorded
        seen = stores().get(rid).progress
        assert [(p["broker"], p["numerator"], p["denominator"]) for p in seen] == [(3, 250, 1000)]
        run.progress_tick(rid, [])  # its steps ended: said at once
        assert stores().get(rid).progress == []


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


# ------------------------------------------------------------------------------------------- mover-reassign


def mover_reassign(home: Path, *args: str, wait: bool = True) -> Any:
    """mover-reassign as another machine runs it: its own HOME (nothing of the first machine's on disk)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home), "MOVER_REASSIGN_HEARTBEAT_S": str(BEAT_S)}
    env.pop("MOVER_REASSIGN_STATE_DIR", None)
    home.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "mover.cli.reassign_partitions", *args]
    if wait:
        return prefork.run(cmd, capture_output=True, text=True, env=env, timeout=240, stdin=subprocess.DEVNULL)
    return prefork.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         stdin=subprocess.DEVNULL)


def test_mover_reassign_killed_9_is_seen_dead_elsewhere_and_resumed_by_the_same_file(
        kafka2: KafkaCluster, tmp_path: Path) -> None:
    from kafka import KafkaProducer

    from mover.admin.reassign.kip455 import BROKER_RESOURCE, own_configs
    from mover.admin.reassign.replication_throttle import BROKER_KEYS

    name = f"moved{os.getpid()}"
    kafka2.create_topic(name, assignment={0: [1]})
    producer = KafkaProducer(bootstrap_servers=kafka2.bootstrap, acks="all")
    for i in range(300):
        producer.send(name, f"{i}".encode().ljust(1000, b"v"), partition=0)
    producer.flush()
    producer.close()
    plan = tmp_path / "plan.json"
    plan.write_text(f'{{"version":1,"partitions":[{{"topic":"{name}","partition":0,"replicas":[2]}}]}}')
    other = tmp_path / "other.json"
    other.write_text(f'{{"version":1,"partitions":[{{"topic":"{name}","partition":0,"replicas":[1,2]}}]}}')
    common = ["--bootstrap-server", kafka2.bootstrap]
    first = mover_reassign(tmp_path / "a", *common, "--execute", "--reassignment-json-file", str(plan),
                           "--throttle", "3000", "--poll-interval", "0.2", wait=False)
    try:
        assert first.stdout is not None
        line = ""
        while not line.startswith("Request id:"):
            line = first.stdout.readline()
            assert line, first.stderr.read() if first.stderr else ""
        rid = int(line.split()[2])
        # Another operator, another machine, an overlapping file: refused at once, naming the run.
        refused = mover_reassign(tmp_path / "b", *common, "--execute", "--reassignment-json-file", str(other))
        assert refused.returncode == 1
        assert f"request {rid} (mover-reassign pid {first.pid}" in refused.stderr
        listed = mover_reassign(tmp_path / "b", *common, "--list")
        assert f"Request {rid}: running, 1 partitions, run by mover-reassign pid {first.pid}" in listed.stdout
    finally:
        first.kill()
        first.wait()

    def says_dead() -> bool:
        shown = mover_reassign(tmp_path / "c", *common, "--progress", "--request", str(rid))
        return f"Request {rid}: dead, 1 partitions" in shown.stdout

    wait_for(says_dead, message="--progress from another machine to say the killed run is dead", interval=0.2)
    with Client(kafka2.bootstrap) as client:  # what the run recorded of its new replica, as it last saw it
        recorded = StatusStore(client, tool="test").get(rid).progress
    assert [(p["topic"], p["partition"], p["broker"]) for p in recorded] == [(name, 0, 2)], recorded
    assert recorded[0]["status_ms"] > 0 and recorded[0]["complete"] is False
    resumed = mover_reassign(tmp_path / "c", *common, "--execute", "--reassignment-json-file", str(plan),
                             "--throttle", "100000000", "--poll-interval", "0.2")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"Request id: {rid} (resumed from what the cluster says)" in resumed.stdout
    assert f"request {rid} (dead, mover-reassign pid {first.pid}" in resumed.stdout
    assert kafka2.replicas(name) == {0: [2]}
    done = mover_reassign(tmp_path / "a", *common, "--progress", "--request", str(rid))
    assert f"Request {rid}: completed" in done.stdout, done.stdout + done.stderr
    with Client(kafka2.bootstrap) as client:  # the killed run's throttles were put back by the run that resumed it
        left = own_configs(client, BROKER_RESOURCE, ["1", "2"], BROKER_KEYS)
    assert not any(left.values()), left


def test_a_lease_has_one_live_holder_and_a_late_one_learns_it_lost_it(stores: Callable[..., StatusStore],
                                                                       topic: str) -> None:
    """The balancer's lease of a cluster (mover/audit/balancer/lease.py): one live holder; a holder whose
    heartbeats read 3 periods old (a frozen host) is taken over, and its next heartbeat says it holds nothing."""
    lease = f"lease-{topic}"
    late = stores(clock=lambda: int(time.time() * 1000) - 10_000)
    late_id, holder = late.claim_lease(lease)
    assert late_id is not None and holder is None
    first = stores()
    first_id, holder = first.claim_lease(lease)
    assert first_id is not None and holder is None  # the late one reads dead: its claim is ended
    assert late.heartbeat(late_id) is False
    assert first.heartbeat(first_id) is True
    second = stores()
    refused, holder = second.claim_lease(lease)
    assert refused is None and holder is not None and holder.id == first_id
    assert holder.owner["pid"] == os.getpid()
    first.finish(first_id, STOPPED)  # the holder stops: the next claim takes it at once
    second_id, holder = second.claim_lease(lease)
    assert second_id is not None and holder is None
    # Leases are not reassignment requests: nothing of them is the latest request a tool would pick.
    assert all(r.partitions == [] for r in second.requests().values() if r.origin.get("lease") == lease)


def test_shared_claims_of_a_lease_go_side_by_side_but_never_beside_a_sole_one(stores: Callable[..., StatusStore],
                                                                              topic: str) -> None:
    """mover-audit execute's share of a cluster's lease (shared: runs of different plans at once) against the
    balancer's (sole), whichever claims first."""
    lease = f"lease-{topic}"
    one, two, sole = stores(), stores(), stores()
    one_id, holder = one.claim_lease(lease, shared=True)
    assert one_id is not None and holder is None
    two_id, holder = two.claim_lease(lease, shared=True)
    assert two_id is not None and holder is None  # two executes side by side
    refused, holder = sole.claim_lease(lease)
    assert refused is None and holder is not None and holder.id == one_id  # the earliest in the way
    one.finish(one_id, STOPPED)
    refused, holder = sole.claim_lease(lease)
    assert refused is None and holder is not None and holder.id == two_id
    two.finish(two_id, STOPPED)
    sole_id, holder = sole.claim_lease(lease)
    assert sole_id is not None and holder is None
    refused, holder = one.claim_lease(lease, shared=True)
    assert refused is None and holder is not None and holder.id == sole_id
    sole.finish(sole_id, STOPPED)
    again, holder = one.claim_lease(lease, shared=True)
    assert again is not None and holder is None


def test_list_says_what_a_request_of_no_partitions_holds(kafka2: KafkaCluster, tmp_path: Path) -> None:
    """mover-reassign --list on the real Kafka: a balancer's lease and an execute's share of it, named as such."""
    lease = f"lease-{os.getpid()}-{next(_topic_seq)}"
    with Client(kafka2.bootstrap) as a, Client(kafka2.bootstrap) as b:
        share = StatusStore(a, tool="mover-audit execute", heartbeat_s=60)
        shared_id, _ = share.claim_lease(lease, shared=True)
        listed = mover_reassign(tmp_path / "x", "--bootstrap-server", kafka2.bootstrap, "--list")
        assert f"Request {shared_id}: running, 0 partitions, run by mover-audit execute pid {os.getpid()} of " \
               in listed.stdout and f" (a share of the {lease} lease)\n" in listed.stdout, listed.stdout
        sole = StatusStore(b, tool="mover-audit balance", heartbeat_s=60)
        assert sole.claim_lease(lease)[1] is not None  # the share is in the way
        share.finish(shared_id, STOPPED)
        sole_id, _ = sole.claim_lease(lease)
        listed = mover_reassign(tmp_path / "x", "--bootstrap-server", kafka2.bootstrap, "--list")
        assert f"Request {sole_id}: running, 0 partitions, run by mover-audit balance pid {os.getpid()} of " \
               in listed.stdout and f" (holding the {lease} lease)\n" in listed.stdout, listed.stdout
        sole.finish(sole_id, STOPPED)


def test_a_reader_goes_on_from_what_it_read(stores: Callable[..., StatusStore], topic: str) -> None:
    """StatusLog.read keeps what it read and fetches only what was appended since: a store's many reads (a claim,
    each hold and release) see every other machine's records all the same."""
    reader, writer = stores(), stores()
    rid, _ = writer.claim(parts(topic))
    before = reader.log.read()
    assert rid in reader.requests()
    writer.finish(rid, COMPLETED)
    later = reader.log.read()
    assert later[:len(before)] == before and len(later) > len(before)
    assert reader.get(rid).state == COMPLETED
    assert [e.offset for e in later] == sorted({e.offset for e in later})  # nothing read twice
