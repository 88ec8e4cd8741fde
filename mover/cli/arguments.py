"""argparse pieces every command line shares (mover-log-dirs, mover-reassign, mover-audit): a parser whose usage
errors are one line and exit 2, and the value types of their options, so one option reads the same in every tool."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from mover.admin.limits import MAX_RATE, RATE_RANGE
from mover.cli.common import EXIT_USAGE


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors: scripts and humans see the problem, not a usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def float_in(holds: Callable[[float], bool], expected: str, out_of_range: str | None = None) -> Callable[[str], float]:
    """An option's type: a number for which `holds` is true. Refused with "expected <expected>, got '...'" (and,
    when the number parses but is out of range, "expected <out_of_range>" if given)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not holds(value):
            raise argparse.ArgumentTypeError(f"expected {out_of_range or expected}, got {text!r}")
        return value

    return parse


def _integer(text: str, minimum: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _integer(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    return _integer(text, 0, "a non-negative integer")


def _rate(text: str, none: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected bytes per second (an integer){none}, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of bytes per second{none}, got {text!r}")
    if value > MAX_RATE:
        raise argparse.ArgumentTypeError(f"expected bytes per second ({RATE_RANGE}){none}, got {text!r}")
    return value


def rate(text: str) -> int:
    """A throttle in bytes per second, as Kafka takes it (a long: a larger value is refused by every broker)."""
    return _rate(text, "")


def rate_or_minus_one(text: str) -> int:
    """A throttle, or -1 for none."""
    return -1 if text.strip() == "-1" else _rate(text, " or -1 for none")


def seconds_up_to(limit: float) -> Callable[[str], float]:
    """A type for a duration in (0, limit] seconds."""

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
        if not 0 < value <= limit:
            raise argparse.ArgumentTypeError(f"expected seconds between 0 and {limit:g}, got {text!r}")
        return value

    return seconds


def broker_ids(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated broker ids, got {text!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected comma-separated broker ids, got {text!r}")
    return ids


def name_list(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated topic names, got {text!r}")
    return names
