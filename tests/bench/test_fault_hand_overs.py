"""bench.fault_hand_overs on a run directory made by hand: it finds the hand-over a leader-targeted
restart caused, and reads the elections, the leaderless time, the receipt gap and the ERRORs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from bench.fault_hand_overs import hand_overs
from chaos.history import INVOKE, NEMESIS, OK, History


def _line(at: float, event: str, **fields: object) -> str:
    stamp = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
    rest = " ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in fields.items())
    return f"timestamp='{stamp}' level='info' event='{event}' logger='x' {rest}"


def test_a_restart_of_the_leader_is_read_from_the_logs_and_the_history(tmp_path: Path) -> None:
    history = History(tmp_path / "history.jsonl")
    for i in range(5):
        history.record("p0", INVOKE, "send", f"p0-{i}")
        history.record("p0", OK, "send", f"p0-{i}")
    fault = history.record(NEMESIS, INVOKE, "restart", {"target": "leader", "group": "g1", "nodes": ["g1/n1"]})
    t0 = fault.time
    history.record("p0", OK, "send", "p0-5")
    history.close()
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "g1-n1.1.log").write_text("\n".join([
        _line(t0 - 5, "raft.leader_changed", node="n1", role="leader", term=3),
        _line(t0 + 0.010, "raft.leader_changed", node="n1", role="follower", term=4),
        _line(t0 + 0.012, "client.error", session="s", message="not the leader", detail="the node goes",
              resume_offset=120),
        _line(t0 + 0.012, "client.error", session="u", message="not the leader", detail="the node goes",
              resume_offset=None),
        _line(t0 + 0.030, "client.error", session="w", message="not the leader", detail="a follower now"),
        _line(t0 + 0.013, "client.handed_over", node="n1", session="t", leader="127.0.0.1:2"),
    ]) + "\n")
    (logs / "g1-n2.1.log").write_text("\n".join([
        _line(t0 + 0.040, "raft.leader_changed", node="n2", role="leader", term=4),
        _line(t0 + 0.050, "client.resumed", session="s", hops=0, by="client"),
        _line(t0 + 0.051, "client.resumed", session="v", hops=1, by="relay"),  # a relay that moved: no ERROR
    ]) + "\n")
    [row] = hand_overs(tmp_path)
    assert row["old"] == "g1-n1" and row["new"] == "g1-n2" and row["elections"] == 1
    assert row["leaderless_ms"] == 30.0 and row["not_the_leader"] == 3
    assert row["handed_over"] == 1 and row["unknown"] == 0
    assert row["farewells"] == 2 and row["resumed"] == 1 and row["ended"] == 1
    assert row["receipt_gap_ms"] is not None and row["receipt_gap_ms"] >= 0
