"""Named limits that bound what one peer can make the parser hold. Breaking one is a
`FrameTooLarge` protocol error, which the server turns into an ERROR frame and a close."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    max_frame_bytes: int = 16 * 1024 * 1024  # command line + headers + body
    max_headers: int = 128
    max_header_line_bytes: int = 8 * 1024
    max_body_bytes: int = 16 * 1024 * 1024
