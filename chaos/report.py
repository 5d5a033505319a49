"""`report.html`: one self-contained page a person opens in a browser — the verdict, the
checker's counts (any workload's), a latency scatter of every send (or producer transaction)
coloured by outcome, and sends and receives
per second over time with the fault windows shaded (plotly, its script inlined)."""

from __future__ import annotations

import html
from collections import Counter
from pathlib import Path

from plotly.subplots import make_subplots

from chaos.checker import QueueResult
from chaos.history import FAIL, INFO, INVOKE, NEMESIS, OK, Op

COLOURS = {OK: "#2ca02c", FAIL: "#d62728", INFO: "#ff7f0e"}
SENDS = ("send", "txn")  # what the latency plot shows: a send, or a whole producer transaction


def _key(op: Op) -> object:
    """What pairs an invoke with its completion: the value, or a transaction's id."""
    return op.value["id"] if isinstance(op.value, dict) and "id" in op.value else op.value


def fault_windows(ops: list[Op]) -> list[tuple[float, float, str]]:
    """(start, end, what) of each fault, from its injection to its heal."""
    windows: list[tuple[float, float, str]] = []
    open_fault: tuple[float, str] | None = None
    for op in ops:
        # A heal is `info` when the nodes refused damaged files (detected, then repaired); the
        # end-of-run restart of nodes that were down is no fault.
        if op.process != NEMESIS or op.type not in (OK, INFO) or op.f == "restart":
            continue
        if op.type == INFO and op.f != "heal":
            continue
        if op.f == "heal":
            if open_fault is not None:
                windows.append((open_fault[0], op.mono, open_fault[1]))
                open_fault = None
        elif open_fault is None:
            nodes = op.value.get("nodes", []) if isinstance(op.value, dict) else []
            open_fault = (op.mono, f"{op.f} {', '.join(nodes)}")
    if open_fault is not None:
        windows.append((open_fault[0], max((op.mono for op in ops), default=open_fault[0]), open_fault[1]))
    return windows


def write_report(path: Path, title: str, ops: list[Op], result: QueueResult) -> None:
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
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                           subplot_titles=("send (or transaction) latency (ms, log scale), by outcome", "per second"))
    for outcome, (xs, ys) in points.items():
        if xs:
            figure.add_scatter(x=xs, y=ys, mode="markers", name=f"send {outcome}",
                               marker={"size": 4, "color": COLOURS[outcome]}, row=1, col=1)
    seconds = list(range(0, max([*sent, *received, 0]) + 1))
    figure.add_scatter(x=seconds, y=[sent[s] for s in seconds], mode="lines", name="acknowledged sends/s", row=2, col=1)
    figure.add_scatter(x=seconds, y=[received[s] for s in seconds], mode="lines", name="deliveries/s", row=2, col=1)
    for start, end, what in fault_windows(ops):
        figure.add_vrect(x0=start, x1=end, fillcolor="red", opacity=0.12, line_width=0, annotation_text=what,
                         annotation_position="top left", annotation_font_size=9)
    figure.update_yaxes(type="log", row=1, col=1)
    figure.update_xaxes(title_text="seconds into the run", row=2, col=1)
    figure.update_layout(height=800, margin={"l": 60, "r": 20, "t": 60, "b": 50})
    counts = result.to_dict()
    rows = "".join(
        f"<tr><td>{html.escape(key)}</td><td>{html.escape(str(value))}</td></tr>"
        for key, value in counts.items() if key != "valid"
    )
    verdict = "valid" if result.valid else "INVALID"
    colour = "#2ca02c" if result.valid else "#d62728"
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:2em}}"
        "td{padding:2px 12px;border-bottom:1px solid #ddd}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><h2 style='color:{colour}'>{verdict}</h2>"
        f"<table>{rows}</table>"
        + figure.to_html(full_html=False, include_plotlyjs=True)
        + "</body></html>",
        encoding="utf-8",
    )
