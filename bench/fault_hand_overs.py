"""What clients saw of each hand-over a chaos run's `restart`, `membership` or `transfer` nemesis
caused on a leader (a graceful stop, a removal from the group: the leader hands over first; or a
transfer asked of a leader that stays up), read from the run directories afterwards (chaos/run.py
writes them):

- `elections`: terms from the old leader's to the next (1: one election, as a hand-over should);
- `leaderless ms`: from the old leader stepping down (its `raft.leader_changed` log line) to a
  member logging that it leads in a newer term (0 when the new one led first);
- `receipt gap ms`: the longest stretch without a receipted SEND from 1 s before the fault to
  6 s after (all producers together): how long the receipts stopped;
- `not-the-leader`: ERROR frames the old node sent its clients (`client.error` lines), of which
  `farewells` as it went (the others: it refused new connections once restarted as a follower);
- `resumed`: of the farewells, sessions the client resumed at the leader on a new socket, as the
  ERROR asked (a `client.resumed` line with `by='client'` for the same session within 2 s): that
  client's application saw nothing;
- `ended`: the other farewells, sessions that ended: their clients reconnected;
- `handed over`: sessions the old leader handed to its successor (`client.handed_over` lines);
- `unknown`: SENDs whose outcome a client could not know in that window.

    .venv/bin/python -m bench.fault_hand_overs runs/*-queue-restart-*

Log timestamps and the history's wall clock come from the one machine the run ran on.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

from chaos.history import INFO, INVOKE, NEMESIS, OK, read_history

FAULTS = ("restart", "membership", "transfer")
EVENTS = ("raft.leader_changed", "client.error", "client.handed_over", "client.resumed")
LINE = re.compile(r"timestamp='([^']+)'.*event='([^']+)'")
FIELD = re.compile(r"(\w+)=('[^']*'|\S+)")


def _events(run_dir: Path) -> list[dict[str, Any]]:
    """Every leader change and client error in the run's node logs, by time."""
    events = []
    for path in sorted((run_dir / "logs").glob("*.log")):
        node = path.name.split(".")[0]  # g1-n2
        for line in path.read_text(errors="replace").splitlines():
            match = LINE.search(line)
            if match is None or match.group(2) not in EVENTS:
                continue
            fields = {k: v.strip("'") for k, v in FIELD.findall(line)}
            at = datetime.fromisoformat(match.group(1).replace("Z", "+00:00")).timestamp()
            events.append({**fields, "at": at, "node": node})  # the file names the node with its group
    return sorted(events, key=lambda e: e["at"])


def hand_overs(run_dir: Path) -> list[dict[str, Any]]:
    ops = read_history(run_dir / "history.jsonl")
    events = _events(run_dir)
    receipts = sorted(op.time for op in ops if op.f == "send" and op.type == OK)
    unknown = [op.time for op in ops if op.f == "send" and op.type == INFO]
    rows = []
    for fault in ops:
        if not (fault.process == NEMESIS and fault.type == INVOKE and fault.f in FAULTS):
            continue
        if not isinstance(fault.value, dict) or fault.value.get("target") != "leader":
            continue
        old = fault.value["nodes"][0].replace("/", "-")
        t0 = fault.time
        led = [e for e in events if e["event"] == "raft.leader_changed" and e.get("role") == "leader" and e["at"] <= t0]
        if not led or led[-1]["node"] != old:
            continue  # the leader had changed before the fault struck: not a hand-over of ours
        term = int(led[-1]["term"])
        down = next((e["at"] for e in events if e["event"] == "raft.leader_changed" and e["node"] == old
                     and e["at"] > t0 and e.get("role") != "leader"), None)
        new = next((e for e in events if e["event"] == "raft.leader_changed" and e.get("role") == "leader"
                    and e["at"] > t0 and int(e["term"]) > term), None)
        window = [t for t in receipts if t0 - 1 <= t <= t0 + 6]
        errors = [e for e in events if e["event"] == "client.error" and e["node"] == old and t0 <= e["at"] <= t0 + 6
                  and "not the leader" in e.get("message", "")]
        farewells = [e for e in errors if "the node goes" in e.get("detail", "")]
        resumed = sum(1 for error in farewells if any(
            e["event"] == "client.resumed" and e.get("by") == "client" and e.get("session") == error.get("session")
            and error["at"] <= e["at"] <= error["at"] + 2 for e in events))
        gap = max((b - a for a, b in zip(window, window[1:], strict=False)), default=None)
        rows.append({
            "run": run_dir.name, "fault": fault.f, "old": old, "new": new["node"] if new else None,
            "elections": int(new["term"]) - term if new else None,
            "leaderless_ms": round(max(0.0, new["at"] - down) * 1000, 1) if new and down else None,
            "receipt_gap_ms": round(gap * 1000, 1) if gap is not None else None,
            "not_the_leader": len(errors),
            "farewells": len(farewells),
            "resumed": resumed,
            "handed_over": sum(1 for e in events if e["event"] == "client.handed_over" and e["node"] == old
                               and t0 <= e["at"] <= t0 + 6),
            "unknown": sum(1 for t in unknown if t0 <= t <= t0 + 6),
        })
        rows[-1]["ended"] = len(farewells) - resumed
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    rows = [row for run_dir in options.runs for row in hand_overs(run_dir)]
    if options.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'run':<48} {'fault':<10} {'old':<6} {'new':<6} {'elections':>9} {'leaderless ms':>13} "
          f"{'receipt gap ms':>14} {'not-the-leader':>14} {'farewells':>9} {'resumed':>7} {'ended':>5} "
          f"{'handed over':>11} {'unknown':>7}")
    for row in rows:
        print(f"{row['run'][:48]:<48} {row['fault']:<10} {row['old']:<6} {row['new'] or '-':<6} "
              f"{row['elections'] if row['elections'] is not None else '-':>9} {row['leaderless_ms'] or 0:>13} "
              f"{row['receipt_gap_ms'] or '-':>14} {row['not_the_leader']:>14} {row['farewells']:>9} "
              f"{row['resumed']:>7} {row['ended']:>5} {row['handed_over']:>11} {row['unknown']:>7}")
    gaps = [row["receipt_gap_ms"] for row in rows if row["receipt_gap_ms"] is not None]
    if rows:
        print(f"\n{len(rows)} hand-overs; one election in {sum(1 for r in rows if r['elections'] == 1)}; "
              f"leaderless max {max((r['leaderless_ms'] or 0) for r in rows)} ms; receipt gap median "
              f"{statistics.median(gaps) if gaps else '-'} ms, max {max(gaps) if gaps else '-'} ms; "
              f"not-the-leader ERRORs {sum(r['not_the_leader'] for r in rows)}, "
              f"farewells {sum(r['farewells'] for r in rows)} "
              f"of which resumed by their client {sum(r['resumed'] for r in rows)}, sessions ended "
              f"{sum(r['ended'] for r in rows)}; sessions handed over "
              f"{sum(r['handed_over'] for r in rows)}; unknown SENDs {sum(r['unknown'] for r in rows)}")


if __name__ == "__main__":
    main()
