"""A transport that carries another protocol's bytes inside its own framing over a socket
(STOMP inside WebSocket messages, on the node's side and on the client's): what does not
depend on the framing is the socket's, and is delegated to it here."""

from __future__ import annotations

import asyncio
from typing import Any


class WrappedTransport(asyncio.Transport):
    def __init__(self, raw: asyncio.Transport) -> None:
        super().__init__()
        self._raw = raw

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))  # one message for what was written together

    def abort(self) -> None:
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._raw.is_closing()

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        self.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._raw.get_extra_info(name, default)
