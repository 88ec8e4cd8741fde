"""One generic encoder and decoder for every message declared with `mover.wire.schema`.

No I/O here: bytes in, dicts out; dicts in, chunks out. Each (struct, version, flexible) is compiled once into a
list of per-field closures, so encoding 10,000 partitions does not re-read the declaration 10,000 times.

Representation: a struct is a plain `dict` keyed by snake_case field names; arrays are lists; strings `str`;
bytes `bytes`; uuids `uuid.UUID`; null `None`. For encoding, an element of an array of structs whose fields (in that
version) are all fixed-width numbers or bools may also be a `tuple` of the values in declared order: such rows are
packed with one precompiled `struct.Struct` each, which is what keeps a DescribeLogDirs answer of 10,000 partitions
to a few milliseconds (the layout still comes from the declaration; nothing else describes the message).
Decoding returns every declared field, those absent from the version set to their default, so handlers read
`request["isolation_level"]` whatever the version.
"""

from __future__ import annotations

import copy
import itertools
import struct
import uuid
from collections.abc import Callable
from typing import Any

from mover.wire.errors import DecodeError, EncodeError
from mover.wire.file_region import FileRegion
from mover.wire.schema import Array, Field, Primitive, Struct

__all__ = ["Chunk", "decode_struct", "encode_struct", "frame_length", "join_chunks", "records_length"]

# A chunk of encoded output: bytes, or a FileRegion (record data the transport sends from its file with sendfile).
Chunk = bytes | FileRegion

# Kafka reads unsigned varints of at most 5 bytes (ByteUtils.readUnsignedVarint): 35 bits cover an int32, and
# refusing a sixth byte stops a stream of 0x80s from spinning the decoder.
MAX_VARINT_BYTES = 5

# Non-flexible strings carry an int16 length (Kafka's STRING type), so that is the longest we can write.
MAX_SHORT_STRING = 0x7FFF

# An array element occupies at least this many bytes even if its declared fields are all absent: Kafka's
# generated readers refuse `count > remaining` on the same assumption, and it is what stops a 2**31 count of empty
# structs from allocating 2**31 dicts.
MIN_ELEMENT_BYTES = 1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_F64 = struct.Struct(">d")

_MISSING: Any = object()


def records_length(value: bytes | bytearray | memoryview | FileRegion) -> int:
    """Size in bytes of a chunk or a `records` value."""
    return value.length if isinstance(value, FileRegion) else len(value)


def frame_length(chunks: list[Chunk]) -> int:
    return sum(records_length(c) for c in chunks)


def join_chunks(chunks: list[Chunk]) -> bytes:
    """All chunks as one bytes object; FileRegions are read (tests, small clients)."""
    out = bytearray()
    for c in chunks:
        out += c.read() if isinstance(c, FileRegion) else c
    return bytes(out)


# ---------------------------------------------------------------------------------------------------------- writer


class _Writer:
    __slots__ = ("buf", "chunks")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.chunks: list[Chunk] = []

    def uvarint(self, value: int) -> None:
        if value < 0 or value > 0xFFFFFFFF:
            raise EncodeError(f"unsigned varint out of range: {value}")
        buf = self.buf
        while value >= 0x80:
            buf.append((value & 0x7F) | 0x80)
            value >>= 7
        buf.append(value)

    def opaque(self, value: FileRegion) -> None:
        if self.buf:
            self.chunks.append(bytes(self.buf))
            self.buf = bytearray()
        self.chunks.append(value)

    def finish(self) -> list[Chunk]:
        if self.buf:
            self.chunks.append(bytes(self.buf))
            self.buf = bytearray()
        return self.chunks


