"""What an audit writes: `audit.json` (every count, the sample of findings, what was read) and
`audit.html` (one self-contained page: the verdict in a sentence, what each check proved per
run, in words and numbers (spark_audit.story), the findings, and charts where they carry more
than a sentence), and the verdict table printed on a terminal."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from spark_audit import story
from spark_audit.checks import CHECKS
from spark_audit.job import AuditResult

# Column headings that fit a terminal: stored and consumer-visible duplicates, divergence, conservation.
SHORT = {"unexpected": "unexp", "stored_duplicates": "dup-stored", "consumer_duplicates": "dup-seen",
         "divergence": "diverge", "conservation": "conserve"}


def to_json(result: AuditResult) -> dict[str, Any]:
    return {
        "clean": result.clean,
        "seconds": round(result.seconds, 3),
        "master": result.master,
        "records": result.records,
        "records_per_second": round(result.records / result.seconds) if result.seconds else None,
        "checks": list(CHECKS),
        "runs": [{"run": run.name, "path": run.path, "workload": run.workload, "clean": run.clean,
                  "counts": run.counts, "read": run.read} for run in result.runs],
        "findings": result.findings,
    }


def verdict_table(result: AuditResult) -> Table:
    table = Table(title=f"raftmq audit: {len(result.runs)} run(s), {result.records:,} journal records, "
                        f"{result.seconds:.1f} s")
    table.add_column("run", overflow="fold", min_width=20)
    table.add_column("workload")
    for check in CHECKS:
        table.add_column(SHORT.get(check, check), justify="right", no_wrap=True)
    table.add_column("verdict")
    for run in result.runs:
        cells = []
        for check in CHECKS:
            count = run.counts[check]
            cells.append("[dim]n/a[/]" if count is None else ("[green]0[/]" if count == 0 else f"[bold red]{count}[/]"))
        table.add_row(run.name, run.workload, *cells, "[green]clean[/]" if run.clean else "[bold red]FINDINGS[/]")
    return table


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
        f"<p>{story.count(data['records'], 'journal record')} (Raft entries and body records, every member's) read in "
        f"{data['seconds']} s on {html.escape(str(data['master']))} ({data['records_per_second'] or 0:,} records/s). "
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
        rows.append(f"<tr><td>{html.escape(run['run'])}</td><td>{html.escape(run['workload'])}</td>"
                    f"{''.join(cells)}{verdict}</tr>")
    return f"<table><tr><th>run</th><th>workload</th>{head}<th>verdict</th></tr>{''.join(rows)}</table>"


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
    """A chart only where it carries more than a sentence: findings per check when two or more
    checks found something, records read per run when there are two or more runs."""
    from plotly import graph_objects as go

    runs = data["runs"]
    charts = []
    totals = {c: sum(run["counts"][c] or 0 for run in runs) for c in data["checks"]}
    found = {c: n for c, n in totals.items() if n}
    if len(found) > 1:
        figure = go.Figure(go.Bar(x=[c.replace("_", " ") for c in found], y=list(found.values()),
                                  marker_color="#c0392b"))
        figure.update_layout(title="findings per check, all runs", height=320, margin={"t": 40, "b": 40})
        charts.append(figure)
    if len(runs) > 1:
        names = [run["run"] for run in runs]
        figure = go.Figure([go.Bar(x=names, y=[run["read"].get("entries", 0) for run in runs], name="Raft entries"),
                            go.Bar(x=names, y=[run["read"].get("body_records", 0) for run in runs],
                                   name="body records")])
        figure.update_layout(title="journal records read per run", barmode="stack", height=320,
                             margin={"t": 40, "b": 120})
        charts.append(figure)
    return charts
