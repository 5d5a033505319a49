"""In-VM: a broker inside this process, reached without a socket (ActiveMQ's `vm://`).

    python examples/in_vm.py [DATA_DIR]

With DATA_DIR the broker is durable (each receipt means the message is on disk there, and a
second run finds what the first left); without, it keeps everything in memory.
"""

from __future__ import annotations

import sys

from raftmq.client.sync import Client
from raftmq.embedded import EmbeddedBroker


def main() -> None:
    data_dir = sys.argv[1] if len(sys.argv) > 1 else None
    with EmbeddedBroker(name="svc", data_dir=data_dir):
        with Client.connect("vm://svc") as producer, Client.connect("vm://svc") as consumer:
            orders = consumer.subscribe("/queue/orders", ack="client-individual")
            for number in range(3):
                producer.send("/queue/orders", f"order {number}")  # returns with the RECEIPT
            for _ in range(3):
                message = orders.receive(timeout=5)
                assert message is not None
                print("received", message.body.decode())
                orders.ack(message)
            producer.begin("tx")  # transactions work as over a socket
            producer.send("/queue/orders", "in a transaction", transaction="tx")
            producer.commit("tx")
            message = orders.receive(timeout=5)
            assert message is not None
            print("received", message.body.decode())
            orders.ack(message)


if __name__ == "__main__":
    main()