class _Reader:
    __slots__ = ("mv", "pos", "end")

    def __init__(self, mv: memoryview, pos: int, end: int) -> None:
        self.mv = mv
        self.pos = pos
        self.end = end

    def take(self, n: int) -> int:
        p = self.pos
        e = p + n
        if n < 0 or e > self.end:
            raise DecodeError(f"need {n} bytes at offset {p}, have {self.end - p}")
        self.pos = e
        return p

    def remaining(self) -> int:
        return self.end - self.pos

    def uvarint(self) -> int:
        mv, pos, end = self.mv, self.pos, self.end
        value = 0
        shift = 0
        for _ in range(MAX_VARINT_BYTES):
            if pos >= end:
                raise DecodeError("truncated varint")
            b = mv[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                if value > 0xFFFFFFFF:
                    raise DecodeError("varint larger than 32 bits")
                return value
            shift += 7
        raise DecodeError(f"varint longer than {MAX_VARINT_BYTES} bytes")


# ------------------------------------------------------------------------------------------ primitive codecs

Enc = Callable[[_Writer, Any], None]
Dec = Callable[[_Reader], Any]


def _fixed(st: struct.Struct) -> tuple[Enc, Dec]:
    pack, unpack_from, size = st.pack, st.unpack_from, st.size

    def enc(w: _Writer, v: Any) -> None:
        if type(v) is bool or not isinstance(v, int | float):
            raise EncodeError(f"expected a number, got {v!r}")
        w.buf += pack(v)

    def dec(r: _Reader) -> Any:
        return unpack_from(r.mv, r.take(size))[0]

    return enc, dec


def _bool_enc(w: _Writer, v: Any) -> None:
    if not isinstance(v, bool):
        raise EncodeError(f"expected a bool, got {v!r}")
    w.buf.append(1 if v else 0)


def _bool_dec(r: _Reader) -> bool:
    return r.mv[r.take(1)] != 0


def _uuid_enc(w: _Writer, v: Any) -> None:
    if not isinstance(v, uuid.UUID):
        raise EncodeError(f"expected a uuid.UUID, got {v!r}")
    w.buf += v.bytes


def _uuid_dec(r: _Reader) -> uuid.UUID:
    p = r.take(16)
    return uuid.UUID(bytes=bytes(r.mv[p : p + 16]))


def _uvarint_enc(w: _Writer, v: Any) -> None:
    if type(v) is bool or not isinstance(v, int):
        raise EncodeError(f"expected an int, got {v!r}")
    w.uvarint(v)


def _uvarint_dec(r: _Reader) -> int:
    return r.uvarint()


def _varint_enc(w: _Writer, v: Any) -> None:
    if type(v) is bool or not isinstance(v, int) or not -(2**31) <= v < 2**31:
        raise EncodeError(f"expected an int32, got {v!r}")
    w.uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)


def _varint_dec(r: _Reader) -> int:
    u = r.uvarint()
    return (u >> 1) ^ -(u & 1)


def _length_codec(flexible: bool, short: bool) -> tuple[Callable[[_Writer, int], None], Callable[[_Reader], int]]:
    """Length prefixes: -1 means null. Compact = uvarint(n + 1); classic = int16 (strings) or int32."""
    if flexible:

        def enc(w: _Writer, n: int) -> None:
            w.uvarint(n + 1)

        def dec(r: _Reader) -> int:
            return r.uvarint() - 1

        return enc, dec
    st = _I16 if short else _I32
    pack, unpack_from, size = st.pack, st.unpack_from, st.size

    def enc_c(w: _Writer, n: int) -> None:
        try:
            w.buf += pack(n)
        except struct.error:
            raise EncodeError(f"length {n} does not fit its prefix") from None

    def dec_c(r: _Reader) -> int:
        n: int = unpack_from(r.mv, r.take(size))[0]
        if n < -1:
            raise DecodeError(f"negative length {n}")
        return n

    return enc_c, dec_c


