"""`report.html`: one self-contained page a person opens in a browser — a heading naming the
workload and the faults that struck, the verdict in a sentence (what was read back, what went
wrong, each kind of fault in words with how long it lasted), the asked-for kinds that did not
strike and why, the checker's counts (any workload's) each with what it means, a latency
scatter of every send (or producer transaction) coloured by outcome, and acknowledged sends and
deliveries per second over time with the fault windows shaded (plotly, its script inlined)."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plotly.subplots import make_subplots

from chaos.checker import QueueResult
from chaos.generator import NEMESES
from chaos.history import FAIL, INFO, INVOKE, NEMESIS, OK, Op

COLOURS = {OK: "#2ca02c", FAIL: "#d62728", INFO: "#ff7f0e"}
SENDS = ("send", "txn")  # what the latency plot shows: a send, or a whole producer transaction


def _key(op: Op) -> object:
    """What pairs an invoke with its completion: the value, or a transaction's id."""
    return op.value["id"] if isinstance(op.value, dict) and "id" in op.value else op.value


def struck(ops: list[Op]) -> list[tuple[str, float, float, list[str]]]:
    """(kind, start, end, nodes) of each fault that struck, from its injection to its heal (or
    the next fault, or the history's end). A fault is a nemesis's `ok`; a fault that could not
    be made (`fail`) is none, nor is the end-of-run restart of nodes that were down (a `restart`
    naming no target).
    A heal is `info` when the nodes refused damaged files (detected, then repaired)."""
    faults: list[tuple[str, float, float, list[str]]] = []
    open_fault: tuple[str, float, list[str]] | None = None
    for op in ops:
        if op.process != NEMESIS or op.type not in (OK, INFO):
            continue
        if op.f == "heal":
            if open_fault is not None:
                faults.append((*open_fault[:2], op.mono, open_fault[2]))
                open_fault = None
        elif op.type == OK and op.f in NEMESES and (op.f != "restart" or isinstance(op.value, dict)
                                                    and "target" in op.value):
            if open_fault is not None:  # nothing to heal (it hit no one): it ends where the next begins
                faults.append((*open_fault[:2], op.mono, open_fault[2]))
            open_fault = (op.f, op.mono, list(op.value.get("nodes", [])))
    if open_fault is not None:
        faults.append((*open_fault[:2], max((op.mono for op in ops), default=open_fault[1]), open_fault[2]))
    return faults


def fault_windows(ops: list[Op]) -> list[tuple[float, float, str]]:
    """(start, end, what) of each fault, from its injection to its heal."""
    return [(start, end, f"{kind} {', '.join(nodes)}") for kind, start, end, nodes in struck(ops)]


def faults_struck(ops: list[Op]) -> dict[str, int]:
    """How many faults of each kind struck, in the order the kinds first struck."""
    return dict(Counter(kind for kind, _start, _end, _nodes in struck(ops)))


