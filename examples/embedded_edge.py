"""An embedded broker in the network: the service keeps its own durable broker, linked to a hub.

    python examples/embedded_edge.py DATA_DIR "static:(stomp://HUB1:61613,stomp://HUB2:61613)?duplex=true"

The hub is a raftmq group whose topology accepts edges (docs/topologies.md). The service sends
three orders to the hub's /queue/orders and prints the replies the hub's application sends to
/queue/replies.shop. Each send returns with the receipt of the service's own broker, so it goes
on while the hub or the network is down; what waited moves to the hub, once, when it is back.
"""

from __future__ import annotations

import sys

from raftmq.client.sync import Client
from raftmq.embedded import EmbeddedBroker


def main() -> None:
    data_dir, hub = sys.argv[1], sys.argv[2]
    with EmbeddedBroker(name="shop", data_dir=data_dir, network=[hub]):
        with Client.connect("vm://shop") as client:
            replies = client.subscribe("/queue/replies.shop")
            for number in range(3):
                client.send("/queue/orders", f"order {number}")  # on the service's own disk
            for _ in range(3):
                reply = replies.receive(timeout=60)
                if reply is None:
                    sys.exit("no reply from the hub within 60 s (is it up, and does it accept edges?)")
                print("received", reply.body.decode())


if __name__ == "__main__":
    main()
