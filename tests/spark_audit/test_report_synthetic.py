"""audit.html after a real audit of synthetic runs (spark_audit.synth): the numbers it states are
the ones the generator wrote, and the run with a lost message has it named."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from spark_audit.job import AuditResult
from spark_audit.report import write

# The timeout covers the `audited` fixture (real chaos runs and one audit job), made by whichever
# test of the group asks first.
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]  # see test_cli.py


def text_of(result: AuditResult, out: Path) -> str:
    _, page = write(result, out)
    source = re.sub(r"<(script|style)\b.*?</\1>", " ", page.read_text(), flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", source)))


def test_the_report_says_what_was_proven_and_what_was_not(audited: dict[str, Any], synthetic_runs: dict[str, Any],
                                                           tmp_path: Path) -> None:
    clean, lost, value = synthetic_runs["clean"], synthetic_runs["lost"], synthetic_runs["value"]
    result = audited["result"]  # (audited in the same job as the real runs)
    by_run = {run.name: run for run in result.runs}

    def alone(name: str) -> AuditResult:
        return AuditResult([by_run[name]], [f for f in result.findings if f["run"] == name], result.seconds,
                           result.master)

    text = text_of(alone(clean.path.name), tmp_path / "clean")
    # 2 groups of 3 members, 60 messages each: what the generator wrote is what the report says was read.
    assert f"Clean: 1 run, {clean.records:,} journal records read; nothing acknowledged was lost" in text
    assert "every one of the 120 acknowledged sends was received, still waits at the end" in text
    assert "no value among the 120 receives was received twice without the redelivered flag" in text
    assert ("each of the 120 arrivals in a store left it (120 acknowledged; or dead-lettered, expired, forwarded)"
            in text)
    assert "each group's members (6 members in all) agree on every committed Raft entry" in text
    assert "and 6 body-journal segments were read without corruption" in text
    assert "Clean. queue workload, 2 groups, 6 members:" in text

    text = text_of(alone(lost.name), tmp_path / "lost")
    assert "FINDINGS" in text
    assert f"Findings in 1 of 1 run ({clean.records:,} journal records read): 1 acknowledged message lost." in text
    assert f"lost : 1 acknowledged message lost (among 120 acknowledged sends): {value}" in text
    assert f"{lost.name} lost {value} acknowledged, never received" in text  # the findings table
    # Only the history lost the receives: the files still prove the rest.
    assert "each group's members (6 members in all) agree on every committed Raft entry" in text
