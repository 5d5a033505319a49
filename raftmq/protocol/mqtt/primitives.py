"""MQTT's data representations: two- and four-byte integers, variable byte integers, UTF-8
strings and binary data, read from a packet's bytes (`Reader`) and written to a bytearray.

A read past the packet's end, a variable byte integer of more than four bytes and a string that
is not well-formed UTF-8 or holds U+0000 are malformed packets (`MqttError` 0x81).
"""

from __future__ import annotations

from raftmq.errors import MqttError
from raftmq.protocol.mqtt.reasons import MALFORMED_PACKET

MAX_VARINT = 268_435_455  # four bytes of seven bits
_U16 = 0xFFFF


def malformed(detail: str) -> MqttError:
    return MqttError(MALFORMED_PACKET, "malformed packet", detail)


class Reader:
    """Reads one packet's variable header and payload, `data[position:end]`."""

    __slots__ = ("data", "end", "position")

    def __init__(self, data: bytes, position: int = 0, end: int | None = None) -> None:
        self.data = data
        self.position = position
        self.end = len(data) if end is None else end

    @property
    def left(self) -> int:
        return self.end - self.position

    def take(self, count: int) -> bytes:
        start = self.position
        if count > self.end - start:
            raise malformed(f"{count} bytes wanted, {self.end - start} left in the packet")
        self.position = start + count
        return self.data[start:start + count]

    def u8(self) -> int:
        if self.position >= self.end:
            raise malformed("a byte wanted, none left in the packet")
        value = self.data[self.position]
        self.position += 1
        return value

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def varint(self) -> int:
        value = shift = 0
        for _ in range(4):
            byte = self.u8()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise malformed("a variable byte integer longer than four bytes")

    def binary(self) -> bytes:
        return self.take(self.u16())

    def string(self) -> str:
        raw = self.take(self.u16())
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise malformed("a string that is not well-formed UTF-8") from None
        if "\0" in text:
            raise malformed("a string holding U+0000")
        return text


def read_varint(data: bytes | bytearray, position: int) -> tuple[int, int] | None:
    """(value, bytes it took) of the variable byte integer at `position`, or None if `data` ends
    before it does; raises for one longer than four bytes."""
    value = shift = 0
    for used in range(1, 5):
        if position + used > len(data):
            return None
        byte = data[position + used - 1]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, used
        shift += 7
    raise malformed("a remaining length longer than four bytes")


def write_varint(out: bytearray, value: int) -> None:
    if not 0 <= value <= MAX_VARINT:
        raise ValueError(f"{value} does not fit a variable byte integer")
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def write_u16(out: bytearray, value: int) -> None:
    out += value.to_bytes(2, "big")


def write_u32(out: bytearray, value: int) -> None:
    out += value.to_bytes(4, "big")


def write_binary(out: bytearray, value: bytes) -> None:
    if len(value) > _U16:
        raise ValueError(f"binary data of {len(value)} bytes (at most 65,535)")
    write_u16(out, len(value))
    out += value


def write_string(out: bytearray, value: str) -> None:
    write_binary(out, value.encode("utf-8"))
