"""report.html tells the story: a heading naming the workload and the faults that struck, the
verdict in a sentence first, the counts each with what it means, the asked-for kinds that did
not strike; from a synthetic history, and from a real small run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chaos.checker import check_queue
from chaos.history import INVOKE, NEMESIS, OK, History
from chaos.report import verdict_sentence, write_report


def _history() -> History:
    history = History()
    for i in range(3):
        history.record("p1", INVOKE, "send", f"p1-{i}")
        history.record("p1", OK, "send", f"p1-{i}")
        history.record("c1", OK, "receive", f"p1-{i}")
    for _ in range(2):
        value = {"target": "leader", "group": "g1", "nodes": ["g1/n1"]}
        history.record(NEMESIS, INVOKE, "transfer", value)
        history.record(NEMESIS, OK, "transfer", value)
        history.record(NEMESIS, OK, "heal", {"nodes": ["g1/n1"], "of": "transfer"})
    return history


def test_the_verdict_sentence_says_what_was_read_back_and_what_struck() -> None:
    history = _history()
    sentence = verdict_sentence(history.ops, check_queue(history.ops))
    assert re.fullmatch(r"3 of 3 acknowledged values were read back; nothing lost or duplicated; "
                        r"the leader was moved twice, \d+\.\d and \d+\.\d s", sentence), sentence


def test_the_report_heads_with_the_workload_and_faults_then_the_verdict_then_explained_counts(tmp_path: Path) -> None:
    history = _history()
    path = tmp_path / "report.html"
    write_report(path, "20250101T000000-queue-transfer-s1", history.ops, check_queue(history.ops),
                 {"workload": "queue", "seed": 1, "not_struck_why": {"kill": "did not fit in 20 s: seed 1 needs "
                                                                     "--time-limit 96"}})
    text = path.read_text()
    assert "<h1>queue workload under transfer ×2, seed 1</h1>" in text
    body = text[text.index("<h1>"):]
    assert body.index("acknowledged values were read back") < body.index("<table>")  # the sentence first
    assert "Asked for but not struck: kill (did not fit in 20 s: seed 1 needs --time-limit 96)" in text
    assert "<td>lost_middle</td><td>0</td><td class='why'>lost values between values" in text
    assert "<td>indeterminate</td><td>0</td><td class='why'>sends whose outcome is unknown" in text


@pytest.mark.integration
def test_a_real_run_writes_the_story_into_report_html_and_run_json(tmp_path: Path) -> None:
    from chaos.run import RunOptions, run

    run_dir, result = run(RunOptions(nemeses=("transfer", "kill"), time_limit_s=14, rate=30, concurrency=2, seed=3,
                                     out=tmp_path / "runs"))
    facts = json.loads((run_dir / "run.json").read_text())
    struck = facts["faults_struck"]
    assert facts["nemeses_asked"] == ["transfer", "kill"] and set(struck) == {"transfer", "kill"}, facts
    assert facts["nemeses_not_struck"] == [] and facts["time_needed_for_all_s"] <= 14
    assert run_dir.name.endswith("-s3") and "transfer" in run_dir.name and "kill" in run_dir.name
    text = (run_dir / "report.html").read_text()
    heading = re.search(r"<h1>(.*?)</h1>", text)
    assert heading is not None and heading.group(1).startswith("queue workload under ")
    assert all(f"{kind} ×{count}" in heading.group(1) for kind, count in struck.items())
    assert f"{result.acknowledged - result.lost} of {result.acknowledged} acknowledged values were read back" in text
    assert "the leader was moved once" in text and "members were killed (SIGKILL) and restarted once" in text
    assert "class='why'>acknowledged and never read back" in text
