"""What an audit writes: `audit.json` (every count, the sample of findings, what was read) and
`audit.html` (one self-contained page: the verdict in a sentence, what each check proved per
run, in words and numbers (spark_audit.story), the findings, and charts where they carry more
than a sentence), and the verdict table printed on a terminal."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

from spark_audit import story
from spark_audit.checks import CHECKS
from spark_audit.faults import RunFaults, from_json, struck_text
from spark_audit.job import AuditResult

# Check names that fit a terminal: stored and consumer-visible duplicates, divergence, conservation.
SHORT = {"unexpected": "unexp", "stored_duplicates": "dup-stored", "consumer_duplicates": "dup-seen",
         "divergence": "diverge", "conservation": "conserve"}
# Below this many journal records an audit's seconds are Spark's start-up and its many small
# stages' fixed costs, not reading: no rate is shown (docs/sittings/2026-11-audit.md: 319 k
# records of 75 runs, 105 s, against 10 M records at 23 k/s).
RATE_FROM_RECORDS = 1_000_000
HTML_NAME = 40  # characters of a run's name in audit.html's table of runs (the whole name is its tooltip)
TABLE_WIDTH = 100  # the terminal table fits this many columns, whatever the run names
NOT_STRUCK_INLINE = 3  # a row names up to this many asked-for kinds that did not strike; more go below the table


def records_per_second(records: int, seconds: float) -> int | None:
    """The audit's reading rate, or None where its time is mostly Spark's start-up."""
    return round(records / seconds) if seconds and records >= RATE_FROM_RECORDS else None


def timing(records: int, seconds: float) -> str:
    """`1,230 journal records read in 12.5 s, mostly Spark's start-up` (no rate) or, past
    RATE_FROM_RECORDS, `... in 423.0 s (23,648 records/s)`."""
    text = f"{story.count(records, 'journal record')} read in {seconds:.1f} s"
    rate = records_per_second(records, seconds)
    if rate is None:
        return text + ", mostly Spark's start-up"
    return text + f" ({rate:,} records/s)"


def to_json(result: AuditResult) -> dict[str, Any]:
    return {
        "clean": result.clean,
        "seconds": round(result.seconds, 3),
        "master": result.master,
        "records": result.records,
        "records_per_second": records_per_second(result.records, result.seconds),
        "checks": list(CHECKS),
        "runs": [{"run": run.name, "path": run.path, "workload": run.workload, "clean": run.clean,
                  "counts": run.counts, "read": run.read,
                  "faults": run.faults.to_json() if run.faults is not None else None} for run in result.runs],
        "findings": result.findings,
    }


def shorten(name: str, width: int) -> str:
    """`name` in at most `width` characters: its start and end kept, an ellipsis in the middle
    (a chaos run's name ends with its seed, and starts with its time)."""
    if len(name) <= width:
        return name
    if width < 3:
        return name[:width]
    tail = (width - 1) // 2
    return name[:width - 1 - tail] + "…" + name[len(name) - tail:]


def checks_cell(counts: dict[str, int | None]) -> str:
    """A run's checks in a few words: `10 clean`, `7 clean, 3 n/a`, or the ones that found something."""
    bad = [f"{SHORT.get(c, c)} {n:,}" for c, n in counts.items() if n]
    clean = sum(1 for n in counts.values() if n == 0)
    na = sum(1 for n in counts.values() if n is None)
    if bad:
        return "[bold red]" + escape(", ".join(bad)) + "[/]" + (f" [dim]({clean} clean)[/]" if clean else "")
    return f"[green]{clean} clean[/]" + (f", [dim]{na} n/a[/]" if na else "")


def faults_cell(faults: RunFaults | None) -> str:
    """What struck, with counts, and the asked-for kinds that did not strike (named up to
    NOT_STRUCK_INLINE, else counted: the lines under the table name them)."""
    if faults is None:
        return "[dim]none (embedded)[/]"
    text = escape(struck_text(faults))
    missed = faults.not_struck
    if missed and len(missed) <= NOT_STRUCK_INLINE:
        text += f"; [yellow]not struck: {escape(', '.join(missed))}[/]"
    elif missed:
        text += f"; [yellow]{len(missed)} asked kinds not struck[/]"
    return text


def name_width_for(width: int) -> int:
    """How much of a run's name the table shows, in `width` columns."""
    return max(12, min(40, width * 3 // 10))


def verdict_table(result: AuditResult, width: int = TABLE_WIDTH) -> Table:
    """One row per run: its name (shortened to fit), workload, the faults that struck it, its
    checks in a few words and its verdict, in `width` columns."""
    table = Table(title=f"raftmq audit: {story.count(len(result.runs), 'run')}, "
                        f"{timing(result.records, result.seconds)}",
                  box=box.SIMPLE_HEAD, show_edge=False, width=width)
    name_width = name_width_for(width)
    table.add_column("run", no_wrap=True, max_width=name_width)
    table.add_column("workload", no_wrap=True)
    table.add_column("faults struck", overflow="fold", ratio=3)
    table.add_column("checks", overflow="fold", ratio=2)
    table.add_column("verdict", no_wrap=True, min_width=8)
    for run in result.runs:
        table.add_row(escape(shorten(run.name, name_width)), escape(run.workload), faults_cell(run.faults),
                      checks_cell(run.counts), "[green]clean[/]" if run.clean else "[bold red]FINDINGS[/]")
    return table


def not_struck_lines(result: AuditResult, width: int = TABLE_WIDTH) -> list[str]:
    """Under the table: each run whose asked-for kinds that did not strike are too many for its row."""
    return [f"{shorten(run.name, name_width_for(width))}: asked for, did not strike: {', '.join(run.faults.not_struck)}"
            for run in result.runs if run.faults is not None and len(run.faults.not_struck) > NOT_STRUCK_INLINE]


def write(result: AuditResult, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    data = to_json(result)
    json_path = out / "audit.json"
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    html_path = out / "audit.html"
    html_path.write_text(_page(data))
    return json_path, html_path


OPEN_RUNS = 5  # up to this many runs, every run's checks are shown open; beyond, only runs with findings


def _page(data: dict[str, Any]) -> str:
    """The verdict in a sentence, what each check proved per run (in words, with the numbers),
    the findings, and charts only where they say more than a sentence would."""
    runs = data["runs"]
    verdict = "clean" if data["clean"] else "FINDINGS"
    colour = "#2ca02c" if data["clean"] else "#d62728"
    charts = _charts(data)
    body = [
        f"<h1>raftmq audit</h1><h2 style='color:{colour}'>{verdict}</h2>",
        f"<p class=verdict>{html.escape(story.verdict(data))}</p>",
        f"<p>{html.escape(timing(data['records'], data['seconds']))}, on {html.escape(str(data['master']))}; "
        "the records are Raft entries and body records, every member's. "
        "docs/audit.md says how each check works and how it is shown to fail.</p>",
    ]
    if len(runs) > 1:
        body.append(_table(data))
    body += [chart.to_html(full_html=False, include_plotlyjs=i == 0) for i, chart in enumerate(charts)]
    body.append("<h2>What was checked</h2>")
    body += [_run_section(run, data["checks"], [f for f in data["findings"] if f["run"] == run["run"]],
                          open_=not run["clean"] or len(runs) <= OPEN_RUNS) for run in runs]
    if data["findings"]:
        rows = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(f.get(k) or ''))}</td>"
                             for k in ("run", "check", "group", "node", "item", "detail"))
            + "</tr>" for f in data["findings"])
        body.append("<h2>Findings</h2><p>A sample: at most <code>--sample</code> per run and check "
                    "(audit.json has every count).</p>"
                    "<table><tr><th>run</th><th>check</th><th>group</th><th>node</th><th>item</th><th>detail</th></tr>"
                    f"{rows}</table>")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>raftmq audit: {verdict}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:70em}}table{{border-collapse:collapse;margin-bottom:2em}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}.ok{{background:#e8f6e8}}
td.name{{overflow-wrap:anywhere;min-width:12em;max-width:20em}}
.bad{{background:#f9d6d5;font-weight:bold}}
.na{{color:#999}}.verdict{{font-size:1.15em}}li{{margin:3px 0}}li.ok{{list-style:'\\2713  ';background:none}}
li.bad{{list-style:'\\2717  ';color:#b03a2e}}summary{{cursor:pointer;font-size:1.05em}}</style></head><body>
{chr(10).join(body)}
</body></html>
"""


def _table(data: dict[str, Any]) -> str:
    checks = data["checks"]
    head = "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in checks)
    rows = []
    for run in data["runs"]:
        cells = []
        for check in checks:
            n = run["counts"][check]
            style = "na" if n is None else ("ok" if n == 0 else "bad")
            cells.append(f"<td class={style}>{'n/a' if n is None else n}</td>")
        verdict = "<td class=ok>clean</td>" if run["clean"] else "<td class=bad>findings</td>"
        faults = from_json(run.get("faults"))
        struck = "none (embedded brokers)" if faults is None else struck_text(faults)
        missed = f"<br><span class=na>not struck: {html.escape(', '.join(faults.not_struck))}</span>" \
            if faults is not None and faults.not_struck else ""
        name = f"<td class=name title='{html.escape(run['run'])}'>{html.escape(shorten(run['run'], HTML_NAME))}</td>"
        rows.append(f"<tr>{name}<td>{html.escape(run['workload'])}</td>"
                    f"<td>{html.escape(struck)}{missed}</td>{''.join(cells)}{verdict}</tr>")
    return (f"<table><tr><th>run</th><th>workload</th><th>faults struck</th>{head}<th>verdict</th></tr>"
            f"{''.join(rows)}</table>")


def _run_section(run: dict[str, Any], checks: list[str], findings: list[dict[str, Any]], open_: bool) -> str:
    items = []
    for check in checks:
        sample = [f for f in findings if f["check"] == check]
        status, text = story.check_line(check, run["counts"][check], run["read"], run["workload"], sample)
        items.append(f"<li class={status}><b>{html.escape(check.replace('_', ' '))}</b>: {html.escape(text)}</li>")
    colour = "#2ca02c" if run["clean"] else "#d62728"
    return (f"<details{' open' if open_ else ''}><summary><b>{html.escape(run['run'])}</b> "
            f"<span style='color:{colour}'>{html.escape(story.run_summary(run))}</span></summary>"
            f"<ul>{''.join(items)}</ul></details>")


def _charts(data: dict[str, Any]) -> list[Any]:
    """One chart, about correctness: per check (of those judged in some run), what it compared
    and how many, as a bar of 100 %: the share that passed in green, the share found wanting in
    red, the numbers written on it. No chart when no check was judged."""
    from plotly import graph_objects as go

    rows = check_totals(data)
    if not rows:
        return []
    labels = [(f"<b style='color:#b03a2e'>{c.replace('_', ' ')}</b>" if bad else c.replace("_", " "))
              + f"<br><span style='font-size:11px;color:#555'>{what}</span>" for c, what, _, bad in rows]
    passed = [100.0 * (n - bad) / n if n else 100.0 for _, _, n, bad in rows]
    text = [f"{n - bad:,} of {n:,} passed" + (f", {bad:,} found" if bad else "") for _, _, n, bad in rows]
    figure = go.Figure([
        go.Bar(y=labels, x=passed, orientation="h", name="passed", marker_color="#2ca02c", text=text,
               textposition="inside", insidetextanchor="start", textfont={"color": "white", "size": 13}),
        go.Bar(y=labels, x=[100.0 - p for p in passed], orientation="h", name="found wanting",
               marker_color="#d62728"),
    ])
    runs = story.count(len(data["runs"]), "run")
    figure.update_layout(title=f"What each check compared, and how many passed ({runs})",
                         barmode="stack", height=70 + 46 * len(rows), font={"size": 13},
                         margin={"t": 50, "b": 40, "l": 10, "r": 10},
                         legend={"orientation": "h", "y": -0.05 if len(rows) > 4 else -0.2},
                         xaxis={"range": [0, 100], "ticksuffix": " %", "title": None},
                         yaxis={"autorange": "reversed", "automargin": True})
    return [figure]


def check_totals(data: dict[str, Any]) -> list[tuple[str, str, int, int]]:
    """(check, what it compared, how many, how many found) per check, over the runs it judged."""
    rows = []
    for check in data["checks"]:
        judged = [run for run in data["runs"] if run["counts"][check] is not None]
        if not judged:
            continue
        key, what = story.AMONG[check]
        found = sum(run["counts"][check] for run in judged)
        compared = max(sum(run["read"].get(key, 0) for run in judged), found)
        rows.append((check, story.PLURAL.get(what, what + "s"), compared, found))
    return rows
