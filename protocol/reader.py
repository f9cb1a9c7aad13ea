"""A cursor over a request body for the decoders that hand out slices of the frame
instead of copies (``protocol.produce``, ``protocol.join_group``). Every read past the
end, bad varint or bad length is a ``KafkaProtocolError`` naming the request."""

from __future__ import annotations

import struct

from tidegate.protocol.errors import KafkaProtocolError

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


class Reader:
    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: memoryview, what: str, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        #: The request's name, for errors ("produce request").
        self.what = what

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise KafkaProtocolError(f"{self.what}: {n} bytes wanted at {self.pos}, body ends at {len(self.buf)}")
        view = self.buf[self.pos : end]
        self.pos = end
        return view

    def unpack(self, s: struct.Struct) -> tuple[int, ...]:
        if self.pos + s.size > len(self.buf):
            raise KafkaProtocolError(f"{self.what}: truncated at {self.pos}")
        values = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return values

    def uvarint(self) -> int:
        value = shift = 0
        buf, n = self.buf, len(self.buf)
        while True:
            if self.pos >= n:
                raise KafkaProtocolError(f"{self.what}: truncated varint")
            b = buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise KafkaProtocolError(f"{self.what}: varint too long")

    def length(self, flexible: bool, wide: bool = False) -> int:
        """A length prefix: -1 for null."""
        if flexible:
            return self.uvarint() - 1
        return self.unpack(I32 if wide else I16)[0]

    def string(self, flexible: bool) -> str | None:
        n = self.length(flexible)
        if n < 0:
            if n != -1:
                raise KafkaProtocolError(f"{self.what}: string length {n}")
            return None
        try:
            return bytes(self.take(n)).decode()
        except UnicodeDecodeError as exc:
            raise KafkaProtocolError(f"{self.what}: {exc}") from None

    def bytes_view(self, flexible: bool) -> memoryview | None:
        """A bytes field as a slice of the buffer (None if null)."""
        n = self.length(flexible, wide=True)
        if n < -1:
            raise KafkaProtocolError(f"{self.what}: bytes length {n}")
        return self.take(n) if n >= 0 else None

    def count(self, flexible: bool) -> int:
        n = self.length(flexible, wide=True)
        if n < 0:
            raise KafkaProtocolError(f"{self.what}: array length {n}")
        return n

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())