# Each kind of fault in words, as a sentence's subject and verb: "the leader was moved twice".
PHRASES = {
    "kill": "members were killed (SIGKILL) and restarted",
    "pause": "members were paused (SIGSTOP) and resumed",
    "starve": "a member was starved of CPU",
    "stutter": "a member was stopped and started in bursts",
    "partition": "the network was partitioned",
    "packet": "packets were delayed, lost, duplicated or reordered",
    "power-loss": "power was cut (writes not yet fsynced lost) and members restarted",
    "corrupt": "journal files were corrupted",
    "clock": "a wall clock was set off or jumped",
    "disk-full": "a disk was filled",
    "restart": "a member was restarted gracefully",
    "membership": "a member left its group and rejoined empty",
    "transfer": "the leader was moved",
    "membership-partition": "a member was cut off, removed and rejoined",
    "drain": "a group was drained while members died",
}
# What the counts mean, for those whose name does not say (checker.py's words).
EXPLAIN = {
    "attempted": "values a producer tried to send",
    "acknowledged": "sends the broker confirmed: each must be read back",
    "failed": "sends refused for certain (never stored)",
    "indeterminate": "sends whose outcome is unknown (a timeout, a broken connection): may or may not be stored",
    "received": "distinct values read back",
    "deliveries": "every delivery, redeliveries included",
    "lost": "acknowledged and never read back",
    "lost_prefix": "lost values before their producer's first value read back",
    "lost_middle": "lost values between values of their producer that were read back (the worst kind)",
    "lost_postfix": "lost values after their producer's last value read back",
    "unexpected": "read back but never sent, or sent and certainly refused",
    "recovered": "indeterminate sends that were read back after all",
    "redelivered": "repeats the broker flagged as redeliveries (allowed: at-least-once)",
    "stored_duplicates": "values read back twice without the redelivered flag (stored twice)",
    "reordered": "values delivered after a later value of the same producer (reported, not a verdict)",
    "unavailable_max_s": "the longest stretch without an acknowledged send while sends were tried",
    "recovery_s": "from each heal to the next acknowledged send",
    "partial": "transactions of which only some values were read back",
    "aborted_visible": "values of aborted transactions that were read back",
    "acked_redelivered": "values acknowledged inside a committed transaction yet delivered again",
    "stale_plain": "stale deliveries (an old leader's) to plain consumers",
    "stale_own": "stale deliveries to raftmq's own failover consumers",
    "sessions_lost": "kept MQTT sessions the broker said were not present on reconnecting",
    "owed": "(subscriber, value) pairs each subscriber was owed",
}
VERDICT_KEYS = ("lost", "unexpected", "stored_duplicates", "partial", "aborted_visible", "acked_redelivered",
                "stale_plain", "stale_own", "sessions_lost")
WORDS = {1: "once", 2: "twice"}


def _number(count: int) -> str:
    return WORDS.get(count, f"{count} times")


def _list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def faults_in_words(ops: list[Op]) -> list[str]:
    """Per kind that struck, in the order they first struck: "the leader was moved twice, 2.7 and 3.6 s"."""
    lasted: dict[str, list[float]] = {}
    for kind, start, end, _nodes in struck(ops):
        lasted.setdefault(kind, []).append(end - start)
    return [f"{PHRASES.get(kind, kind)} {_number(len(spans))}, {_list([f'{s:.1f}' for s in spans])} s"
            for kind, spans in lasted.items()]


def verdict_sentence(ops: list[Op], result: QueueResult) -> str:
    """The run in a sentence: what was read back, what went wrong, what struck."""
    counts = result.to_dict()
    read = f"{result.acknowledged - result.lost} of {result.acknowledged} acknowledged values were read back"
    wrong = [f"{counts[key]} {key.replace('_', ' ')}" for key in VERDICT_KEYS if counts.get(key)]
    parts = [read, "nothing lost or duplicated" if not wrong else "INVALID: " + ", ".join(wrong)]
    if result.indeterminate:
        parts.append(f"{result.recovered} of {result.indeterminate} indeterminate sends were read back too")
    parts += faults_in_words(ops) or ["no fault struck"]
    return "; ".join(parts)


def heading(workload: str, struck_counts: dict[str, int], seed: int | None = None) -> str:
    """`queue workload under kill ×2 and transfer ×1, seed 1`."""
    faults = _list([f"{kind} ×{count}" for kind, count in struck_counts.items()]) if struck_counts else "no faults"
    return f"{workload} workload under {faults}" + (f", seed {seed}" if seed is not None else "")


def not_struck_note(facts: Mapping[str, Any]) -> str:
    """Which asked-for kinds did not strike, and why; empty when every one did."""
    why: dict[str, str] = facts.get("not_struck_why", {})
    if not why:
        return ""
    groups: dict[str, list[str]] = {}
    for kind, reason in why.items():
        groups.setdefault(reason, []).append(kind)
    return "Asked for but not struck: " + "; ".join(f"{_list(kinds)} ({reason})" for reason, kinds in groups.items())


