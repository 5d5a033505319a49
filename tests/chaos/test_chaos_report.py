"""report.html from a synthetic history: verdict, counts, the plots and the fault windows."""

from __future__ import annotations

from pathlib import Path

from chaos.checker import check_queue
from chaos.history import FAIL, INFO, INVOKE, NEMESIS, OK, History
from chaos.report import fault_windows, write_report
from chaos.transactions_checker import check_transactions


def test_a_report_shows_the_verdict_the_counts_and_the_faults(tmp_path: Path) -> None:
    history = History()
    history.record("p1", INVOKE, "send", "p1-0")
    history.record("p1", OK, "send", "p1-0")
    history.record(NEMESIS, INVOKE, "kill", {"nodes": ["g1/n2"]})
    history.record(NEMESIS, OK, "kill", {"nodes": ["g1/n2"]})
    history.record("p1", INVOKE, "send", "p1-1")
    history.record("p1", INFO, "send", "p1-1")
    history.record(NEMESIS, OK, "heal", {"nodes": ["g1/n2"]})
    history.record("c1", OK, "receive", "p1-0")
    windows = fault_windows(history.ops)
    assert len(windows) == 1 and windows[0][2] == "kill g1/n2" and windows[0][0] <= windows[0][1]
    path = tmp_path / "report.html"
    write_report(path, "a run", history.ops, check_queue(history.ops))
    text = path.read_text()
    assert "<b>valid</b>" in text and "indeterminate" in text
    assert "kill g1" in text and "send info" in text and "plotly" in text.lower()  # plotly escapes the slash


def test_a_transactions_report_draws_each_transaction_by_its_id(tmp_path: Path) -> None:
    history = History()
    first = {"id": "p1-t0", "values": ["p1-0", "p1-1"], "abort": False}
    second = {"id": "p1-t1", "values": ["p1-2"], "abort": True}
    for record, outcome in ((first, OK), (second, FAIL)):
        history.record("p1", INVOKE, "txn", record)
        history.record("p1", outcome, "txn", record)
    history.record("c1", OK, "receive", "p1-0")
    history.record("c1", OK, "receive", "p1-1")
    result = check_transactions(history.ops)
    path = tmp_path / "report.html"
    write_report(path, "transactions", history.ops, result)
    text = path.read_text()
    assert result.valid and "send ok" in text and "send fail" in text and "committed" in text


def test_fault_windows_close_at_a_heal_that_detected_damage_and_ignore_restarts() -> None:
    from chaos.history import History
    from chaos.report import fault_windows

    history = History()
    history.record("nemesis", "invoke", "corrupt", {"nodes": ["g1/n1"]})
    history.record("nemesis", "ok", "corrupt", {"nodes": ["g1/n1"]})
    history.record("nemesis", "invoke", "heal", {"nodes": ["g1/n1"]})
    history.record("nemesis", "info", "heal", {"nodes": ["g1/n1"], "detected": {"g1/n1": "corrupt"}})
    history.record("nemesis", "ok", "kill", {"nodes": ["g1/n2"]})
    history.record("nemesis", "ok", "heal", {"nodes": ["g1/n2"]})
    history.record("nemesis", "ok", "restart", {"nodes": ["g1/n3"]})
    assert [what for _start, _end, what in fault_windows(history.ops)] == ["corrupt g1/n1", "kill g1/n2"]
