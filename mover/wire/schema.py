"""Message declarations as data: the vocabulary `mover.wire.messages` is written in.

Mirrors Kafka's JSON message schemas (clients/src/main/resources/common/message/*.json): each message is declared
once, with version ranges per field, and `mover.wire.codec` derives every encoding from the declaration. Field
names are snake_case versions of Kafka's (`ThrottleTimeMs` -> `throttle_time_ms`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Api",
    "Array",
    "BOOL",
    "BYTES",
    "FLOAT64",
    "Field",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "NULL",
    "Primitive",
    "RECORDS",
    "STRING",
    "Struct",
    "UINT16",
    "UUID",
    "UVARINT",
    "VARINT",
    "Versions",
]


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; `Versions.parse("3+")`, `"0-4"`, `"2"`, `None` (= no version)."""

    lo: int
    hi: int

    # Versions are int16 on the wire, so "n+" means "up to the largest version a header can carry".
    MAX = 0x7FFF

    @classmethod
    def parse(cls, spec: str | Versions | None) -> Versions:
        if isinstance(spec, Versions):
            return spec
        if spec is None or spec == "none":
            return cls(1, 0)
        if spec.endswith("+"):
            return cls(int(spec[:-1]), cls.MAX)
        if "-" in spec:
            lo, hi = spec.split("-")
            return cls(int(lo), int(hi))
        return cls(int(spec), int(spec))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    def __bool__(self) -> bool:
        return self.lo <= self.hi

    def intersect(self, other: Versions) -> Versions:
        return Versions(max(self.lo, other.lo), min(self.hi, other.hi))


@dataclass(frozen=True, slots=True, eq=False)
class Primitive:
    """A scalar wire type. `size` is its fixed width, or None when it has a length prefix or is a varint."""

    name: str
    size: int | None
    default: Any


INT8 = Primitive("int8", 1, 0)
INT16 = Primitive("int16", 2, 0)
INT32 = Primitive("int32", 4, 0)
INT64 = Primitive("int64", 8, 0)
UINT16 = Primitive("uint16", 2, 0)
FLOAT64 = Primitive("float64", 8, 0.0)
BOOL = Primitive("bool", 1, False)
UUID = Primitive("uuid", 16, uuid.UUID(int=0))
# Zig-zag signed and plain unsigned varints (Kafka's record-level and tagged-field integers).
VARINT = Primitive("varint", None, 0)
UVARINT = Primitive("uvarint", None, 0)
STRING = Primitive("string", None, "")
BYTES = Primitive("bytes", None, b"")
# Record data: nullable bytes on the wire, but the encoder also accepts an opaque object (a file slice) that the
# server sends with sendfile; see `mover.wire.chunks.records_length`.
RECORDS = Primitive("records", None, None)


class _Null:
    """Marker for a declared default of null (Kafka's `"default": "null"`)."""

    def __repr__(self) -> str:
        return "NULL"


NULL: Any = _Null()
_MISSING: Any = object()


