"""The generator that turns a struct's plan into one straight-line decode function and one encode function.

Why generated code: calling a closure per field was about a third of a one-record Produce's CPU on the broker
(docs/data-path.md, "Performance"); one function per struct and version, with runs of fixed-width fields read and
written by one precompiled `struct.Struct`, removes those calls. The generator writes nothing about any message:
it reads the plan (mover/wire/plans.py), which comes from the declaration. It keeps the closures' checks and errors,
so a short buffer is still a DecodeError and a value of the wrong type an EncodeError (tests/wire/
test_compiled_codec.py compares it with the field-by-field walk for every API and version).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Protocol

from mover.wire.cursor import Reader, Writer
from mover.wire.errors import DecodeError, EncodeError
from mover.wire.primitives import I16, I32, MAX_SHORT_STRING, Dec, Enc

__all__ = ["MISSING", "PlanLayout", "compile_plan"]

# A field the value to encode does not give (None is a value: null). The generated encoders and the tagged-field
# writer both test for it, so it lives with the generator, below the plans.
MISSING: Any = object()


class PlanLayout(Protocol):
    """What the generator reads of a plan (mover.wire.plans.Plan), and what the generated code calls back on it.
    Declared here rather than imported because plans.py calls the generator: importing it back would be a cycle."""

    name: str
    names: frozenset[str]
    flexible: bool
    regular: list[tuple[str, Enc, Dec, Callable[[], Any]]]
    fixed: list[str | None]
    inline: list[tuple[Any, ...] | None]
    tagged: list[tuple[int, str, Enc, Dec, Any]]
    absent: list[tuple[str, Callable[[], Any]]]

    def tag_defaults(self, out: dict[str, Any]) -> None: ...

    def decode_tagged(self, r: Reader, out: dict[str, Any]) -> None: ...

    def encode_tagged(self, w: Writer, get: Callable[[str, Any], Any]) -> None: ...


def _decode_length(flexible: bool, short: bool) -> list[str]:
    """Source lines that read a length prefix into `n` (-1 = null), as length_codec's decoders do (primitives.py)."""
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


def compile_plan(plan: PlanLayout) -> tuple[Callable[[Reader], dict[str, Any]], Callable[[Writer, Any], None]]:
    """Generate the plan's decode and encode functions from its field list (still the declaration's order, types
    and defaults: nothing about a message is written here). Consecutive fixed-width fields are read and written
    with one precompiled `struct.Struct` and one bounds check; every other field calls its codec's closure. The
    checks and errors are those of the closures: a short buffer is a DecodeError, a value of the wrong type an
    EncodeError."""
    ns: dict[str, Any] = {"DecodeError": DecodeError, "EncodeError": EncodeError, "M": MISSING,
                          "NUM": _is_number, "plan": plan, "NAMES": plan.names, "I16": I16.unpack_from,
                          "I32": I32.unpack_from, "P16": I16.pack, "P32": I32.pack}
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
