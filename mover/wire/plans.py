"""A struct's plan for one (version, flexible): which closure reads and writes each field, in declared order.

A plan is where the declaration is read, once per struct and version, and cached on the Struct; the codec's entry
points and the generated functions only run what it decided. Arrays and nested structs are planned here too,
because a field's closure needs its element's plan and a plan needs its fields' closures: the two recurse, so
they share this module. The plan then hands itself to the generator (codegen.py) for its decode and encode.
"""

from __future__ import annotations

import copy
import itertools
import struct
from collections.abc import Callable
from typing import Any

from mover.wire.codegen import MISSING, compile_plan
from mover.wire.cursor import Reader, Writer
from mover.wire.errors import DecodeError, EncodeError
from mover.wire.primitives import I8, Dec, Enc, length_codec, primitive_codec
from mover.wire.schema import Array, Field, Primitive, Struct

__all__ = ["MIN_ELEMENT_BYTES", "Plan", "struct_plan"]

# An array element occupies at least this many bytes even if its declared fields are all absent: Kafka's
# generated readers refuse `count > remaining` on the same assumption, and it is what stops a 2**31 count of empty
# structs from allocating 2**31 dicts.
MIN_ELEMENT_BYTES = 1


def _array_codec(t: Array, version: int, flexible: bool, nullable: bool) -> tuple[Enc, Dec, int]:
    put_len, get_len = length_codec(flexible, short=False)
    elem = t.element
    if isinstance(elem, Struct):
        plan = struct_plan(elem, version, flexible)
        e_enc, e_dec, e_min = plan.encode, plan.decode, plan.min_size
    else:
        e_enc, e_dec, e_min = primitive_codec(elem, flexible, nullable=False)
    e_min = max(e_min, MIN_ELEMENT_BYTES)
    row = plan.row if isinstance(elem, Struct) else None

    def enc(w: Writer, v: Any) -> None:
        if v is None:
            if not nullable:
                raise EncodeError("null for a non-nullable array")
            put_len(w, -1)
            return
        if not isinstance(v, list | tuple):
            raise EncodeError(f"expected a list, got {type(v).__name__}")
        put_len(w, len(v))
        if row is not None and v and type(v[0]) is tuple:
            _encode_rows(w, row, v)
            return
        for item in v:
            e_enc(w, item)

    def dec(r: Reader) -> list[Any] | None:
        n = get_len(r)
        if n == -1:
            if not nullable:
                raise DecodeError("null for a non-nullable array")
            return None
        # Check before allocating: a hostile count must not make us build more elements than the frame can hold.
        if n * e_min > r.end - r.pos:
            raise DecodeError(f"array of {n} elements cannot fit in {r.end - r.pos} bytes")
        return [e_dec(r) for _ in range(n)]

    return enc, dec, (1 if flexible else 4)


# struct format characters of the fixed-width primitives a row may hold (bool as "?": any truthy value is 1).
_ROW_FORMATS = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "float64": "d", "bool": "?"}


def _encode_rows(w: Writer, row: struct.Struct, rows: list[Any] | tuple[Any, ...]) -> None:
    try:
        w.buf += b"".join(itertools.starmap(row.pack, rows))
    except (struct.error, TypeError) as e:
        raise EncodeError(f"a row does not fit {row.format!r}: {e}") from None


def _struct_field_codec(t: Struct, version: int, flexible: bool, nullable: bool) -> tuple[Enc, Dec, int]:
    plan = struct_plan(t, version, flexible)
    if not nullable:
        return plan.encode, plan.decode, plan.min_size

    # Kafka writes a nullable struct as an int8 presence marker (-1 null, 1 present).
    def enc(w: Writer, v: Any) -> None:
        if v is None:
            w.buf += b"\xff"
        else:
            w.buf += b"\x01"
            plan.encode(w, v)

    def dec(r: Reader) -> Any:
        marker = I8.unpack_from(r.mv, r.take(1))[0]
        if marker < 0:
            return None
        return plan.decode(r)

    return enc, dec, 1


def _field_codec(f: Field, version: int, flexible: bool) -> tuple[Enc, Dec, int]:
    nullable = version in f.nullable
    t = f.type
    if isinstance(t, Primitive):
        return primitive_codec(t, flexible, nullable)
    if isinstance(t, Array):
        return _array_codec(t, version, flexible, nullable)
    return _struct_field_codec(t, version, flexible, nullable)


