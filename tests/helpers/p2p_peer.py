"""One service process of the peer-to-peer test (tests/embedded/test_peer_to_peer.py): an
embedded durable broker that finds the others by signed multicast, and a consumer of its own
inbox through vm://. Driven by lines on stdin, answering with JSON lines on stdout:

    python -m tests.helpers.p2p_peer NAME DATA_DIR MULTICAST_URI PASSWORD
    -> {"ready": NAME}
    <- links                    -> {"links": {"b": "connected", ...}}
    <- send DEST COUNT TAG      -> {"sent": TAG, "count": COUNT}   (each receipted by this broker)
    <- received                 -> {"received": [body, ...]}       (what the inbox consumer got)
    <- stop                     -> the broker stops, the process exits 0
"""

from __future__ import annotations

import json
import sys
import threading

from raftmq.client.sync import Client
from raftmq.embedded import EmbeddedBroker


def say(value: object) -> None:
    print(json.dumps(value), flush=True)


def main() -> int:
    name, data_dir, uri, password = sys.argv[1:5]
    received: list[str] = []
    lock = threading.Lock()
    with EmbeddedBroker(name=name, data_dir=data_dir, network=[uri], cluster_password=password) as broker:
        consumer = Client.connect(f"vm://{name}")
        subscription = consumer.subscribe(f"/queue/inbox.{name}", ack="client-individual")
        stop = threading.Event()

        def consume() -> None:
            while not stop.is_set():
                try:
                    message = subscription.receive(0.2)
                except Exception:  # the broker stopped under it
                    return
                if message is not None:
                    with lock:
                        received.append(message.body.decode())
                    subscription.ack(message)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        producer = Client.connect(f"vm://{name}")
        say({"ready": name})
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "links":
                links = broker.status().get("cluster", {}).get("links", [])
                say({"links": {link["to"]: link["state"] for link in links}})
            elif words[0] == "send":
                destination, count, tag = words[1], int(words[2]), words[3]
                for number in range(count):
                    producer.send(destination, f"{tag}-{number}")
                say({"sent": tag, "count": count})
            elif words[0] == "received":
                with lock:
                    say({"received": list(received)})
            elif words[0] == "stop":
                break
        stop.set()
        reader.join(5)
        producer.close()
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
