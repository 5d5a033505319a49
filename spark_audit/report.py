"""What an audit writes: `audit.json` (every count, the sample of findings, what was read) and
`audit.html` (the verdict table, findings, and plots, one self-contained page), and the
verdict table printed on a terminal."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from rich.table import Table

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
    table = Table(title=f"raftmq audit: {len(result.runs)} run(s), {result.records:,} journal records, {result.seconds:.1f} s")
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


def _page(data: dict[str, Any]) -> str:
    from plotly import graph_objects as go

    checks = data["checks"]
    runs = data["runs"]
    head = "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in checks)
    rows = []
    for run in runs:
        cells = []
        for check in checks:
            count = run["counts"][check]
            style = "na" if count is None else ("ok" if count == 0 else "bad")
            cells.append(f"<td class={style}>{'n/a' if count is None else count}</td>")
        verdict = "<td class=ok>clean</td>" if run["clean"] else "<td class=bad>findings</td>"
        rows.append(f"<tr><td>{html.escape(run['run'])}</td><td>{html.escape(run['workload'])}</td>{''.join(cells)}{verdict}</tr>")
    findings = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(f.get(k) or ''))}</td>" for k in ("run", "check", "group", "node", "item", "detail")) + "</tr>"
        for f in data["findings"]
    ) or "<tr><td colspan=6>none</td></tr>"
    totals = [sum((run["counts"][c] or 0) for run in runs) for c in checks]
    figure = go.Figure(go.Bar(x=[c.replace("_", " ") for c in checks], y=totals, marker_color="#c0392b"))
    figure.update_layout(title="findings per check, all runs", height=320, margin={"t": 40, "b": 40})
    read = go.Figure(go.Bar(x=[run["run"] for run in runs],
                            y=[run["read"].get("entries", 0) + run["read"].get("body_records", 0) for run in runs]))
    read.update_layout(title="journal records read per run", height=320, margin={"t": 40, "b": 120})
    verdict = "clean" if data["clean"] else "FINDINGS"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>raftmq audit: {verdict}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin-bottom:2em}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}.ok{{background:#e8f6e8}}.bad{{background:#f9d6d5;font-weight:bold}}
.na{{color:#999}}</style></head><body>
<h1>raftmq audit: {verdict}</h1>
<p>{len(runs)} run(s); {data['records']:,} journal records in {data['seconds']} s on {html.escape(str(data['master']))}
({data['records_per_second'] or 0:,} records/s). docs/audit.md explains each check.</p>
<table><tr><th>run</th><th>workload</th>{head}<th>verdict</th></tr>{''.join(rows)}</table>
{figure.to_html(full_html=False, include_plotlyjs=True)}
{read.to_html(full_html=False, include_plotlyjs=False)}
<h2>Findings (a sample: at most 20 per run and check; audit.json has the counts)</h2>
<table><tr><th>run</th><th>check</th><th>group</th><th>node</th><th>item</th><th>detail</th></tr>{findings}</table>
</body></html>
"""
