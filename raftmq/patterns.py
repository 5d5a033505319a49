"""Destination-name patterns, ActiveMQ's syntax: `.` separates elements, `*` matches one
element, a final `>` one or more. The ACL (raftmq.security) and the cluster connections'
`address` filters (raftmq.routing.addresses) both read them."""

from __future__ import annotations


def check_pattern(pattern: str) -> None:
    """Raise `ValueError` unless `pattern` is a valid destination-name pattern."""
    if not pattern:
        raise ValueError("empty pattern")
    elements = pattern.split(".")
    for index, element in enumerate(elements):
        if not element:
            raise ValueError(f"empty element in {pattern!r} (two dots, or a dot at an end)")
        if element == ">" and index != len(elements) - 1:
            raise ValueError(f"'>' must be the last element of {pattern!r}")
        if element not in ("*", ">") and ("*" in element or ">" in element):
            raise ValueError(f"a wildcard must be a whole element in {pattern!r} (like 'a.*' or 'a.>', not 'a*')")


def pattern_matches(pattern: str, name: str) -> bool:
    """ActiveMQ matching: `*` is one element, a final `>` one or more elements."""
    wanted = pattern.split(".")
    parts = name.split(".")
    for index, element in enumerate(wanted):
        if element == ">":
            return len(parts) > index
        if index >= len(parts) or (element != "*" and element != parts[index]):
            return False
    return len(wanted) == len(parts)


def specificity(pattern: str) -> tuple[int, ...]:
    """Larger is more specific: per element, literal 2, `*` 1, `>` 0, compared from the left."""
    return tuple(0 if element == ">" else 1 if element == "*" else 2 for element in pattern.split("."))


def covers(outer: str, inner: str) -> bool:
    """Does `outer` match every name `inner` matches (both patterns)?"""
    wide, narrow = outer.split("."), inner.split(".")
    for index, element in enumerate(wide):
        if element == ">":
            return len(narrow) > index
        if index >= len(narrow) or narrow[index] == ">":
            return False  # `inner` goes on (or may go on) where `outer` has ended
        if element != "*" and element != narrow[index]:
            return False
    return len(wide) == len(narrow)


def overlaps(first: str, second: str) -> bool:
    """Is there a name both patterns match?"""
    a, b = first.split("."), second.split(".")
    for index in range(max(len(a), len(b))):
        if index < len(a) and a[index] == ">":
            return len(b) > index
        if index < len(b) and b[index] == ">":
            return len(a) > index
        if index >= len(a) or index >= len(b):
            return False
        if "*" not in (a[index], b[index]) and a[index] != b[index]:
            return False
    return True
