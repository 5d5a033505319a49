"""Durable storage of message bodies: the journal of segment files (see docs/journal-format.md)."""

from __future__ import annotations

from raftmq.storage.journal import BodyRef, Journal, SegmentInfo
from raftmq.storage.records import Record

__all__ = ["BodyRef", "Journal", "Record", "SegmentInfo"]
