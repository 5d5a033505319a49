"""In-VM (`vm://NAME`): raftmq's clients reach an `EmbeddedBroker(name=...)` of their own
process without a socket (raftmq.vm), with a socket's semantics: receipts, acknowledgements and
redelivery, transactions, a durable broker's messages across a restart, a group's fail-over,
the asyncio client from another loop, and clear errors for what cannot work."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from raftmq.client.failover import connect_failover
from raftmq.client.sync import Client
from raftmq.embedded import EmbeddedBroker
from raftmq.errors import EmbeddedBrokerError, InvalidFailoverUrl, NoVmBroker

pytestmark = pytest.mark.integration

TIMEOUT = 10.0


def bodies(messages: list[Any]) -> list[bytes]:
    return [message.body for message in messages]


def test_send_receive_ack_and_redelivery_without_a_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    with EmbeddedBroker(name="vm-basic") as broker:
        assert broker.url == "vm://vm-basic"
        # Any socket the clients opened would be a TCP one: there must be none.
        opened: list[object] = []
        real_create_connection = asyncio.BaseEventLoop.create_connection

        async def watching(self: asyncio.BaseEventLoop, *args: Any, **kwargs: Any) -> Any:
            opened.append(args)
            return await real_create_connection(self, *args, **kwargs)

        monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", watching)
        with Client.connect("vm://vm-basic") as producer, Client.connect("vm://vm-basic") as consumer:
            receipt = producer.send("/queue/vm.a", "one")
            assert receipt is not None and receipt.command == "RECEIPT"
            producer.send("/queue/vm.a", "two")
            subscription = consumer.subscribe("/queue/vm.a", ack="client-individual")
            first = subscription.receive(TIMEOUT)
            second = subscription.receive(TIMEOUT)
            assert first is not None and second is not None
            assert (first.body, second.body) == (b"one", b"two")
            subscription.ack(first, receipt=True)
            subscription.nack(second, receipt=True)  # comes back
            again = subscription.receive(TIMEOUT)
            assert again is not None and again.body == b"two" and again.get("redelivered") == "true"
            subscription.ack(again, receipt=True)
        assert opened == []


def test_the_management_api_lists_in_vm_connections(tmp_path: Path) -> None:
    with EmbeddedBroker(name="vm-listed", data_dir=tmp_path) as broker, Client.connect("vm://vm-listed"):
        with urllib.request.urlopen(f"http://{broker.admin_addresses[0]}/api/connections", timeout=5) as answer:
            listed = json.loads(answer.read())
        rows = listed["connections"] if isinstance(listed, dict) else listed
        clients = [row for row in rows if row["kind"] == "client"]
        assert [(row["transport"], row["peer"]) for row in clients] == [("vm", "vm:vm-listed-client")]


def test_no_heart_beats_in_vm() -> None:
    with EmbeddedBroker(name="vm-quiet") as broker:
        host, port = broker.addresses[0]
        with Client.connect("vm://vm-quiet") as quiet, Client.connect(f"stomp://{host}:{port}") as tcp:
            agreed = quiet.failover._client._agreed_heartbeat  # type: ignore[union-attr]
            assert (agreed.send_ms, agreed.receive_ms) == (0, 0)
            agreed = tcp.failover._client._agreed_heartbeat  # type: ignore[union-attr]
            assert agreed.send_ms > 0 and agreed.receive_ms > 0  # what the TCP client offers


def test_transactions_commit_and_abort() -> None:
    with EmbeddedBroker(name="vm-tx") as broker, broker.client() as consumer:
        with Client.connect("vm://vm-tx") as producer:
            producer.begin("t1")
            producer.send("/queue/vm.tx", "kept", transaction="t1")
            producer.begin("t2")
            producer.send("/queue/vm.tx", "dropped", transaction="t2")
            producer.abort("t2")
            subscription = consumer.subscribe("/queue/vm.tx")
            assert subscription.receive(0.5) is None  # not before the commit
            producer.commit("t1")
            message = subscription.receive(TIMEOUT)
            assert message is not None and message.body == b"kept"
            assert subscription.receive(0.5) is None


def test_a_durable_broker_keeps_what_it_receipted_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "svc"
    with EmbeddedBroker(name="vm-durable", data_dir=data) as broker:
        with Client.connect(broker.url) as client:
            for number in range(50):
                client.send("/queue/vm.kept", f"m{number}")
    with EmbeddedBroker(name="vm-durable", data_dir=data):
        with Client.connect("vm://vm-durable") as client:
            subscription = client.subscribe("/queue/vm.kept")
            got = [subscription.receive(TIMEOUT) for _ in range(50)]
            assert bodies(got) == [f"m{n}".encode() for n in range(50)]


def test_a_groups_in_vm_clients_follow_the_leader() -> None:
    with EmbeddedBroker(nodes=3, name="vm-group") as broker:
        with Client.connect("vm://vm-group") as client:
            client.send("/queue/vm.group", "before")
            leader = broker.wait_for_leader()
            broker.stop_node(leader)
            client.send("/queue/vm.group", "after", timeout=30)  # reconnected through vm://, to the next leader
            subscription = client.subscribe("/queue/vm.group")
            got = [subscription.receive(TIMEOUT) for _ in range(2)]
            assert bodies(got) == [b"before", b"after"]
            assert broker.wait_for_leader() != leader


def test_the_asyncio_client_on_another_loop() -> None:
    with EmbeddedBroker(name="vm-async"):
        async def scenario() -> bytes:
            client = await connect_failover("vm://vm-async")
            try:
                subscription = client.subscribe("/topic/vm.async")
                await asyncio.sleep(0.2)
                await client.send("/topic/vm.async", b"hello", receipt=True)
                delivery = await asyncio.wait_for(subscription.get(), TIMEOUT)
                return bytes(delivery.body)
            finally:
                await client.close()

        assert asyncio.run(scenario()) == b"hello"


def test_what_cannot_work_says_so() -> None:
    started = time.monotonic()
    with pytest.raises(NoVmBroker, match=r"no in-VM broker named 'nobody' in this process"):
        Client.connect("vm://nobody")
    with EmbeddedBroker(name="vm-named"):
        with pytest.raises(NoVmBroker, match=r"in-VM brokers running: .*vm-named.*EmbeddedBroker\(name='nobody'\)"):
            Client.connect("failover:(vm://nobody)?maxReconnectAttempts=3")

        async def asyncio_client() -> None:
            await connect_failover("vm://nobody")

        with pytest.raises(NoVmBroker):
            asyncio.run(asyncio_client())
        with pytest.raises(EmbeddedBrokerError, match="already runs"):
            EmbeddedBroker(name="vm-named").start()
    assert time.monotonic() - started < 10  # at once, not after a connect timeout
    with pytest.raises(InvalidFailoverUrl, match="mixes in-VM"):
        Client.connect("failover:(vm://a,stomp://127.0.0.1:61613)")
    with pytest.raises(InvalidFailoverUrl, match="letters, digits"):
        Client.connect("vm://bad/name")


def test_a_stopped_broker_ends_its_in_vm_clients_and_frees_its_name() -> None:
    broker = EmbeddedBroker(name="vm-stops").start()
    client = Client.connect("vm://vm-stops")
    client.send("/queue/vm.stop", "x")
    broker.stop()
    with pytest.raises(Exception):  # noqa: B017 - a ClientError or a TimeoutError: the broker is gone
        client.send("/queue/vm.stop", "y", timeout=2)
    client.close()  # quiet
    with pytest.raises(NoVmBroker):
        Client.connect("vm://vm-stops")
    with EmbeddedBroker(name="vm-stops"):  # the name is free again
        with Client.connect("vm://vm-stops") as again:
            again.send("/queue/vm.stop", "z")


def test_the_broker_still_listens_on_its_socket_too() -> None:
    with EmbeddedBroker(name="vm-both") as broker:
        host, port = broker.addresses[0]
        with socket.create_connection((host, port), timeout=5):
            pass
        with Client.connect(f"stomp://{host}:{port}") as tcp, Client.connect("vm://vm-both") as local:
            subscription = local.subscribe("/queue/vm.both")
            tcp.send("/queue/vm.both", "over tcp")
            message = subscription.receive(TIMEOUT)
            assert message is not None and message.body == b"over tcp"


def test_a_receive_that_times_out_loses_nothing() -> None:
    """A timed-out `receive` leaves its get waiting on the loop; what that get then takes is
    the next call's, over TCP as in-VM (the sync client keeps one get under way)."""
    with EmbeddedBroker(name="vm-patience") as broker:
        host, port = broker.addresses[0]
        for url in ("vm://vm-patience", f"stomp://{host}:{port}"):
            with Client.connect(url) as client:
                destination = f"/queue/patience.{url.partition(':')[0]}"
                subscription = client.subscribe(destination, ack="client-individual")
                got: list[str] = []

                def take(timeout: float) -> bool:
                    message = subscription.receive(timeout)
                    if message is not None:
                        got.append(message.body.decode())
                        subscription.ack(message)
                    return message is not None

                for number in range(200):
                    take(0.0005)  # mostly times out, its get left waiting
                    client.send(destination, f"m{number}")
                    if number % 2:
                        take(0.0005)
                    else:  # by now every message sent so far came, once, in order
                        while len(got) <= number and take(2):
                            pass
                        assert got == [f"m{n}" for n in range(number + 1)], url
                while len(got) < 200 and take(2):
                    pass
                assert got == [f"m{n}" for n in range(200)], url


def test_a_get_left_waiting_ends_quietly_with_its_subscription(caplog: pytest.LogCaptureFixture) -> None:
    with EmbeddedBroker(name="vm-quietly") as broker:
        host, port = broker.addresses[0]
        for url in ("vm://vm-quietly", f"stomp://{host}:{port}"):
            with Client.connect(url) as client:
                subscription = client.subscribe("/queue/quietly")
                assert subscription.receive(0.01) is None  # its get stays under way
            gc.collect()  # the ended get's task, had nobody looked at its exception, says so now
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()], caplog.text
