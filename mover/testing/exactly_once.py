"""The system tests' verdict: every acknowledged record consumed exactly once, in order per partition. Kept apart
from the clients so one rule judges every test and bench, whatever client wrote or read the records."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mover.testing.consumers import PyConsumer, end_offsets, wait_caught_up
from mover.testing.history import TP, VALUE_RE, Acked, Consumed


@dataclass
class Report:
    """What one consumer's view says about the acknowledged records."""

    consumer: str
    consumed: int = 0
    acked: int = 0
    lost: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)


def check(consumer: str, consumed: Consumed, ends: dict[TP, int], acked: list[Acked]) -> Report:
    """Every acknowledged record consumed exactly once, at the offset it was acknowledged with; each partition
    read as offsets 0..end-1 without a gap, a repeat or a duplicate value; each producer's records in the order
    it sent them."""
    report = Report(consumer, consumed=consumed.count(), acked=len(acked))
    by_offset: dict[TP, dict[int, bytes]] = {}
    for tp, end in ends.items():
        got = consumed.records.get(tp, [])
        offsets = [o for o, _ in got]
        if offsets != list(range(end)):
            repeats = sum(n - 1 for n in Counter(offsets).values())
            report.duplicates += repeats
            report.problem(f"{consumer}: {tp} consumed offsets are not 0..{end - 1} once each in order "
                           f"({len(offsets)} records, {repeats} repeated, first {offsets[:3]}, last {offsets[-3:]})")
        values = Counter(v for _, v in got)
        dup_values = [v for v, n in values.items() if n > 1]
        if dup_values:
            report.duplicates += sum(values[v] - 1 for v in dup_values)
            report.problem(f"{consumer}: {tp} holds {len(dup_values)} values more than once, e.g. {dup_values[0]!r}")
        by_offset[tp] = dict(got)
        # Per producer: seq strictly increasing along the log.
        last_seq: dict[str, int] = {}
        for offset, value in got:
            m = VALUE_RE.match(value.decode(errors="replace"))
            if m is None:
                report.problem(f"{consumer}: {tp}@{offset} holds a value no producer wrote: {value[:60]!r}")
                continue
            if (m["topic"], int(m["partition"])) != tp:
                report.problem(f"{consumer}: {tp}@{offset} holds a value meant for another partition: {value[:60]!r}")
            producer, seq = m["producer"], int(m["seq"])
            if producer in last_seq and seq <= last_seq[producer]:
                report.out_of_order += 1
                report.problem(f"{consumer}: {tp}@{offset}: {producer} seq {seq} after {last_seq[producer]}")
            last_seq[producer] = seq
    for a in acked:
        tp = (a.topic, a.partition)
        if tp not in ends:
            report.problem(f"{consumer}: acked record on unchecked partition {tp}")
            continue
        if by_offset[tp].get(a.offset) != a.value:
            report.lost += 1
            report.problem(f"{consumer}: acked {a.value[:40]!r} at {tp}@{a.offset} but consumed "
                           f"{by_offset[tp].get(a.offset, b'<nothing>')[:40]!r} there")
    return report


def assert_clean(report: Report) -> None:
    assert (report.lost, report.duplicates, report.out_of_order) == (0, 0, 0) and not report.problems, \
        f"{report.consumer}: lost {report.lost}, duplicates {report.duplicates}, out of order " \
        f"{report.out_of_order}:\n" + "\n".join(report.problems)


def read_back(name: str, bootstrap: str, tps: list[TP], acked: list[Acked]) -> None:
    """Read `tps` from the start to their ends now and assert every acknowledged record is there once, in order."""
    ends = end_offsets(bootstrap, tps)
    reader = PyConsumer(name, bootstrap, tps).start()
    wait_caught_up([reader], ends)
    assert_clean(check(name, reader.stop(), ends, acked))
