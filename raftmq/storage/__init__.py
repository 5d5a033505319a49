"""Durable storage of message bodies: the journal of segment files (docs/journal-format.md).

`records` and `payload` are the pure formats (importable alone: the audit reads journals with
them); `journal` and `segments` do the file I/O."""
