"""The iteration order of Java's HashMap and HashSet, so the tools print what Kafka's own tools print, byte for byte.

Kafka's command-line tools (kafka-log-dirs.sh, kafka-reassign-partitions.sh) build their output from HashMaps and
HashSets: the order of JSON keys, of log dirs, of partitions and of the ids in "brokers 1,2" lines is the order in
which Java iterates those, a function of the keys' hashCode, the table size and the insertion order. This module
reproduces it (docs/kafka-compat.md, "Output order of Kafka 3.x's tools"):

- a key's bucket is `(h ^ (h >>> 16)) & (capacity - 1)` with h its 32-bit Java hashCode;
- iteration walks the buckets in index order, and a bucket's keys in insertion order (a resize splits a bucket
  keeping the order; a bucket is never turned into a tree here: that needs 8 keys in one bucket of a 64+ table);
- the table starts at 16 (`new HashMap<>()`) or at the power of two >= the capacity asked for, and doubles whenever
  the size passes 3/4 of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
DEFAULT_CAPACITY = 16
LOAD_FACTOR = 0.75
_MASK = 0xFFFFFFFF


def string_hash(s: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, as an unsigned 32-bit value."""
    h = 0
    data = s.encode("utf-16-le")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] | data[i + 1] << 8)) & _MASK
    return h


def int_hash(i: int) -> int:
    """java.lang.Integer.hashCode."""
    return i & _MASK


def topic_partition_hash(topic: str, partition: int) -> int:
    """org.apache.kafka.common.TopicPartition.hashCode: 31 * (31 + partition) + topic.hashCode()."""
    return (31 * ((31 + partition) & _MASK) + string_hash(topic)) & _MASK


def table_size(n: int, initial_capacity: int | None = None) -> int:
    """The table length of a HashMap holding `n` entries after `n` puts (`initial_capacity`: the constructor's)."""
    cap = DEFAULT_CAPACITY if initial_capacity is None else _power_of_two_at_least(initial_capacity)
    while n > int(cap * LOAD_FACTOR):
        cap *= 2
    return cap


def hash_set_capacity(n: int) -> int:
    """What `new HashSet<>(collection)` of n elements asks its HashMap for."""
    return max(int(n / LOAD_FACTOR) + 1, DEFAULT_CAPACITY)


def order(items: Iterable[T], hash_of: Callable[[T], int], initial_capacity: int | None = None) -> list[T]:
    """`items` (distinct keys, in insertion order) in the order a Java HashMap/HashSet iterates them."""
    keyed = list(items)
    mask = table_size(len(keyed), initial_capacity) - 1
    # sorted() is stable: keys in one bucket keep their insertion order.
    return sorted(keyed, key=lambda item: _spread(hash_of(item)) & mask)


def _spread(h: int) -> int:
    return (h ^ (h >> 16)) & _MASK


def _power_of_two_at_least(c: int) -> int:
    cap = 1
    while cap < c:
        cap *= 2
    return cap
