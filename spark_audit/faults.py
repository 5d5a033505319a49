"""Which faults struck a chaos run, from its run.json: what the audit names beside each run's
verdict ("kill ×2, partition ×1"), with the kinds asked for that did not strike.

A run.json that records what struck has `faults_struck` (nemesis -> count), `nemeses_asked`
and `nemeses_not_struck`. An older one has `faults`, the schedule the nemesis followed (one
entry per fault, with its `nemesis`), and `options.nemeses`, the kinds asked for: the struck
counts are then the schedule's, never the list asked for (a short run fits few faults)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RunFaults:
    struck: tuple[tuple[str, int], ...]  # (nemesis, times it struck), most first
    asked: tuple[str, ...]  # the kinds asked for (`--nemesis`), in the order given
    not_struck: tuple[str, ...]  # asked for, never struck

    def to_json(self) -> dict[str, Any]:
        return {"struck": dict(self.struck), "asked": list(self.asked), "not_struck": list(self.not_struck)}


def read_faults(meta: Mapping[str, Any]) -> RunFaults:
    """The faults of a run whose run.json holds `meta`."""
    options = meta.get("options")
    asked_default = options.get("nemeses", []) if isinstance(options, Mapping) else []
    asked = [str(n) for n in (meta.get("nemeses_asked") or asked_default or [])]
    recorded = meta.get("faults_struck")
    if isinstance(recorded, Mapping):
        counts: Counter[str] = Counter({str(k): int(v) for k, v in recorded.items() if int(v) > 0})
    else:
        schedule = meta.get("faults") or []
        counts = Counter(str(f["nemesis"]) for f in schedule if isinstance(f, Mapping) and f.get("nemesis"))
    struck = tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    if "nemeses_not_struck" in meta:
        not_struck = [str(n) for n in meta.get("nemeses_not_struck") or []]
    else:
        not_struck = [n for n in asked if n not in counts]
    return RunFaults(struck, tuple(dict.fromkeys(asked)), tuple(dict.fromkeys(not_struck)))


def from_json(data: Mapping[str, Any] | None) -> RunFaults | None:
    """`RunFaults.to_json`'s dict back (an audit.json told again); None stays None."""
    if data is None:
        return None
    struck = tuple(sorted(((str(k), int(v)) for k, v in data.get("struck", {}).items()),
                          key=lambda item: (-item[1], item[0])))
    return RunFaults(struck, tuple(data.get("asked", [])), tuple(data.get("not_struck", [])))


def struck_text(faults: RunFaults) -> str:
    """`kill ×2, partition ×1`; `none` when nothing struck."""
    return ", ".join(f"{name} ×{n}" for name, n in faults.struck) or "none"


def sentence(faults: RunFaults | None) -> str:
    """What struck and what did not, for a report: `Faults that struck: transfer ×2; asked for
    but did not strike: kill, pause.`"""
    if faults is None:
        return "No faults: embedded brokers' data directories, no nemesis."
    if not faults.asked and not faults.struck:
        return "No faults were asked for."
    text = f"Faults that struck: {struck_text(faults)}"
    if faults.not_struck:
        text += f"; asked for but did not strike: {', '.join(faults.not_struck)}"
    return text + "."
