"""Bounded waiting for a condition that another process or thread makes true."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(predicate: Callable[[], Any], timeout: float, step: float = 0.005) -> bool:
    """Poll `predicate` until it is true or `timeout` seconds passed; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())
