"""audit.html on hand-made results (no JVM): the verdict in a sentence, what each check proved per
run in words with its numbers, the failures named, and charts only where they carry information."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from spark_audit.checks import CHECKS
from spark_audit.job import AuditResult, RunVerdict
from spark_audit.report import write

READ = {"groups": 1, "members": 3, "entries": 330, "body_records": 900, "segments": 3, "operations": 1200,
        "acked_sends": 300, "receives": 300, "messages": 300, "stored": 300, "consumed": 300, "forwarded_in": 0,
        "terms": 2, "torn_tails": 0, "torn_segments": 0}


def verdict(name: str, workload: str = "queue", read: dict[str, int] | None = None, **found: int) -> RunVerdict:
    na = workload not in ("queue", "cross-group", "shared-queue")
    counts: dict[str, int | None] = {c: None if na and c in ("lost", "unexpected", "order") else found.get(c, 0)
                                     for c in CHECKS}
    return RunVerdict(name, f"/runs/{name}", workload, counts, dict(read or READ))


def page(tmp_path: Path, runs: list[RunVerdict], findings: list[dict[str, Any]] | None = None) -> tuple[str, str]:
    """(the page's html, its text as a reader sees it: no markup, no scripts, spaces collapsed)."""
    result = AuditResult(runs, findings or [], 12.5, "local[2]")
    _, html_path = write(result, tmp_path)
    source = html_path.read_text()
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", source, flags=re.S)
    return source, re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text)))


def charts(source: str) -> int:
    return source.count('class="plotly-graph-div"')


def lost(run: str, value: str) -> dict[str, Any]:
    return {"run": run, "check": "lost", "group": None, "node": None, "item": value,
            "detail": "acknowledged, never received, not waiting at the end, not dead-lettered or expired"}


def test_a_clean_run_says_what_was_proven_with_its_numbers(tmp_path: Path) -> None:
    source, text = page(tmp_path, [verdict("r1")])
    assert ("Clean: 1 run, 1,230 journal records read; nothing acknowledged was lost, nothing appeared that no one "
            "sent, nothing was stored twice") in text
    assert "no two replicas diverged, no two leaders shared a term" in text
    # Each check, in words, over the run's own numbers.
    assert "every one of the 300 acknowledged sends was received, still waits at the end" in text
    assert "each of the 300 receives, and each message stored from a client, is of a value a client sent" in text
    assert "each group's members (3 members in all) agree on every committed Raft entry" in text
    assert "(330 Raft entries, 900 body records read)" in text
    assert "no term had two leaders, nor a new leader's no-op at two indexes (2 terms logged by the members)" in text
    assert ("the Raft journals and snapshots of 3 members and 3 body-journal segments were read without corruption"
            in text)
    assert ("Clean. queue workload, 1 group, 3 members: 330 Raft entries and 900 body records read, "
            "1,200 client operations.") in text
    assert charts(source) == 1  # what each check compared, and how many passed


def test_a_run_with_a_lost_message_names_it(tmp_path: Path) -> None:
    source, text = page(tmp_path, [verdict("r1", lost=1)], [lost("r1", "g1-p0-30")])
    assert "FINDINGS" in text
    assert ("Findings in 1 of 1 run (1,230 journal records read): 1 acknowledged message lost. "
            "The other checks (unexpected, stored duplicates, consumer duplicates, divergence, leaders, bridges, "
            "order, conservation, files) found nothing.") in text
    assert "lost : 1 acknowledged message lost (among 300 acknowledged sends): g1-p0-30" in text
    assert "r1 lost g1-p0-30 acknowledged, never received" in text  # the findings table
    # The checks that passed still say what they proved.
    assert "no value among the 300 receives was received twice without the redelivered flag" in text
    assert charts(source) == 1  # what each check compared, and how many passed: one chart, not one per finding


def test_charts_appear_where_they_carry_information(tmp_path: Path) -> None:
    findings = [lost("r1", "v-1"), {"run": "r2", "check": "divergence", "group": "g1", "node": "n3", "item": "4",
                                    "detail": "Raft entry 4 differs"}]
    source, text = page(tmp_path, [verdict("r1", lost=1), verdict("r2", divergence=1), verdict("r3")], findings)
    assert charts(source) == 1  # per check: what was compared, how many, how many passed; no records per run
    assert source.count("plotly.js v") == 1  # the library inlined once
    assert "divergence : 1 entry, body or snapshot on which a member differs (among 330 Raft entries): g1/n3 4" in text
    assert "Findings in 2 of 3 runs" in text


def test_a_check_that_does_not_apply_says_so_and_is_not_claimed(tmp_path: Path) -> None:
    _, text = page(tmp_path, [verdict("t1", workload="topic")])
    assert "lost : not judged: the topic workload's sends and receives are not the values of one queue" in text
    assert "nothing acknowledged was lost" not in text
    assert "(lost, unexpected and order not judged: the runs' workloads are judged by the chaos checkers.)" in text