def _string_codec(flexible: bool, nullable: bool) -> tuple[Enc, Dec]:
    put_len, get_len = _length_codec(flexible, short=True)
    limit = 0xFFFFFFFE if flexible else MAX_SHORT_STRING

    def enc(w: _Writer, v: Any) -> None:
        if v is None:
            if not nullable:
                raise EncodeError("null for a non-nullable string")
            put_len(w, -1)
            return
        if not isinstance(v, str):
            raise EncodeError(f"expected a str, got {v!r}")
        data = v.encode()
        if len(data) > limit:
            raise EncodeError(f"string of {len(data)} bytes is too long")
        put_len(w, len(data))
        w.buf += data

    def dec(r: _Reader) -> str | None:
        n = get_len(r)
        if n == -1:
            if not nullable:
                raise DecodeError("null for a non-nullable string")
            return None
        p = r.take(n)
        try:
            return str(r.mv[p : p + n], "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"string is not UTF-8: {e}") from None

    return enc, dec


def _bytes_codec(flexible: bool, nullable: bool, records: bool) -> tuple[Enc, Dec]:
    put_len, get_len = _length_codec(flexible, short=False)

    def enc(w: _Writer, v: Any) -> None:
        if v is None:
            if not nullable:
                raise EncodeError("null for a non-nullable bytes field")
            put_len(w, -1)
            return
        if isinstance(v, bytes | bytearray | memoryview):
            put_len(w, len(v))
            w.buf += v
        elif records and isinstance(v, FileRegion):
            # Record data from storage: sized now, sent later by the server without passing through Python.
            put_len(w, v.length)
            w.opaque(v)
        else:
            raise EncodeError(f"expected bytes, got {type(v).__name__}")

    def dec(r: _Reader) -> bytes | None:
        n = get_len(r)
        if n == -1:
            if not nullable:
                raise DecodeError("null for a non-nullable bytes field")
            return None
        p = r.take(n)
        if records and not r.mv.readonly:
            return r.mv[p : p + n]  # a writable frame the caller owns: a view, not a copy (decode_struct)
        return bytes(r.mv[p : p + n])

    return enc, dec


_FIXED = {
    "int8": (_fixed(_I8), 1),
    "int16": (_fixed(_I16), 2),
    "int32": (_fixed(_I32), 4),
    "int64": (_fixed(_I64), 8),
    "uint16": (_fixed(_U16), 2),
    "float64": (_fixed(_F64), 8),
    "bool": ((_bool_enc, _bool_dec), 1),
    "uuid": ((_uuid_enc, _uuid_dec), 16),
    "varint": ((_varint_enc, _varint_dec), 1),
    "uvarint": ((_uvarint_enc, _uvarint_dec), 1),
}


def _primitive_codec(t: Primitive, flexible: bool, nullable: bool) -> tuple[Enc, Dec, int]:
    if t.name in _FIXED:
        (enc, dec), size = _FIXED[t.name]
        return enc, dec, size
    prefix = 1 if flexible else (2 if t.name == "string" else 4)
    if t.name == "string":
        return (*_string_codec(flexible, nullable), prefix)
    if t.name in ("bytes", "records"):
        return (*_bytes_codec(flexible, nullable, t.name == "records"), prefix)
    raise TypeError(f"unknown primitive {t.name}")


def _array_codec(t: Array, version: int, flexible: bool, nullable: bool) -> tuple[Enc, Dec, int]:
    put_len, get_len = _length_codec(flexible, short=False)
    elem = t.element
    if isinstance(elem, Struct):
        plan = _plan(elem, version, flexible)
        e_enc, e_dec, e_min = plan.encode, plan.decode, plan.min_size
    else:
        e_enc, e_dec, e_min = _primitive_codec(elem, flexible, nullable=False)
    e_min = max(e_min, MIN_ELEMENT_BYTES)
    row = plan.row if isinstance(elem, Struct) else None

    def enc(w: _Writer, v: Any) -> None:
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

    def dec(r: _Reader) -> list[Any] | None:
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


def _encode_rows(w: _Writer, row: struct.Struct, rows: list[Any] | tuple[Any, ...]) -> None:
    try:
        w.buf += b"".join(itertools.starmap(row.pack, rows))
    except (struct.error, TypeError) as e:
        raise EncodeError(f"a row does not fit {row.format!r}: {e}") from None


def _struct_field_codec(t: Struct, version: int, flexible: bool, nullable: bool) -> tuple[Enc, Dec, int]:
    plan = _plan(t, version, flexible)
    if not nullable:
        return plan.encode, plan.decode, plan.min_size

    # Kafka writes a nullable struct as an int8 presence marker (-1 null, 1 present).
    def enc(w: _Writer, v: Any) -> None:
        if v is None:
            w.buf += b"\xff"
        else:
            w.buf += b"\x01"
            plan.encode(w, v)

    def dec(r: _Reader) -> Any:
        marker = _I8.unpack_from(r.mv, r.take(1))[0]
        if marker < 0:
            return None
        return plan.decode(r)

    return enc, dec, 1


def _field_codec(f: Field, version: int, flexible: bool) -> tuple[Enc, Dec, int]:
    nullable = version in f.nullable
    t = f.type
    if isinstance(t, Primitive):
        return _primitive_codec(t, flexible, nullable)
    if isinstance(t, Array):
        return _array_codec(t, version, flexible, nullable)
    return _struct_field_codec(t, version, flexible, nullable)


# ------------------------------------------------------------------------------------------------ struct plans


class _Plan:
    """A struct compiled for one (version, flexible): what to read and write, in order, and the fixed minimum size.

    `decode(reader)` and `encode(writer, value)` are functions generated from the declaration (see `_compile`):
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
        # How the generated decoder reads each regular field inline (see _compile), or None: through its closure.
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
        self.decode: Callable[[_Reader], dict[str, Any]]
        self.encode: Callable[[_Writer, Any], None]
        self.decode, self.encode = _compile(self)

    def tag_defaults(self, out: dict[str, Any]) -> None:
        for _tag, name, _enc, _dec, default in self.tagged:
            out[name] = _fresh(default)

    def decode_tagged(self, r: _Reader, out: dict[str, Any]) -> None:
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
            sub = _Reader(r.mv, start, start + size)
            out[known[1]] = known[3](sub)
            if sub.pos != sub.end:
                raise DecodeError(f"{self.name}: tagged field {tag} has {sub.end - sub.pos} trailing bytes")

    def encode_tagged(self, w: _Writer, get: Callable[[str, Any], Any]) -> None:
        found = []
        for tag, name, enc, _dec, default in self.tagged:
            v = get(name, _MISSING)
            # Kafka writes a tagged field only when it differs from its default; readers fill the default in.
            if v is _MISSING or v == default:
                continue
            sub = _Writer()
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
        plan = _plan(t.element, version, flexible)
        return ("array", nullable, plan, max(plan.min_size, MIN_ELEMENT_BYTES))
    return None


def _decode_length(flexible: bool, short: bool) -> list[str]:
    """Source lines that read a length prefix into `n` (-1 = null), as _length_codec's decoders do."""
    if flexible:
        return [" if pos >= end:", "  raise DecodeError('truncated varint')", " n = mv[pos]", " if n < 0x80:",
                "  pos += 1", " else:", "  r.pos = pos", "  n = r.uvarint()", "  pos = r.pos", " n -= 1"]
    size, st = (2, "I16") if short else (4, "I32")
    return [f" if pos + {size} > end:",
            f"  raise DecodeError(f'need {size} bytes at offset {{pos}}, have {{end - pos}}')",
            f" n = {st}(mv, pos)[0]", f" pos += {size}",
            " if n < -1:", "  raise DecodeError(f'negative length {n}')"]


def _decode_inline(i: int, kind: tuple[Any, ...], flexible: bool, ns: dict[str, Any]) -> list[str]:
    v = f"v{i}"
    what = kind[0]
    nullable = kind[1]
    lines = _decode_length(flexible, short=what == "string")
    noun = {"string": "string", "bytes": "bytes field", "records": "bytes field", "array": "array"}[what]
    lines += [" if n == -1:",
              f"  {v} = None" if nullable else f"  raise DecodeError('null for a non-nullable {noun}')"]
    if what == "array":
        ns[f"ED{i}"] = kind[2].decode
        lines += [" else:", f"  if n * {kind[3]} > end - pos:",
                  "   raise DecodeError(f'array of {n} elements cannot fit in {end - pos} bytes')",
                  "  r.pos = pos", f"  {v} = [ED{i}(r) for _ in range(n)]", "  pos = r.pos"]
        return lines
    lines += [" else:", "  e = pos + n", "  if e > end:",
              "   raise DecodeError(f'need {n} bytes at offset {pos}, have {end - pos}')"]
    if what == "string":
        lines += ["  try:", f"   {v} = str(mv[pos:e], 'utf-8')", "  except UnicodeDecodeError as x:",
                  "   raise DecodeError(f'string is not UTF-8: {x}') from None"]
    elif what == "records":
        lines += [f"  {v} = bytes(mv[pos:e]) if mv.readonly else mv[pos:e]"]
    else:
        lines += [f"  {v} = bytes(mv[pos:e])"]
    lines += ["  pos = e"]
    return lines


def _encode_inline(i: int, kind: tuple[Any, ...], flexible: bool, ns: dict[str, Any]) -> list[str]:
    """Source lines that write the commonest values of a string, bytes or struct-array field directly; anything else
    (None, a FileRegion, tuple rows, a wrong type) goes through the field's closure, which has every rule."""
    v = f"v{i}"
    what = kind[0]

    def put_len(n: str, short: bool) -> list[str]:
        if flexible:
            return [f"  w.uvarint({n} + 1)"]
        return [f"  w.buf += {'P16' if short else 'P32'}({n})"]

    if what == "string":
        limit = 0xFFFFFFFE if flexible else MAX_SHORT_STRING
        return [f" if type({v}) is str:", f"  data = {v}.encode()", f"  if len(data) > {limit}:",
                "   raise EncodeError(f'string of {len(data)} bytes is too long')",
                *put_len("len(data)", True), "  w.buf += data", " else:", f"  E{i}(w, {v})"]
    if what in ("bytes", "records"):
        return [f" if type({v}) is bytes:", *put_len(f"len({v})", False), f"  w.buf += {v}", " else:",
                f"  E{i}(w, {v})"]
    ns[f"EE{i}"] = kind[2].encode
    return [f" if type({v}) is list and not ({v} and type({v}[0]) is tuple):", *put_len(f"len({v})", False),
            f"  for item in {v}:", f"   EE{i}(w, item)", " else:", f"  E{i}(w, {v})"]


def _is_number(v: Any) -> bool:
    return type(v) is not bool and isinstance(v, int | float)


def _compile(plan: _Plan) -> tuple[Callable[[_Reader], dict[str, Any]], Callable[[_Writer, Any], None]]:
    """Generate the plan's decode and encode functions from its field list (still the declaration's order, types
    and defaults: nothing about a message is written here). Consecutive fixed-width fields are read and written
    with one precompiled `struct.Struct` and one bounds check; every other field calls its codec's closure. The
    checks and errors are those of the closures: a short buffer is a DecodeError, a value of the wrong type an
    EncodeError."""
    ns: dict[str, Any] = {"DecodeError": DecodeError, "EncodeError": EncodeError, "M": _MISSING,
                          "NUM": _is_number, "plan": plan, "NAMES": plan.names, "I16": _I16.unpack_from,
                          "I32": _I32.unpack_from, "P16": _I16.pack, "P32": _I32.pack}
    # Runs of fixed-width fields: [(first index, formats)], others alone.
    groups: list[tuple[int, str]] = []
    for i, fmt in enumerate(plan.fixed):
        if fmt is not None and groups and groups[-1][1] and groups[-1][0] + len(groups[-1][1]) == i:
            groups[-1] = (groups[-1][0], groups[-1][1] + fmt)
        else:
            groups.append((i, fmt or ""))
    dec = ["def decode(r):", " mv = r.mv", " end = r.end", " pos = r.pos"]
    enc = ["def encode(w, value):",
           " if type(value) is not dict and not isinstance(value, dict):",
           "  raise EncodeError(f'{plan.name}: expected a dict, got {type(value).__name__}')",
           " if not value.keys() <= NAMES:",
           "  raise EncodeError(f'{plan.name}: unknown fields {sorted(value.keys() - NAMES)}')",
           " get = value.get"]
    for first, fmts in groups:
        if not fmts:  # one field with its own codec
            name, e, d, default = plan.regular[first]
            ns[f"D{first}"], ns[f"E{first}"], ns[f"F{first}"] = d, e, default
            kind = plan.inline[first]
            enc += [f" v{first} = get({name!r}, M)", f" if v{first} is M:", f"  v{first} = F{first}()"]
            if kind is not None:
                dec += _decode_inline(first, kind, plan.flexible, ns)
                enc += _encode_inline(first, kind, plan.flexible, ns)
            else:
                dec += [" r.pos = pos", f" v{first} = D{first}(r)", " pos = r.pos"]
                enc += [f" E{first}(w, v{first})"]
            continue
        st = struct.Struct(">" + fmts)
        ns[f"S{first}"] = st
        names = [f"v{first + j}" for j in range(len(fmts))]
        dec += [f" e = pos + {st.size}", " if e > end:",
                f"  raise DecodeError(f'need {st.size} bytes at offset {{pos}}, have {{end - pos}}')",
                f" {', '.join(names)}, = S{first}.unpack_from(mv, pos)", " pos = e"]
        for j, fmt in enumerate(fmts):
            v = names[j]
            name, _e, _d, default = plan.regular[first + j]
            ns[f"F{first + j}"] = default
            enc += [f" {v} = get({name!r}, M)", f" if {v} is M:", f"  {v} = F{first + j}()"]
            if fmt == "?":
                enc += [f" if type({v}) is not bool:", f"  raise EncodeError(f'expected a bool, got {{{v}!r}}')"]
            else:
                enc += [f" if type({v}) is not int and not NUM({v}):",
                        f"  raise EncodeError(f'expected a number, got {{{v}!r}}')"]
        enc += [f" w.buf += S{first}.pack({', '.join(names)})"]
    dec.append(" r.pos = pos")
    items = ", ".join(f"{name!r}: v{i}" for i, (name, _e, _d, _f) in enumerate(plan.regular))
    dec.append(f" out = {{{items}}}")
    if plan.flexible:
        # An empty tagged-field section (one 0 byte) is the common case: read and written inline.
        dec += [" if pos < end and mv[pos] == 0:", "  r.pos = pos + 1"]
        dec += ["  plan.tag_defaults(out)" if plan.tagged else "  pass"]
        dec += [" else:", "  plan.decode_tagged(r, out)"]
        enc.append(" plan.encode_tagged(w, get)" if plan.tagged else " w.buf.append(0)")
    for k, (name, default) in enumerate(plan.absent):
        ns[f"A{k}"] = default
        dec.append(f" out[{name!r}] = A{k}()")
    dec.append(" return out")
    exec(compile("\n".join(dec) + "\n" + "\n".join(enc) + "\n", f"<codec {plan.name}>", "exec"), ns)
    return ns["decode"], ns["encode"]


def _fresh(value: Any) -> Any:
    if isinstance(value, list | dict):
        return copy.deepcopy(value)
    return value


def _plan(s: Struct, version: int, flexible: bool) -> _Plan:
    key = (version, flexible)
    plan = s._plans.get(key)
    if plan is None:
        plan = s._plans[key] = _Plan(s, version, flexible)
    return plan


# ---------------------------------------------------------------------------------------------------- entry points


def encode_struct(s: Struct, version: int, flexible: bool, value: dict[str, Any], prefix: bytes = b"") -> list[Chunk]:
    """Encode `value` as struct `s` at `version`.

    Args:
        prefix: bytes to put first (a header), so small messages come out as one chunk.

    Returns:
        Chunks: bytes, and any FileRegion `records` values as they were given (for sendfile). Plain-bytes records
        are inlined.

    Raises:
        EncodeError: a value does not fit its declaration.
    """
    return _encoded(s, version, flexible, value, prefix).finish()


def _encoded(s: Struct, version: int, flexible: bool, value: dict[str, Any], head: bytes) -> _Writer:
    """A writer holding `head` and then `value` encoded."""
    w = _Writer()
    w.buf += head
    try:
        _plan(s, version, flexible).encode(w, value)
    except struct.error as e:
        raise EncodeError(f"{s.name} v{version}: {e}") from None
    return w


def encode_framed(s: Struct, version: int, flexible: bool, value: dict[str, Any], head: bytes) -> list[Chunk]:
    """`encode_struct` of a whole frame: `head` starts with four placeholder bytes that become the frame's size
    (everything after them, FileRegions included)."""
    w = _encoded(s, version, flexible, value, head)
    if not w.chunks:  # all in one buffer: the size goes in place
        buf = w.buf
        _I32.pack_into(buf, 0, len(buf) - 4)
        return [bytes(buf)]
    chunks = w.finish()
    first = chunks[0]
    assert isinstance(first, bytes)
    chunks[0] = _I32.pack(frame_length(chunks) - 4) + first[4:]
    return chunks


def decode_struct(s: Struct, version: int, flexible: bool, data: bytes | bytearray | memoryview, offset: int = 0
                  ) -> dict[str, Any]:
    """Decode struct `s` at `version` from `data[offset:]`. Trailing bytes are ignored, as Kafka's parsers do.
    `records` fields are bytes, except from a writable buffer (a large frame, which the caller owns: FrameDecoder):
    there they are writable memoryviews into it, so megabytes of produced batches are not copied to be decoded and
    the append can write their offsets in place.

    Raises:
        DecodeError: the only exception bad input can cause.
    """
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if offset < 0 or offset > len(mv):
        raise DecodeError(f"offset {offset} outside the {len(mv)}-byte buffer")
    r = _Reader(mv, offset, len(mv))
    try:
        return _plan(s, version, flexible).decode(r)
    except RecursionError:
        raise DecodeError("message nests too deeply") from None


def tagged_section_length(data: bytes | memoryview, offset: int) -> int:
    """Skip a tagged-field section (as in request header v2) and return the offset just past it."""
    if 0 <= offset < len(data) and data[offset] == 0:
        return offset + 1  # no tagged fields, the common case
    mv = data if isinstance(data, memoryview) else memoryview(data)
    r = _Reader(mv, offset, len(mv))
    count = r.uvarint()
    if count * 2 > r.remaining():
        raise DecodeError(f"{count} tagged fields cannot fit in {r.remaining()} bytes")
    for _ in range(count):
        r.uvarint()
        r.take(r.uvarint())
    return r.pos
