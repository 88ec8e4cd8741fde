"""Admin requests racing on one broker: threads that create, grow and delete the same topics at once, each on its
own connection, and what the broker answered. The CI stress test (tests/api/test_topic_races.py) and the longer run
in bench/admin_race.py share it.

    outcome = race_topic_admin(port, ["race"], threads=4, seconds=3.0)
    assert outcome.unexpected == []
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from mover.testing.raw import RawClient
from mover.wire import ErrorCode
from mover.wire.messages import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS

# What Kafka answers to each request when another one races it on the same topic; anything else is a finding.
EXPECTED: dict[str, frozenset[int]] = {
    "create": frozenset({ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS}),
    "grow": frozenset({ErrorCode.NONE, ErrorCode.INVALID_PARTITIONS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}),
    "delete": frozenset({ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}),
}
MAX_PARTITIONS = 8  # a grow goes at most this far, so a long run stays small on disk


@dataclass
class RaceOutcome:
    answers: Counter[tuple[str, int]] = field(default_factory=Counter)  # (request, error code) -> how many
    unexpected: list[str] = field(default_factory=list)  # one line per answer outside EXPECTED

    @property
    def requests(self) -> int:
        return sum(self.answers.values())


def race_topic_admin(port: int, topics: list[str], *, threads: int = 4, seconds: float = 3.0,
                     seed: int = 0) -> RaceOutcome:
    """`threads` connections, each sending CreateTopics, CreatePartitions and DeleteTopics of a topic drawn from
    `topics` in random order until `seconds` have passed. Returns every answer's error code by request."""
    outcome = RaceOutcome()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def one(n: int) -> None:
        rnd = random.Random(seed * 1000 + n)
        with RawClient(port) as c:
            while time.monotonic() < deadline:
                name = rnd.choice(topics)
                kind = rnd.choice(("create", "grow", "delete"))
                if kind == "create":
                    body = c.call(CREATE_TOPICS, 5, {"topics": [
                        {"name": name, "num_partitions": rnd.randint(1, 3), "replication_factor": 1,
                         "assignments": [], "configs": []}], "timeout_ms": 30000, "validate_only": False})[1]
                    result = body["topics"][0]
                elif kind == "grow":
                    body = c.call(CREATE_PARTITIONS, 3, {"topics": [
                        {"name": name, "count": rnd.randint(2, MAX_PARTITIONS), "assignments": None}],
                        "timeout_ms": 30000, "validate_only": False})[1]
                    result = body["results"][0]
                else:
                    body = c.call(DELETE_TOPICS, 4, {"topic_names": [name], "timeout_ms": 30000})[1]
                    result = body["responses"][0]
                code = result["error_code"]
                with lock:
                    outcome.answers[(kind, code)] += 1
                    if code not in EXPECTED[kind]:
                        outcome.unexpected.append(f"{kind} {name}: {code} {result.get('error_message')}")

    workers = [threading.Thread(target=one, args=(n,), name=f"admin-race-{n}") for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return outcome
