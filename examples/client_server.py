"""Client-server: the application connects to a raftmq group running elsewhere.

    raftmq up                                   # a group of three on this machine; prints its URL
    python examples/client_server.py "failover:(stomp://127.0.0.1:61613,stomp://127.0.0.1:61623,stomp://127.0.0.1:61633)"

The failover URL names every member: the client finds the leader, and when the leader goes it
carries on with the next one (the SEND whose receipt it was waiting for is sent again, once).
"""

from __future__ import annotations

import sys

from raftmq.client.sync import Client


def main() -> None:
    url = sys.argv[1]
    with Client.connect(url) as client:
        replies = client.subscribe("/queue/example.replies")
        client.send("/queue/example.replies", "hello from a client")  # the group's majority has it
        message = replies.receive(timeout=10)
        assert message is not None
        print("received", message.body.decode(), "from", client.address)


if __name__ == "__main__":
    main()