def write_report(path: Path, title: str, ops: list[Op], result: QueueResult,
                 facts: Mapping[str, Any] | None = None) -> None:
    """`facts`: the run's `workload`, `seed` and `not_struck_why` (kind -> why it did not strike)."""
    facts = facts or {}
    invoked: dict[object, float] = {}
    points: dict[str, tuple[list[float], list[float]]] = {OK: ([], []), FAIL: ([], []), INFO: ([], [])}
    sent: Counter[int] = Counter()
    received: Counter[int] = Counter()
    for op in ops:
        if op.process == NEMESIS:
            continue
        if op.f in SENDS:
            key = _key(op)
            if op.type == INVOKE:
                invoked[key] = op.mono
            elif key in invoked:
                start = invoked.pop(key)
                points[op.type][0].append(start)
                points[op.type][1].append((op.mono - start) * 1000)
                if op.type == OK:
                    sent[int(op.mono)] += 1
        elif op.f == "receive" and op.type == OK:
            received[int(op.mono)] += 1
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                           subplot_titles=("how long each send (or transaction) took, by outcome",
                                           "acknowledged sends and deliveries per second"))
    for outcome in (OK, INFO, FAIL):  # the rare outcomes drawn last, larger: never hidden under the ok ones
        xs, ys = points[outcome]
        if xs:
            figure.add_scatter(x=xs, y=ys, mode="markers", name=f"send {outcome}", row=1, col=1,
                               marker={"size": 4 if outcome == OK else 7, "color": COLOURS[outcome]})
    seconds = list(range(0, max([*sent, *received, 0]) + 1))
    # Deliveries dashed over the sends: when the two agree, both lines still show.
    figure.add_scatter(x=seconds, y=[sent[s] for s in seconds], mode="lines", name="acknowledged sends/s",
                       line={"color": "#2ca02c", "width": 3}, row=2, col=1)
    figure.add_scatter(x=seconds, y=[received[s] for s in seconds], mode="lines", name="deliveries/s",
                       line={"color": "#1f77b4", "width": 2, "dash": "dash"}, row=2, col=1)
    for kind, start, end, nodes in struck(ops):
        figure.add_vrect(x0=start, x1=end, fillcolor="red", opacity=0.12, line_width=0, annotation_text=kind,
                         annotation_hovertext=f"{kind} {', '.join(nodes)}: {end - start:.1f} s",
                         annotation_position="top left", annotation_font_size=12)
    figure.update_yaxes(type="log", title_text="milliseconds (log scale)", row=1, col=1)
    figure.update_yaxes(title_text="per second", rangemode="tozero", row=2, col=1)
    figure.update_xaxes(title_text="seconds since the cluster started (red: a fault, from strike to heal)",
                        row=2, col=1)
    figure.update_layout(height=800, margin={"l": 80, "r": 20, "t": 80, "b": 60}, font={"size": 14},
                         legend={"orientation": "h", "y": 1.08, "x": 0})
    counts = result.to_dict()
    rows = "".join(
        f"<tr><td>{html.escape(key)}</td><td>{html.escape(str(value))}</td>"
        f"<td class='why'>{html.escape(EXPLAIN.get(key, 'a sample of them' if key.endswith('_values') else ''))}</td>"
        "</tr>"
        for key, value in counts.items() if key != "valid"
    )
    verdict = "valid" if result.valid else "INVALID"
    colour = "#2ca02c" if result.valid else "#d62728"
    struck_counts = faults_struck(ops)
    words = heading(str(facts.get("workload", title)), struck_counts, facts.get("seed"))
    note = not_struck_note(facts)
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(words)}</title><style>body{{font-family:sans-serif;margin:2em;max-width:75em}}"
        "td{padding:2px 12px;border-bottom:1px solid #ddd} td.why{color:#555}</style></head><body>"
        f"<h1>{html.escape(words)}</h1>"
        f"<p class='verdict' style='color:{colour};font-size:1.2em'><b>{verdict}</b>: "
        f"{html.escape(verdict_sentence(ops, result))}.</p>"
        + (f"<p class='not-struck'>{html.escape(note)}.</p>" if note else "")
        + f"<p class='run'>Run directory: {html.escape(title)}</p>"
        f"<table>{rows}</table>"
        + figure.to_html(full_html=False, include_plotlyjs=True)
        + "</body></html>",
        encoding="utf-8",
    )