class Plan:
    """A struct compiled for one (version, flexible): what to read and write, in order, and the fixed minimum size.

    `decode(reader)` and `encode(writer, value)` are functions generated from the declaration (see `compile_plan`):
    one straight-line function per struct and version instead of a loop calling a closure per field, which was
    a third of a one-record Produce's time on the broker (docs/data-path.md, "Performance")."""

    __slots__ = ("regular", "tagged", "tag_index", "absent", "names", "min_size", "flexible", "name", "row", "fixed",
                 "inline", "decode", "encode")

    def __init__(self, s: Struct, version: int, flexible: bool) -> None:
        self.name = s.name
        self.flexible = flexible
        self.names = s.field_names
        self.regular: list[tuple[str, Enc, Dec, Callable[[], Any]]] = []
        # The struct format character of each regular field that is a fixed-width number or bool, else None.
        self.fixed: list[str | None] = []
        # How the generated decoder reads each regular field inline (see compile_plan), or None: through its closure.
        self.inline: list[tuple[Any, ...] | None] = []
        self.tagged: list[tuple[int, str, Enc, Dec, Any]] = []
        self.absent: list[tuple[str, Callable[[], Any]]] = []
        size = 1 if flexible else 0  # the empty tagged-field section
        for f in s.fields:
            if version not in f.versions:
                self.absent.append((f.name, f.default_factory()))
            elif f.tag is not None and version in f.tagged_versions:
                if not flexible:
                    raise TypeError(f"{s.name}.{f.name}: tagged field in a non-flexible version {version}")
                enc, dec, _ = _field_codec(f, version, flexible)
                self.tagged.append((f.tag, f.name, enc, dec, f.default_value()))
            else:
                enc, dec, min_size = _field_codec(f, version, flexible)
                self.regular.append((f.name, enc, dec, f.default_factory()))
                t = f.type
                self.fixed.append(_ROW_FORMATS.get(t.name) if isinstance(t, Primitive) else None)
                self.inline.append(_inline_kind(f, version, flexible))
                size += min_size
        self.tagged.sort(key=lambda t: t[0])
        self.tag_index = {t[0]: t for t in self.tagged}
        self.min_size = size
        # Rows (tuples in field order) are allowed when every field sent is a fixed-width number or bool and no
        # tagged field can be sent: one Struct packs a whole element; "x" is the empty tagged-field section (0).
        self.row: struct.Struct | None = None
        sent = [f for f in s.fields if version in f.versions]
        if sent and not self.tagged and all(
            isinstance(f.type, Primitive) and f.type.name in _ROW_FORMATS and version not in f.nullable for f in sent
        ):
            self.row = struct.Struct(">" + "".join(_ROW_FORMATS[f.type.name] for f in sent) + ("x" if flexible else ""))
        self.decode: Callable[[Reader], dict[str, Any]]
        self.encode: Callable[[Writer, Any], None]
        self.decode, self.encode = compile_plan(self)

    def tag_defaults(self, out: dict[str, Any]) -> None:
        for _tag, name, _enc, _dec, default in self.tagged:
            out[name] = _fresh(default)

    def decode_tagged(self, r: Reader, out: dict[str, Any]) -> None:
        """The tagged-field section: defaults first, then whatever the message carries."""
        for _tag, name, _enc, _dec, default in self.tagged:
            out[name] = _fresh(default)
        count = r.uvarint()
        # Each tagged field takes at least two bytes (tag and size), so a count can be checked up front too.
        if count * 2 > r.remaining():
            raise DecodeError(f"{count} tagged fields cannot fit in {r.remaining()} bytes")
        for _ in range(count):
            tag = r.uvarint()
            size = r.uvarint()
            start = r.take(size)
            known = self.tag_index.get(tag)
            if known is None:
                continue  # an unknown tag is skippable by design: that is what tagged fields are for
            sub = Reader(r.mv, start, start + size)
            out[known[1]] = known[3](sub)
            if sub.pos != sub.end:
                raise DecodeError(f"{self.name}: tagged field {tag} has {sub.end - sub.pos} trailing bytes")

    def encode_tagged(self, w: Writer, get: Callable[[str, Any], Any]) -> None:
        found = []
        for tag, name, enc, _dec, default in self.tagged:
            v = get(name, MISSING)
            # Kafka writes a tagged field only when it differs from its default; readers fill the default in.
            if v is MISSING or v == default:
                continue
            sub = Writer()
            enc(sub, v)
            if sub.chunks:
                raise EncodeError(f"{self.name}.{name}: record data cannot live in a tagged field")
            found.append((tag, sub.buf))
        w.uvarint(len(found))
        for tag, data in found:
            w.uvarint(tag)
            w.uvarint(len(data))
            w.buf += data


def _inline_kind(f: Field, version: int, flexible: bool) -> tuple[Any, ...] | None:
    """("string" | "bytes" | "records", nullable) or ("array", nullable, element plan, minimum element size) for
    the fields the generated decoder reads inline; None for the rest (fixed-width ones are grouped separately)."""
    nullable = version in f.nullable
    t = f.type
    if isinstance(t, Primitive):
        if t.name == "string":
            return ("string", nullable)
        if t.name in ("bytes", "records"):
            return (t.name, nullable)
        return None
    if isinstance(t, Array) and isinstance(t.element, Struct):
        plan = struct_plan(t.element, version, flexible)
        return ("array", nullable, plan, max(plan.min_size, MIN_ELEMENT_BYTES))
    return None


def _fresh(value: Any) -> Any:
    if isinstance(value, list | dict):
        return copy.deepcopy(value)
    return value


def struct_plan(s: Struct, version: int, flexible: bool) -> Plan:
    key = (version, flexible)
    plan = s._plans.get(key)
    if plan is None:
        plan = s._plans[key] = Plan(s, version, flexible)
    return plan
