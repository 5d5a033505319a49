"""What a user sees of an audit, on hand-made results (no JVM): the terminal table in 100
columns whatever the run names, no "records/s" where the time is Spark's start-up, the faults
that struck each run (not the kinds asked for), and audit.html's one chart, about correctness."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from spark_audit.checks import CHECKS
from spark_audit.faults import read_faults
from spark_audit.job import AuditResult, RunVerdict
from spark_audit.layout import read_run
from spark_audit.report import not_struck_lines, to_json, verdict_table, write
from spark_audit.synth import make_run
from tests.spark_audit.test_audit_story import READ, page

# What `raftmq chaos run --nemesis all` asks for (chaos.generator.NEMESES, spelled out so the
# test does not follow that list): fourteen kinds.
ALL = ["kill", "pause", "starve", "stutter", "partition", "packet", "power-loss", "corrupt", "clock", "disk-full",
       "restart", "membership", "transfer", "membership-partition"]
# An older run.json: the schedule the nemesis followed, and the kinds asked for.
ALL_TWO_TRANSFERS = {"options": {"workload": "queue", "nemeses": ALL},
                     "faults": [{"at_s": 2.0, "nemesis": "transfer", "target": "leader", "group": 0, "pick": 1,
                                 "heal_after_s": 2.0},
                                {"at_s": 9.0, "nemesis": "transfer", "target": "leader", "group": 0, "pick": 2,
                                 "heal_after_s": 3.0}]}


def run(name: str, meta: dict[str, Any] | None = None, records: int = 615, **found: int) -> RunVerdict:
    counts: dict[str, int | None] = {c: found.get(c, 0) for c in CHECKS}
    read = {**READ, "entries": records // 2, "body_records": records - records // 2}
    return RunVerdict(name, f"/runs/{name}", "queue", counts, read, read_faults(meta or ALL_TWO_TRANSFERS))


def rendered(result: AuditResult, width: int = 100) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(verdict_table(result, width=width))
    for line in not_struck_lines(result, width=width):
        console.print(line, highlight=False)
    return console.export_text().splitlines()


@pytest.mark.parametrize("length", [8, 31, 64, 140, 400])
def test_the_table_fits_100_columns_with_whole_verdicts_at_any_name_length(length: int) -> None:
    name = ("20261126T083957-queue-" + "+".join(ALL) + "-s7" * 200)[:length - 3] + "-s1"
    runs = [run(name + "-a"), run(name + "-b", lost=1, consumer_duplicates=3)]
    lines = rendered(AuditResult(runs, [], 12.5, "local[*]"))
    assert all(len(line) <= 100 for line in lines), "\n".join(lines)
    rows = [line for line in lines if re.search(r"\b(clean|FINDINGS)\s*$", line)]
    assert [row.split()[-1] for row in rows] == ["clean", "FINDINGS"], "\n".join(lines)
    if length > 30:  # a long name is shortened in the middle: its time and its seed stay
        assert "20261126T083957" in rows[0] and "…" in rows[0] and "-a " in rows[0]
    assert "lost 1," in rows[1] and "dup-seen 3" in "\n".join(lines)


def test_no_speed_is_claimed_for_an_audit_whose_time_is_sparks_start_up(tmp_path: Path) -> None:
    small = AuditResult([run("r1", records=1_230)], [], 12.5, "local[*]")
    lines = rendered(small)
    assert "1,230 journal records read in 12.5 s, mostly Spark's start-up" in lines[0]
    assert "records/s" not in "\n".join(lines)
    assert to_json(small)["records_per_second"] is None
    _, text = page(tmp_path / "small", small.runs)
    assert "journal records read in 12.5 s, mostly Spark's start-up" in text
    assert "records/s" not in text
    # Past RATE_FROM_RECORDS the reading dominates: the rate is a speed, and shown.
    large = AuditResult([run("r1", records=10_000_000)], [], 400.0, "local[*]")
    assert "10,000,000 journal records read in 400.0 s (25,000 records/s)" in rendered(large)[0]
    assert to_json(large)["records_per_second"] == 25_000


def test_a_run_names_the_faults_that_struck_not_the_kinds_asked_for(tmp_path: Path) -> None:
    result = AuditResult([run("all-s1")], [], 12.5, "local[*]")
    text = "\n".join(rendered(result))
    assert "transfer ×2" in text
    assert "kill ×" not in text and "partition ×" not in text
    assert "13 asked kinds not struck" in text  # too many for the row: named under the table
    assert ("all-s1: asked for, did not strike: kill, pause, starve, stutter, partition, packet, power-loss, "
            "corrupt, clock, disk-full, restart, membership, membership-partition") in " ".join(text.split())
    data = to_json(result)
    assert data["runs"][0]["faults"]["struck"] == {"transfer": 2}
    _, page_text = page(tmp_path, result.runs)
    assert ("Faults that struck: transfer ×2; asked for but did not strike: kill, pause, starve, stutter, "
            "partition, packet, power-loss, corrupt, clock, disk-full, restart, membership, "
            "membership-partition.") in page_text


def test_a_few_kinds_not_struck_are_named_in_the_row_and_the_html_table() -> None:
    meta = {"options": {"nemeses": ["kill", "partition", "clock"]},
            "faults": [{"nemesis": "kill"}, {"nemesis": "partition"}, {"nemesis": "kill"}]}
    lines = rendered(AuditResult([run("r1", meta), run("r2", meta)], [], 1.0, "local[*]"))
    assert "kill ×2, partition ×1;" in lines[3] and "not struck: clock" in lines[4]


def test_a_run_json_that_records_what_struck_is_believed_over_the_schedule() -> None:
    meta = {**ALL_TWO_TRANSFERS, "faults_struck": {"transfer": 1, "kill": 0}, "nemeses_asked": ["transfer", "kill"],
            "nemeses_not_struck": ["kill"]}
    faults = read_faults(meta)
    assert faults.struck == (("transfer", 1),)
    assert faults.asked == ("transfer", "kill")
    assert faults.not_struck == ("kill",)
    assert read_faults({"options": {"nemeses": []}}).to_json() == {"struck": {}, "asked": [], "not_struck": []}


def test_a_run_directory_gives_its_faults_to_the_audit(tmp_path: Path) -> None:
    made = make_run(tmp_path, "synth", groups=1, members=3, messages=5, batch=5)
    meta = json.loads((made.path / "run.json").read_text())
    (made.path / "run.json").write_text(json.dumps({**meta, **ALL_TWO_TRANSFERS}))
    faults = read_run(made.path).faults
    assert faults is not None and faults.struck == (("transfer", 2),) and len(faults.not_struck) == 13


def test_the_html_chart_shows_per_check_what_was_compared_and_how_many_passed(tmp_path: Path) -> None:
    runs = [run("r1", lost=1), run("r2", divergence=2), run("r3")]
    for r in runs:
        r.read["terms"] = 2
    source, text = page(tmp_path, runs)
    assert source.count('class="plotly-graph-div"') == 1
    assert "journal records read per run" not in source
    assert "What each check compared, and how many passed (3 runs)" in source
    # The numbers on the bars: of every judged check, over the three runs' reads (READ: 300 each).
    assert "899 of 900 passed, 1 found" in source  # lost: acknowledged sends
    assert "919 of 921 passed, 2 found" in source  # divergence: Raft entries (307 per run)
    assert "6 of 6 passed" in source  # leaders: terms
    assert "acknowledged sends" in source and "Raft entries" in source
    # The run table names what struck each run.
    assert "faults struck" in text and "transfer ×2" in text
    _, html_path = write(AuditResult(runs[:1], [], 1.0, "local[1]"), tmp_path / "one")
    assert html_path.read_text().count('class="plotly-graph-div"') == 1  # one run: the chart still says it


def test_the_html_table_shortens_a_long_run_name_and_keeps_it_whole_in_its_tooltip(tmp_path: Path) -> None:
    name = "20261126T083957-queue-" + "+".join(ALL) + "-s1"
    source, text = page(tmp_path, [run(name), run("short-s2")])
    assert f"<td class=name title='{name}'>20261126T083957-queu…ership-partition-s1</td>" in source
    assert "<td class=name title='short-s2'>short-s2</td>" in source