@dataclass(eq=False)
class Struct:
    """An ordered group of fields; one is the body of every request and response, and of every array element."""

    fields: tuple[Field, ...]
    name: str = ""
    # Per-(version, flexible) compiled codecs, filled lazily by mover.wire.plans.struct_plan.
    _plans: dict[tuple[int, bool], Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        if len(names) != len(set(names)):
            raise ValueError(f"duplicate field names in {self.name or names}")
        self.field_names = frozenset(names)
        tags: dict[int, list[Field]] = {}
        for f in self.fields:
            if f.tag is not None:
                tags.setdefault(f.tag, []).append(f)
        for tag, fs in tags.items():
            for i, a in enumerate(fs):
                for b in fs[i + 1 :]:
                    if a.tagged_versions.intersect(b.tagged_versions):
                        raise ValueError(f"tag {tag} used twice in overlapping versions in {self.name}")

    def default(self) -> dict[str, Any]:
        return {f.name: f.default_value() for f in self.fields}


@dataclass(frozen=True, eq=False, init=False)
class Array:
    """An array of a primitive type or of structs: `Array(INT32)`, `Array(Field(...), Field(...))`."""

    element: Primitive | Struct

    def __init__(self, *element: Primitive | Struct | Field, name: str = "") -> None:
        if len(element) == 1 and isinstance(element[0], Primitive | Struct):
            elem: Primitive | Struct = element[0]
        else:
            if not all(isinstance(e, Field) for e in element):
                raise TypeError("Array takes one Primitive, one Struct, or Fields")
            elem = Struct(tuple(element), name)  # type: ignore[arg-type]
        object.__setattr__(self, "element", elem)


FieldType = Primitive | Array | Struct


@dataclass(frozen=True, eq=False, init=False)
class Field:
    """One field: `Field(name, type, versions="0+", nullable=None, tag=None, tagged=None, default=...)`.

    Args:
        name: snake_case key in the decoded dict.
        type: a Primitive, an Array, or a Struct (a nested non-array struct, e.g. Fetch's tagged CurrentLeader).
        versions: versions the field exists in (`"3+"`, `"0-4"`); absent versions decode to the default.
        nullable: versions where null (None) is allowed; strings, bytes, records, arrays, structs only.
        tag: tagged-field number; the field then lives in the tagged section in `tagged` versions (default:
            `versions`) and is written only when its value differs from the default, as Kafka does.
        default: value when absent; `NULL` for a null default. Without one: 0, False, "", b"", [], zero UUID,
            and a struct of defaults.
    """

    name: str
    type: FieldType
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged_versions: Versions
    _default: Any

    def __init__(
        self,
        name: str,
        type: FieldType,
        versions: str | Versions = "0+",
        *,
        nullable: str | Versions | None = None,
        tag: int | None = None,
        tagged: str | Versions | None = None,
        default: Any = _MISSING,
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "name", name)
        setattr_(self, "type", type)
        vs = Versions.parse(versions)
        setattr_(self, "versions", vs)
        nv = Versions.parse(nullable)
        if nv and isinstance(type, Primitive) and type.size is not None:
            raise ValueError(f"{name}: fixed-size types cannot be nullable")
        setattr_(self, "nullable", nv)
        setattr_(self, "tag", tag)
        tv = Versions.parse(tagged) if tagged is not None else (vs if tag is not None else Versions.parse(None))
        setattr_(self, "tagged_versions", tv)
        setattr_(self, "_default", default)

    def default_value(self) -> Any:
        d = self._default
        if d is NULL:
            return None
        if d is not _MISSING:
            return d
        t = self.type
        if isinstance(t, Primitive):
            return t.default
        if isinstance(t, Array):
            return []
        return t.default()

    def default_factory(self) -> Callable[[], Any]:
        """A cheap producer of fresh defaults (mutable defaults must not be shared between messages)."""
        d = self._default
        t = self.type
        if d is NULL:
            return lambda: None
        if d is not _MISSING:
            return lambda: d
        if isinstance(t, Array):
            return list
        if isinstance(t, Struct):
            return t.default
        v = t.default
        return lambda: v


@dataclass(eq=False)
class Api:
    """A Kafka API: key, the version range we speak, the flexible versions, and request and response bodies."""

    key: int
    name: str
    valid: Versions
    flexible: Versions
    request: Struct
    response: Struct

    def __init__(
        self,
        key: int,
        name: str,
        *,
        valid: str,
        flexible: str | None,
        request: list[Field] | tuple[Field, ...],
        response: list[Field] | tuple[Field, ...],
    ) -> None:
        self.key = key
        self.name = name
        self.valid = Versions.parse(valid)
        self.flexible = Versions.parse(flexible)
        self.request = Struct(tuple(request), f"{name}Request")
        self.response = Struct(tuple(response), f"{name}Response")

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible

    def request_header_version(self, version: int) -> int:
        return 2 if version in self.flexible else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions answers with header v0 whatever the version, so a client that sent a version the broker
        # does not know can still read the (v0) error reply; docs/kafka-compat.md#apiversions, KIP-511.
        if self.key == 18:
            return 0
        return 1 if version in self.flexible else 0

    def __repr__(self) -> str:
        return f"Api({self.name}, key={self.key}, versions={self.valid.lo}-{self.valid.hi})"
