"""The peer beside `bench/rolling_restart.py`: a rolling restart of RabbitMQ's three-node cluster
(the peers folder's, bench.peer_rabbitmq) under the same load, the same clients and the same
figures. One producer (SENDs with receipts) and one acking consumer on a quorum queue (a receipt
after a majority fsynced, raftmq's promise), on raftmq's failover client over the three nodes'
STOMP ports. Each node in turn has its RabbitMQ application stopped and started again
(`rabbitmqctl stop_app`, `start_app`: its listeners, connections and queue replicas go and come
back; the Erlang VM stays, so this is quicker than a restart of the process), then the next one
follows once the node answers STOMP again; `--settle` seconds of traffic before and after.

    RAFTMQ_PEERS_DIR=<peers folder> .venv/bin/python -m bench.peer_rolling_restart --rate 200

`broken` counts the times a client's connection broke and it reconnected (RabbitMQ has no
session to resume: the consumer subscribes again and its unacknowledged messages are
redelivered). The cluster is stopped at the end unless it was running before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import threading
import time

from bench.peer_rabbitmq import STOMP_PORT, RabbitCluster, missing_reason, peers_dir
from bench.rolling_restart import Client, print_rows, stop_clients, summarize

CLUSTER_NODES = 3


def restart_node(index: int) -> float:
    """Stop node `index`'s RabbitMQ application and start it again; seconds until it answers STOMP."""
    peers = peers_dir()
    assert peers is not None
    began = time.monotonic()
    for command in ("stop_app", "start_app"):
        subprocess.run(["bash", str(peers / "rmq_cli.sh"), "cluster", str(index), "rabbitmqctl", command],
                       capture_output=True, text=True, timeout=300, check=True)
    port = STOMP_PORT + index - 1
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            break
        except OSError:
            time.sleep(0.1)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0, help="SENDs per second per producer")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds of traffic before and after the restart")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    reason = missing_reason()
    if reason:
        raise SystemExit(reason)
    ports = [STOMP_PORT + i for i in range(CLUSTER_NODES)]
    url = "failover:(" + ",".join(f"stomp://127.0.0.1:{port}" for port in ports) + ")?randomize=false"
    client = Client("rabbit", url, options.rate, connect={"vhost": "/", "login": "guest", "passcode": "guest"},
                    queue_headers=[("x-queue-type", "quorum")])
    with RabbitCluster() as cluster:
        cluster.start()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        futures = [asyncio.run_coroutine_threadsafe(client.run(), loop)]
        time.sleep(options.settle)
        began = time.monotonic()
        took = [round(restart_node(index), 1) for index in range(1, CLUSTER_NODES + 1)]
        ended = time.monotonic()
        time.sleep(options.settle)
        stop_clients([client], futures, loop)
    summary = summarize([client], began, ended, {"broker": "RabbitMQ 3-node cluster, quorum queue",
                                                 "rate_per_producer": options.rate, "node_restarts_s": took})
    if options.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"rolling restart of RabbitMQ's 3-node cluster: {summary['restart_s']} s (per node: {took} s)")
    print_rows(summary)


if __name__ == "__main__":
    main()
