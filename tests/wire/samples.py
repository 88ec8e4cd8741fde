"""Random but valid message values for any declared struct and version (tests only)."""

from __future__ import annotations

import random
import uuid
from typing import Any

from mover.wire.schema import Array, Field, Primitive, Struct

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "varint": (-(2**31), 2**31 - 1),
    "uvarint": (0, 2**32 - 1),
}
_TEXT = "abcxyz-._ é中"


def _primitive(rng: random.Random, t: Primitive) -> Any:
    if t.name in _INT_RANGES:
        lo, hi = _INT_RANGES[t.name]
        return rng.choice([lo, hi, 0, -1 if lo < 0 else 1, rng.randint(lo, hi)])
    if t.name == "bool":
        return rng.random() < 0.5
    if t.name == "float64":
        return rng.choice([0.0, -1.5, 1e300, rng.random()])
    if t.name == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if t.name == "string":
        return "".join(rng.choice(_TEXT) for _ in range(rng.randint(0, 12)))
    if t.name in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 40))
    raise AssertionError(t.name)


def sample_struct(rng: random.Random, s: Struct, version: int, depth: int = 0) -> dict[str, Any]:
    return {f.name: _sample_field(rng, f, version, depth) for f in s.fields}


def _sample_field(rng: random.Random, f: Field, version: int, depth: int) -> Any:
    if version not in f.versions:
        return f.default_value()
    if version in f.nullable and rng.random() < 0.2:
        return None
    t = f.type
    if isinstance(t, Primitive):
        return _primitive(rng, t)
    if isinstance(t, Struct):
        return sample_struct(rng, t, version, depth + 1)
    assert isinstance(t, Array)
    n = rng.randint(0, 3 if depth < 3 else 1)
    if isinstance(t.element, Struct):
        return [sample_struct(rng, t.element, version, depth + 1) for _ in range(n)]
    return [_primitive(rng, t.element) for _ in range(n)]
