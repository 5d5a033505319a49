"""Peer to peer: services with embedded brokers that find each other by multicast, no server.

    python examples/peer_to_peer.py NAME DATA_DIR [PEER ...]

Run it in two or three terminals of one machine (names a, b, c; a data directory each): each
service starts its own durable broker, which announces itself on 239.255.2.3:6155 (loopback
only here: `interface=127.0.0.1`; on a real network leave it out) signed with the password in
RAFTMQ_CLUSTER_PASSWORD, finds the others, and sends each PEER a greeting, which the peer's own
consumer prints. Stop it with Ctrl-C; what was sent to a peer that is away waits for it.
"""

from __future__ import annotations

import os
import sys

from raftmq.client.sync import Client
from raftmq.embedded import EmbeddedBroker

NETWORK = "multicast://239.255.2.3:6155?group=example&interface=127.0.0.1"


def main() -> None:
    name, data_dir, peers = sys.argv[1], sys.argv[2], sys.argv[3:]
    password = os.environ.get("RAFTMQ_CLUSTER_PASSWORD", "change me")
    with EmbeddedBroker(name=name, data_dir=data_dir, network=[NETWORK], cluster_password=password) as broker:
        with Client.connect(f"vm://{name}") as client:
            inbox = client.subscribe(f"/queue/inbox.{name}")
            print(f"{name}: up; my STOMP port is {broker.addresses[0][1]}", flush=True)
            for peer in peers:
                client.send(f"/queue/inbox.{peer}", f"hello {peer}, from {name}")  # my broker's receipt
            try:
                while True:
                    message = inbox.receive(timeout=1)
                    if message is not None:
                        print(f"{name}: got {message.body.decode()!r}", flush=True)
            except KeyboardInterrupt:
                print(f"{name}: stopping", flush=True)


if __name__ == "__main__":
    main()
