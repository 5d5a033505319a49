"""What clients see of a leadership hand-over under load: the default group of three under
`raftmq up --detach` in a directory of its own, one producer (receipted SENDs at a steady rate)
and one consumer (acking each message) on its failover URL (`--pairs 4`: four of each, 4P×4C),
and N hand-overs asked of the leader the way `raftmq hand-over` asks (a signed POST
/leadership), one every few seconds.

Per hand-over: how long from the request until another member answers /status as leader
(`hand-over ms`: polled every 5 ms, so up to ~5 ms late), the longest stretch without a receipt
and without a delivered message around it (the worst client's), and the term it took (one more
than before: one election). At the end: messages lost (receipted, never delivered: must be 0), redeliveries, and
the client errors (SENDs whose outcome the client could not know); and, from the nodes' logs, the
`ERROR not the leader` frames the nodes wrote to clients, the sessions handed to a successor and
adopted by it, and the relays that then moved to the new leader, their sessions resumed there
(docs/replication.md, "The session moves with the leadership").

    .venv/bin/python -m bench.hand_over --count 20 --rate 200 --dir /tmp/hand-over

The default preset's ports (61613-61615, 62613-62615, 8161-8163) must be free. Every process is
stopped at the end (raftmq down).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.rolling_restart import Client, longest_gap, raftmq, stop_clients
from cluster.group_file import load_group_config
from raftmq.config import split_address
from raftmq.ops.launcher import read_state
from raftmq.ops.status_view import fetch_status
from raftmq.replication.group_secret import group_secret
from raftmq.server.admin.http import post_hand_over

POLL_SECONDS = 0.005
# What the nodes log of a hand-over's clients (structlog key=value lines in <dir>/.raftmq/g1/*/node.log).
SERVER_EVENTS = {
    "errors_not_the_leader": ("client.error", "message='not the leader'"),
    "sessions_handed_over": ("client.handed_over", ""),
    "sessions_adopted": ("client.adopted", ""),
    "hand_overs_failed": ("client.hand_over_failed", ""),
    "not_handed_over": ("client.not_handed_over", ""),
    "relays_moved": ("client.relay_moved", ""),
    "sessions_resumed": ("client.resumed", ""),
}


# A follower's answer to a new connection of a client that asks for redirects (raftmq's own, at
# its start): the redirect it asked for, not a hand-over's.
REDIRECT_DETAIL = "does not serve clients now"


def server_events(directory: Path) -> dict[str, int]:
    counts = dict.fromkeys(SERVER_EVENTS, 0)
    for path in sorted(directory.glob(".raftmq/*/*/node.log")):
        for line in path.read_text(errors="replace").splitlines():
            for name, (event, also) in SERVER_EVENTS.items():
                if f"event='{event}'" in line and also in line and REDIRECT_DETAIL not in line:
                    counts[name] += 1
    return counts


def leader_of(admins: list[str]) -> tuple[str, int] | None:
    for admin in admins:
        status = fetch_status(admin, 0.5)
        if status and status.get("role") == "leader":
            return admin, int(status.get("term") or 0)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "hand-over-bench")
    parser.add_argument("--count", type=int, default=20, help="hand-overs")
    parser.add_argument("--rate", type=float, default=200.0, help="SENDs per second per producer")
    parser.add_argument("--pairs", type=int, default=1,
                        help="producer/consumer pairs, each on a queue of its own (4: 4P x 4C)")
    parser.add_argument("--every", type=float, default=3.0, help="seconds between hand-overs")
    parser.add_argument("--relayed", action="store_true",
                        help="clients ask for no redirect: they stay on the first member (n1), "
                             "relayed when it does not lead")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    options.dir.mkdir(parents=True, exist_ok=True)
    up = raftmq("up", "--detach", cwd=options.dir)
    if up.returncode != 0:
        raise SystemExit(f"raftmq up failed: {up.stdout}{up.stderr}")
    rounds: list[dict[str, Any]] = []
    try:
        state = read_state(options.dir / ".raftmq")
        assert state is not None
        admins = [node.admin for node in state.nodes]
        group_file = options.dir / ".raftmq" / "g1.toml"
        group = load_group_config(group_file) if group_file.exists() else None
        data_dir = options.dir / (group.data_dir if group else ".raftmq/g1")
        secret = group_secret(None, data_dir)
        url = "failover:(" + ",".join(f"stomp://{node.client}" for node in state.nodes) + ")?randomize=false"
        clients = [Client(f"g1p{k}", url, options.rate, options.relayed) for k in range(options.pairs)]
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        futures = [asyncio.run_coroutine_threadsafe(client.run(), loop) for client in clients]
        time.sleep(options.every)
        for _ in range(options.count):
            found = leader_of(admins)
            if found is None:
                time.sleep(0.5)
                continue
            admin, term = found
            host, port = split_address(admin)
            began = time.monotonic()
            code, answer = post_hand_over(host, port, secret)
            asked = time.monotonic()
            new = None
            while time.monotonic() - began < 10:
                new = leader_of([a for a in admins if a != admin])
                if new is not None:
                    break
                time.sleep(POLL_SECONDS)
            seen = time.monotonic()
            time.sleep(options.every)
            window = (began - 0.5, seen + 1.0)
            rounds.append({"code": code, "handed_over": answer.get("handed_over"),
                           "request_ms": round((asked - began) * 1000, 1),
                           "hand_over_ms": round((seen - began) * 1000, 1), "term_before": term,
                           "term_after": None if new is None else new[1],
                           "receipt_gap_ms": max(round(longest_gap(list(c.receipted.values()), *window) * 1000, 1)
                                                 for c in clients),
                           "delivery_gap_ms": max(round(longest_gap([t for _, t in c.received], *window) * 1000, 1)
                                                  for c in clients)})
        stop_clients(clients, futures, loop)
    finally:
        raftmq("down", cwd=options.dir)
    received = [b for c in clients for b, _ in c.received]
    receipted = {b for c in clients for b in c.receipted}
    summary = {
        "hand_overs": len(rounds), "rate": options.rate, "pairs": options.pairs, "relayed": options.relayed,
        "one_election_each": sum(1 for r in rounds if r["term_after"] == r["term_before"] + 1),
        "hand_over_ms_p50": statistics.median(r["hand_over_ms"] for r in rounds),
        "hand_over_ms_max": max(r["hand_over_ms"] for r in rounds),
        "receipt_gap_ms_p50": statistics.median(r["receipt_gap_ms"] for r in rounds),
        "receipt_gap_ms_max": max(r["receipt_gap_ms"] for r in rounds),
        "delivery_gap_ms_max": max(r["delivery_gap_ms"] for r in rounds),
        "sent": len(receipted), "lost": len(receipted - set(received)),
        "redelivered": len(received) - len(set(received)),
        "flagged_redelivered": sum(len(c.redelivered) for c in clients),
        "client_errors": sum(len(c.errors) for c in clients), **server_events(options.dir),
        "rounds": rounds,
    }
    if options.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{'#':>3} {'hand-over ms':>12} {'receipt gap ms':>14} {'delivery gap ms':>15} {'term':>9}")
    for k, r in enumerate(rounds, 1):
        print(f"{k:>3} {r['hand_over_ms']:>12} {r['receipt_gap_ms']:>14} {r['delivery_gap_ms']:>15} "
              f"{r['term_before']:>4}->{r['term_after']}")
    print({k: v for k, v in summary.items() if k != "rounds"})


if __name__ == "__main__":
    main()
