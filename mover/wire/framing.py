"""Splitting a byte stream into Kafka frames (int32 size prefix), sans-IO."""

from __future__ import annotations

import struct

from mover.wire.errors import DecodeError, FrameTooLarge

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameDecoder"]

# Kafka's `socket.request.max.bytes` default (100 MiB): the largest request a broker accepts. Kafka checks the
# size prefix before reading the body (NetworkReceive), and so do we: a hostile prefix allocates nothing.
DEFAULT_MAX_FRAME_SIZE = 104857600

_SIZE = struct.Struct(">i")


class FrameDecoder:
    """Feed bytes in as they arrive; get whole frames (without their size prefix) out.

    After it raises, the stream is unusable (framing is lost) and every later `feed` raises the same error.
    """

    def __init__(self, max_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._need: int | None = None  # body size of the frame being read, once its prefix is in
        self._error: DecodeError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf)

    @property
    def pending_size(self) -> int | None:
        """Body size of the frame being read once its size prefix is in, else None (between frames)."""
        return self._need

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add `data`; return every frame it completes, in order.

        Raises:
            FrameTooLarge: a size prefix above `max_size`.
            DecodeError: a negative size prefix.
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        buf += data
        frames: list[bytes] = []
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
                break
            frames.append(bytes(buf[:need]))
            # bytearray deletes from the front in O(1) (it moves its start), so a large buffer is not copied per frame.
            del buf[:need]
            self._need = None
        return frames

    def whole(self, data: bytes) -> bytes | None:
        """The body of `data` when it is exactly one frame within the limits and nothing is buffered (a client that
        sends one request and waits for its answer); else None, having consumed nothing (`feed` then takes `data`
        as usual, errors included). Saves `feed`'s two copies and its buffer bookkeeping for that case."""
        if self._buf or self._error is not None or len(data) < 4:
            return None
        (size,) = _SIZE.unpack_from(data, 0)
        if size != len(data) - 4 or size > self.max_size:
            return None
        return data[4:]
