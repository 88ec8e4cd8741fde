"""Splitting a byte stream into Kafka frames (int32 size prefix), sans-IO."""

from __future__ import annotations

import struct

from mover.wire.errors import DecodeError, FrameTooLarge

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameDecoder"]

# Kafka's `socket.request.max.bytes` default (100 MiB): the largest request a broker accepts. Kafka checks the
# size prefix before reading the body (NetworkReceive), and so do we: a hostile prefix allocates nothing.
DEFAULT_MAX_FRAME_SIZE = 104857600

_SIZE = struct.Struct(">i")

# Frames from this size on are assembled from the pieces they arrive in (FrameDecoder._feed_large): the size of a
# socket read (mover/server/stream.py RECV_SIZE), so a frame that one read can hold is cut from the buffer instead.
LARGE_FRAME = 64 * 1024


class FrameDecoder:
    """Feed bytes in as they arrive; get whole frames (without their size prefix) out.

    After it raises, the stream is unusable (framing is lost) and every later `feed` raises the same error.
    """

    def __init__(self, max_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._need: int | None = None  # body size of the frame being read, once its prefix is in
        self._error: DecodeError | None = None
        # A large frame's body as it arrives, one reference per piece: joined once, when it is whole.
        self._parts: list[bytes | bytearray | memoryview] | None = None
        self._have = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) if self._parts is None else self._have

    @property
    def pending_size(self) -> int | None:
        """Body size of the frame being read once its size prefix is in, else None (between frames)."""
        return self._need

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | bytearray]:
        """Add `data`; return every frame it completes, in order. A frame of LARGE_FRAME bytes or more comes out as
        a bytearray the caller owns (its decoded `records` are writable views into it: docs/data-path.md), smaller
        ones as bytes.

        Raises:
            FrameTooLarge: a size prefix above `max_size`.
            DecodeError: a negative size prefix.
        """
        if self._error is not None:
            raise self._error
        frames: list[bytes | bytearray] = []
        if self._parts is not None:
            data = self._feed_large(data, frames)
            if not data:
                return frames
        buf = self._buf
        buf += data
        while True:
            if self._need is None:
                if len(buf) < 4:
                    break
                (size,) = _SIZE.unpack_from(buf, 0)
                if size < 0:
                    self._error = DecodeError(f"negative frame size {size}")
                    raise self._error
                if size > self.max_size:
                    self._error = FrameTooLarge(size, self.max_size)
                    raise self._error
                del buf[:4]
                self._need = size
            need = self._need
            if len(buf) < need:
                if need >= LARGE_FRAME:
                    # The rest of the body is kept as the pieces that arrive and joined once into a bytearray:
                    # one copy of its bytes in all, where the buffer would take three (append, slice, bytes), and
                    # the append below can write its offsets into it instead of copying it once more.
                    self._parts = [bytes(buf)]
                    self._have = len(buf)
                    buf.clear()
                break
            # A large frame as a bytearray of its own (one copy), as when it arrives in pieces.
            frames.append(buf[:need] if need >= LARGE_FRAME else bytes(buf[:need]))
            # bytearray deletes from the front in O(1) (it moves its start), so a large buffer is not copied per frame.
            del buf[:need]
            self._need = None
        return frames

    def _feed_large(self, data: bytes | bytearray | memoryview, frames: list[bytes | bytearray]
                    ) -> bytes | bytearray | memoryview:
        """Add `data` to the large frame being read; appends the frame to `frames` once whole and returns the bytes
        of `data` after it (empty while it is still incomplete)."""
        parts = self._parts
        assert parts is not None and self._need is not None
        need = self._need
        missing = need - self._have
        if len(data) < missing:
            # Kept by reference until the frame is whole: a buffer the caller may reuse is copied first.
            parts.append(data if isinstance(data, bytes) else bytes(data))
            self._have += len(data)
            return b""
        view = memoryview(data)
        parts.append(view[:missing])
        frames.append(bytearray().join(parts))
        self._parts = None
        self._have = 0
        self._need = None
        return view[missing:]

    def whole(self, data: bytes) -> bytes | None:
        """The body of `data` when it is exactly one frame within the limits and nothing is buffered (a client that
        sends one request and waits for its answer); else None, having consumed nothing (`feed` then takes `data`
        as usual, errors included). Saves `feed`'s two copies and its buffer bookkeeping for that case."""
        if self._buf or self._parts is not None or self._error is not None or len(data) < 4:
            return None
        (size,) = _SIZE.unpack_from(data, 0)
        if size != len(data) - 4 or size > self.max_size:
            return None
        return data[4:]
