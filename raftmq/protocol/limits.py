"""Named limits that bound what one peer can make the parser hold. Breaking one is a
`FrameTooLarge` protocol error, which the server turns into an ERROR frame and a close."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    # Command line + headers + body. The default leaves room for a body of max_body_bytes with
    # every header a frame may have (128 lines of 8 KiB): the documented body limit is reachable.
    max_frame_bytes: int = 17 * 1024 * 1024
    max_headers: int = 128
    max_header_line_bytes: int = 8 * 1024
    max_body_bytes: int = 16 * 1024 * 1024
