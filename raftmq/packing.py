"""msgpack packers, one per thread.

`msgpack.packb` builds a Packer per call, and each Packer mallocs a 1 MiB buffer: most of the
cost of packing one small command. One Packer per thread (a Packer is not thread-safe),
reused; `pack` resets it after every call, also when packing raises.

`row_packer` is a second one per thread that does not reset itself: its user packs a value
piece by piece (`pack_array_header`, then each element), takes `bytes()` and resets it, also
when packing raises.
"""

from __future__ import annotations

import threading

import msgpack

_packers = threading.local()


def thread_packer() -> msgpack.Packer:
    """This thread's reusable Packer (use_bin_type); `pack` returns bytes and resets it."""
    try:
        packer: msgpack.Packer = _packers.packer
        return packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
        return packer


def row_packer() -> msgpack.Packer:
    """This thread's Packer for values packed piece by piece (use_bin_type, autoreset off): the
    caller takes `bytes()` and calls `reset()` when done, also when packing raises."""
    try:
        packer: msgpack.Packer = _packers.rows
        return packer
    except AttributeError:
        packer = _packers.rows = msgpack.Packer(use_bin_type=True, autoreset=False)
        return packer
