"""msgpack packers, one per thread.

`msgpack.packb` builds a Packer per call, and each Packer mallocs a 1 MiB buffer: most of the
cost of packing one small command. One Packer per thread (a Packer is not thread-safe),
reused; `pack` resets it after every call, also when packing raises.
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
