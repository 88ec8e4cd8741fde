"""KIP-113's order for a reassignment's log dirs (mover/admin/reassign/new_replica_dirs.py) against a real moverd: the
dir of a replica the broker does not hold yet is sent first (moverd answers UNKNOWN_TOPIC_OR_PARTITION or
REPLICA_NOT_AVAILABLE and remembers it), and the replica is then created there; a dir the broker refuses fails that
partition only; once at its final replicas, a replica that stayed on its broker is moved between its dirs. Kafka 3.7's
side is tests/kafka/test_kip113_system.py."""

from __future__ import annotations

from pathlib import Path

from kafka.admin import NewPartitions, NewTopic

from mover.admin.client import Client
from mover.admin.common import TopicPartitionReplica as TPR
from mover.admin.reassign.new_replica_dirs import NewReplicaDirs
from mover.testing.moverd import Moverd
from mover.testing.placement import describe_placement
from mover.testing.wait import wait_for
from mover.wire.errors import ErrorCode
from tests.api.helpers import admin


def test_a_replica_is_created_in_the_dir_sent_before_it_exists(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, admin(d) as a, Client(f"127.0.0.1:{d.port}", timeout=10) as client:
        a.create_topics([NewTopic("t", 1, 1)])
        # moverd puts a request's partition in the dir with the most free space, on a tie (one filesystem here) the
        # first by name (mover/log/topics.py): ask for the last one, which it would not pick.
        wanted = max(str(p) for p in d.dirs)
        assert describe_placement(client)[("t", 0)].current != wanted
        dirs = NewReplicaDirs(client, {TPR("t", 1, 0): wanted, TPR("new", 0, 0): wanted, TPR("t", 2, 0): "/bogus"},
                              timeout_s=5)
        # Not there yet (a known topic: REPLICA_NOT_AVAILABLE; an unknown one: UNKNOWN_TOPIC_OR_PARTITION): no error,
        # the dir remembered; a dir that is not one of the broker's fails its partition alone.
        errors = dirs.before_step({("t", 1): [0], ("new", 0): [0], ("t", 2): [0]})
        assert list(errors) == [("t", 2)] and errors[("t", 2)].code == ErrorCode.LOG_DIR_NOT_FOUND, errors
        assert "refused log dir /bogus for replica t-2-0: LOG_DIR_NOT_FOUND" in str(errors[("t", 2)])
        a.create_topics([NewTopic("new", 1, 1)])
        a.create_partitions({"t": NewPartitions(2)})
        # Created there, before anything is re-sent: not moved there afterwards.
        placed = describe_placement(client)
        assert (placed[("new", 0)].current, placed[("new", 0)].future) == (wanted, None)
        assert (placed[("t", 1)].current, placed[("t", 1)].future) == (wanted, None)
        assert dirs.after_step({("t", 1): [0], ("new", 0): [0]}) == {}
        assert not dirs.pending
        # At its final replicas: a replica that stayed on its broker (t-0) goes to its dir between the broker's dirs.
        dirs.wanted[TPR("t", 0, 0)] = wanted
        assert dirs.settle(("t", 0), [0]) == {}
        wait_for(lambda: describe_placement(client)[("t", 0)].current == wanted, 30, "t-0 moved to its dir")


def test_a_replica_still_not_there_after_the_timeout_stays_pending(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, Client(f"127.0.0.1:{d.port}", timeout=10) as client:
        dirs = NewReplicaDirs(client, {TPR("ghost", 0, 0): str(d.dirs[1])}, timeout_s=0.3)
        assert dirs.after_step({("ghost", 0): [0]}) == {}
        assert list(dirs.pending) == [TPR("ghost", 0, 0)]
        assert dirs.poll() == {} and list(dirs.pending) == [TPR("ghost", 0, 0)]
        # The step is over, yet the broker still does not hold it: that partition fails, naming the replica.
        errors = dirs.step_over(("ghost", 0))
        assert "did not appear on broker 0" in str(errors[("ghost", 0)]) and not dirs.pending
        assert errors[("ghost", 0)].code == ErrorCode.REPLICA_NOT_AVAILABLE
