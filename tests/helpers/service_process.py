"""One service process of the embedded-broker tests (tests/embedded/test_peer_to_peer.py,
tests/embedded/test_edge_processes.py): an embedded durable broker in the network its URI names
(signed multicast, or a hub), and a consumer of its own inbox through vm://. Driven by lines on
stdin, answering with JSON lines on stdout:

    python -m tests.helpers.service_process NAME DATA_DIR NETWORK_URI PASSWORD
    -> {"ready": NAME}
    <- links                    -> {"links": {"b": "connected", ...}}
    <- send DEST COUNT TAG      -> {"sent": TAG, "count": COUNT}   (each receipted by this broker)
    <- log DEST FROM TO TAG     -> {"logged": TAG, "count": N}     (TAG-FROM .. TAG-(TO-1), each
                                   with itself as duplicate-detection id, appended to
                                   DATA_DIR.receipted once its receipt came)
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
            elif words[0] == "log":
                destination, first, end, tag = words[1], int(words[2]), int(words[3]), words[4]
                with open(f"{data_dir}.receipted", "a", encoding="utf-8") as receipted:
                    for number in range(first, end):  # a duplicate-detection id: sent again after a crash, stored once
                        producer.send(destination, f"{tag}-{number}", {"_AMQ_DUPL_ID": f"{tag}-{number}"})
                        receipted.write(f"{tag}-{number}\n")
                        receipted.flush()  # in the kernel's cache: a kill -9 keeps it
                say({"logged": tag, "count": end - first})
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
