"""The names moverd gives partition copies, checked against the rule a Kafka broker applies at start-up
(`mover.testing.kafka_names.accepts_partition_dir_name`, Kafka's UnifiedLog.parseTopicPartitionName restated; no Kafka
needed). tests/kafka/test_roundtrip.py checks the same against the real broker.
"""

from __future__ import annotations

import re

import pytest

from mover.storage.names import (
    MAX_FILE_NAME_LENGTH,
    DirKind,
    PartitionDirName,
    TopicPartition,
    current_dir_name,
    delete_dir_name,
    fits_file_name_limit,
    future_dir_name,
    move_dir_name,
    parse_partition_dir,
)
from mover.testing.kafka_names import accepts_partition_dir_name as kafka_accepts

_UUID_HEX = re.compile(r"^[0-9a-f]{32}$")

TP = TopicPartition("my.topic-x", 3)  # '.' and '-' in the topic: names are parsed from their end
U = "0123456789abcdef0123456789abcdef"


def test_the_rule_restated_refuses_what_the_real_broker_refused() -> None:
    # Both names made the real Kafka 3.7 refuse to start (issue 14; docs/operations.md).
    assert not kafka_accepts(f"rt-3.{U}.delete")
    assert not kafka_accepts("rt-0.move")
    assert kafka_accepts("rt-3") and kafka_accepts(f"rt-3.{U}-delete") and kafka_accepts(f"rt-3.{U}-future")


def test_retired_copies_take_kafkas_delete_name() -> None:
    name = delete_dir_name(TP)
    assert kafka_accepts(name), name
    assert name.startswith("my.topic-x-3.") and name.endswith("-delete")
    assert _UUID_HEX.match(name[len("my.topic-x-3."):-len("-delete")])
    assert parse_partition_dir(name) == PartitionDirName(TP, DirKind.DELETE)
    assert delete_dir_name(TP) != name  # unique: moving a partition away twice never collides


def test_a_parked_copy_takes_kafkas_future_name() -> None:
    name = future_dir_name(TP)
    assert kafka_accepts(name), name
    assert _UUID_HEX.match(name[len("my.topic-x-3."):-len("-future")])
    assert parse_partition_dir(name) == PartitionDirName(TP, DirKind.KAFKA_FUTURE)


def test_the_running_move_keeps_the_kip_name_which_kafka_refuses() -> None:
    # Why a clean stop renames it (docs/operations.md): the name itself stays what KIP-113 and its users know.
    assert move_dir_name(TP) == "my.topic-x-3.move"
    assert not kafka_accepts(move_dir_name(TP))
    assert parse_partition_dir(move_dir_name(TP)) == PartitionDirName(TP, DirKind.MOVE)


@pytest.mark.parametrize(("name", "kind"), [
    ("my.topic-x-3", DirKind.CURRENT),
    ("my.topic-x-3.move", DirKind.MOVE),
    (f"my.topic-x-3.{U}.delete", DirKind.LEGACY_DELETE),  # an older moverd's retired copy
    (f"my.topic-x-3.{U}-delete", DirKind.DELETE),
    (f"my.topic-x-3.{U}-future", DirKind.KAFKA_FUTURE),
    (f"my.topic-x-3.{U}-stray", DirKind.KAFKA_STRAY),
])
def test_every_name_old_and_kafkas_is_recognised(name: str, kind: DirKind) -> None:
    assert parse_partition_dir(name) == PartitionDirName(TP, kind)


@pytest.mark.parametrize("name", [
    "meta.properties", "recovery-point-offset-checkpoint", "cleaner-offset-checkpoint.tmp", ".kafka_cleanshutdown",
    "mover-producer-id-block", "bootstrap.checkpoint", "my.topic-x-3.0123-delete", f"my.topic-x-3.{U}-deleted",
    "__cluster_metadata-0",  # KRaft's metadata log, in the first log dir by default: Kafka's Raft layer owns it
])
def test_other_entries_are_not_partitions(name: str) -> None:
    assert parse_partition_dir(name) is None


def test_the_file_name_limit_counts_the_longest_kafka_name() -> None:
    longest = TopicPartition("t" * (MAX_FILE_NAME_LENGTH - len("-0.") - 32 - len("-delete")), 0)
    assert len(delete_dir_name(longest)) == MAX_FILE_NAME_LENGTH and fits_file_name_limit(longest)
    assert len(future_dir_name(longest)) == MAX_FILE_NAME_LENGTH
    assert not fits_file_name_limit(TopicPartition(longest.topic + "t", 0))
    assert current_dir_name(longest) == f"{longest.topic}-0"
