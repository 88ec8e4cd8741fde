"""Each primitive wire type's encoder and decoder closures, with every rule a value of that type must meet.

The rules (number ranges, nulls, UTF-8, length prefixes classic or compact) are decided once per (type, flexible,
nullable) and closed over here, so the struct plans and the generated code only pick closures and never re-test a
declaration per value. Compact lengths (uvarint n + 1) and classic ones (int16 for strings, int32 otherwise) are
one choice in `length_codec`, so strings, bytes and arrays cannot disagree on it.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from mover.wire.cursor import Reader, Writer
from mover.wire.errors import DecodeError, EncodeError
from mover.wire.file_region import FileRegion
from mover.wire.schema import Primitive

__all__ = ["I8", "I16", "I32", "MAX_SHORT_STRING", "Dec", "Enc", "length_codec", "primitive_codec"]

# Non-flexible strings carry an int16 length (Kafka's STRING type), so that is the longest we can write.
MAX_SHORT_STRING = 0x7FFF

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_F64 = struct.Struct(">d")

Enc = Callable[[Writer, Any], None]
Dec = Callable[[Reader], Any]


def _fixed(st: struct.Struct) -> tuple[Enc, Dec]:
    pack, unpack_from, size = st.pack, st.unpack_from, st.size

    def enc(w: Writer, v: Any) -> None:
        if type(v) is bool or not isinstance(v, int | float):
            raise EncodeError(f"expected a number, got {v!r}")
        w.buf += pack(v)

    def dec(r: Reader) -> Any:
        return unpack_from(r.mv, r.take(size))[0]

    return enc, dec


def _bool_enc(w: Writer, v: Any) -> None:
    if not isinstance(v, bool):
        raise EncodeError(f"expected a bool, got {v!r}")
    w.buf.append(1 if v else 0)


def _bool_dec(r: Reader) -> bool:
    return r.mv[r.take(1)] != 0


def _uuid_enc(w: Writer, v: Any) -> None:
    if not isinstance(v, uuid.UUID):
        raise EncodeError(f"expected a uuid.UUID, got {v!r}")
    w.buf += v.bytes


def _uuid_dec(r: Reader) -> uuid.UUID:
    p = r.take(16)
    return uuid.UUID(bytes=bytes(r.mv[p : p + 16]))


def _uvarint_enc(w: Writer, v: Any) -> None:
    if type(v) is bool or not isinstance(v, int):
        raise EncodeError(f"expected an int, got {v!r}")
    w.uvarint(v)


def _uvarint_dec(r: Reader) -> int:
    return r.uvarint()


def _varint_enc(w: Writer, v: Any) -> None:
    if type(v) is bool or not isinstance(v, int) or not -(2**31) <= v < 2**31:
        raise EncodeError(f"expected an int32, got {v!r}")
    w.uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)


def _varint_dec(r: Reader) -> int:
    u = r.uvarint()
    return (u >> 1) ^ -(u & 1)


def length_codec(flexible: bool, short: bool) -> tuple[Callable[[Writer, int], None], Callable[[Reader], int]]:
    """Length prefixes: -1 means null. Compact = uvarint(n + 1); classic = int16 (strings) or int32."""
    if flexible:

        def enc(w: Writer, n: int) -> None:
            w.uvarint(n + 1)

        def dec(r: Reader) -> int:
            return r.uvarint() - 1

        return enc, dec
    st = I16 if short else I32
    pack, unpack_from, size = st.pack, st.unpack_from, st.size

    def enc_c(w: Writer, n: int) -> None:
        try:
            w.buf += pack(n)
        except struct.error:
            raise EncodeError(f"length {n} does not fit its prefix") from None

    def dec_c(r: Reader) -> int:
        n: int = unpack_from(r.mv, r.take(size))[0]
        if n < -1:
            raise DecodeError(f"negative length {n}")
        return n

    return enc_c, dec_c


def _string_codec(flexible: bool, nullable: bool) -> tuple[Enc, Dec]:
    put_len, get_len = length_codec(flexible, short=True)
    limit = 0xFFFFFFFE if flexible else MAX_SHORT_STRING

    def enc(w: Writer, v: Any) -> None:
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

    def dec(r: Reader) -> str | None:
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
    put_len, get_len = length_codec(flexible, short=False)

    def enc(w: Writer, v: Any) -> None:
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

    def dec(r: Reader) -> bytes | None:
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
    "int8": (_fixed(I8), 1),
    "int16": (_fixed(I16), 2),
    "int32": (_fixed(I32), 4),
    "int64": (_fixed(_I64), 8),
    "uint16": (_fixed(_U16), 2),
    "float64": (_fixed(_F64), 8),
    "bool": ((_bool_enc, _bool_dec), 1),
    "uuid": ((_uuid_enc, _uuid_dec), 16),
    "varint": ((_varint_enc, _varint_dec), 1),
    "uvarint": ((_uvarint_enc, _uvarint_dec), 1),
}


def primitive_codec(t: Primitive, flexible: bool, nullable: bool) -> tuple[Enc, Dec, int]:
    """A primitive's encoder, decoder and the fewest bytes it takes on the wire (for the array-count check)."""
    if t.name in _FIXED:
        (enc, dec), size = _FIXED[t.name]
        return enc, dec, size
    prefix = 1 if flexible else (2 if t.name == "string" else 4)
    if t.name == "string":
        return (*_string_codec(flexible, nullable), prefix)
    if t.name in ("bytes", "records"):
        return (*_bytes_codec(flexible, nullable, t.name == "records"), prefix)
    raise TypeError(f"unknown primitive {t.name}")
