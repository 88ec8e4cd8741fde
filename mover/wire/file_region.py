"""FileRegion: record bytes a response carries by reference to a file, the one non-bytes value the codec accepts.

The sans-IO boundary for zero copy: a Fetch handler puts a FileRegion in a `records` field; the codec sizes it
(`length`) and keeps it as its own chunk; the transport (mover/server) writes it with os.sendfile from `fd` at
`position`, so the bytes never enter Python. Nothing here does I/O except `read()`, for callers without a socket
(tests, `join_chunks`) and the transport's fallback on file systems that refuse sendfile.

Ownership: a region made with `owned=True` closes its fd when it is closed or garbage-collected (a Fetch answer dups
the segment's fd so a swap or retention closing the segment cannot pull the file from under a slow consumer).
"""

from __future__ import annotations

import os


class FileRegion:
    __slots__ = ("fd", "position", "length", "_owned")

    def __init__(self, fd: int, position: int, length: int, *, owned: bool = False) -> None:
        if fd < 0 or position < 0 or length < 0:
            raise ValueError(f"invalid file region fd={fd} position={position} length={length}")
        self.fd = fd
        self.position = position
        self.length = length
        self._owned = owned

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, length={self.length})"

    def read(self) -> bytes:
        """The bytes, read with pread; ValueError if the file is shorter than the region."""
        out = bytearray()
        while len(out) < self.length:
            chunk = os.pread(self.fd, self.length - len(out), self.position + len(out))
            if not chunk:
                raise ValueError(f"{self!r}: the file ends {self.length - len(out)} bytes early")
            out += chunk
        return bytes(out)

    def rest(self, skip: int) -> FileRegion:
        """The region after its first `skip` bytes (what is left to send after a partial sendfile); it takes over
        this region's ownership of the fd, and this one is left as it was, without it."""
        if not 0 <= skip <= self.length:
            raise ValueError(f"{self!r}: cannot skip {skip} bytes")
        out = FileRegion(self.fd, self.position + skip, self.length - skip, owned=self._owned)
        self._owned = False
        return out

    def close(self) -> None:
        if self._owned:
            self._owned = False
            try:
                os.close(self.fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()
