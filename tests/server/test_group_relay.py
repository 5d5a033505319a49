"""Any node serves any client: a follower relays a plain STOMP client's session to the leader
(the default), redirects clients that ask for it (ours), and redirects everyone in
`follower_clients = "redirect"` mode. Real 3-member groups, stomp.py as the ordinary client."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import stomp

from raftmq.client import connect, connect_failover
from raftmq.client.admin import AdminAccess
from tests.helpers.group_harness import Group, connect_leader, drain_queue
from tests.helpers.stomp_raw import WAIT, Listener, RawClient, frame_bytes, unique
from tests.helpers.tls_certs import CertFiles, make_certificates

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def follower_of(group: Group, leader: str) -> str:
    return next(node_id for node_id in group.members if node_id != leader)


def hosts_follower_first(group: Group, leader: str, follower: str) -> list[tuple[str, int]]:
    order = [follower, leader] + [i for i in group.members if i not in (follower, leader)]
    return [("127.0.0.1", group.members[i].client_port) for i in order]


def status(group: Group, node_id: str) -> dict:
    answer = group.status(node_id)
    assert answer is not None, f"{node_id}: no /status"
    return answer


def metric(group: Group, node_id: str, name: str) -> float:
    url = f"http://127.0.0.1:{group.members[node_id].admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    assert len(values) == 1, f"{name}: {values}"
    return values[0]


def wait_for(predicate, what: str, timeout: float = 10.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what}")


def stomppy(hosts: list[tuple[str, int]]) -> tuple[stomp.Connection12, Listener]:
    conn = stomp.Connection12(hosts, timeout=WAIT, reconnect_attempts_max=1)
    listener = Listener()
    conn.set_listener("t", listener)
    conn.connect(wait=True)
    assert listener.connected.wait(WAIT)
    return conn, listener


def test_stompy_given_all_hosts_works_through_a_follower(group: Group) -> None:
    leader = group.leader()
    follower = follower_of(group, leader)
    destination = unique()
    conn, listener = stomppy(hosts_follower_first(group, leader, follower))
    try:
        # It went to the first host, a follower, which pipes it to the leader.
        assert status(group, follower)["relayed_sessions"] == 1
        assert status(group, leader)["broker"]["sessions"] == 1
        assert metric(group, follower, "raftmq_relayed_connections") == 1
        for i in range(20):
            conn.send(destination, f"m{i}", receipt=f"r{i}", headers={"persistent": "true"})
            listener.receipt(f"r{i}")
        conn.subscribe(destination, id="s", ack="client-individual")
        got = [listener.message() for _ in range(20)]
        assert [frame.body for frame in got] == [f"m{i}" for i in range(20)]
        for frame in got:
            conn.ack(frame.headers["ack"], receipt=f"a-{frame.body}")
            listener.receipt(f"a-{frame.body}")
        assert listener.errors.empty()
    finally:
        conn.disconnect()
    wait_for(lambda: status(group, follower)["relayed_sessions"] == 0 and status(group, follower)["sessions"] == 0,
             "the follower forgets the relayed session")
    assert status(group, follower)["relayed_total"] == 1
    assert metric(group, follower, "raftmq_relayed_sessions_total") == 1
    assert status(group, leader)["broker"]["destinations"][destination]["depth"] == 0


def test_consumer_on_a_follower_gets_what_a_producer_on_the_leader_sends(group: Group) -> None:
    leader = group.leader()
    follower = follower_of(group, leader)
    destination = unique()
    consumer, listener = stomppy([("127.0.0.1", group.members[follower].client_port)])
    try:
        consumer.subscribe(destination, id="s", ack="client-individual", headers={"receipt": "sub"})
        listener.receipt("sub")

        async def produce() -> None:
            producer = await connect("127.0.0.1", group.members[leader].client_port)
            try:
                for i in range(50):
                    await producer.send(destination, f"p{i}".encode(), receipt=True)
            finally:
                await producer.disconnect()

        asyncio.run(produce())
        got = [listener.message() for _ in range(50)]
        assert [frame.body for frame in got] == [f"p{i}" for i in range(50)]
        for frame in got:
            consumer.ack(frame.headers["ack"])
        consumer.send(destination, "back", receipt="back")  # and the other way round
        listener.receipt("back")
        assert listener.message().body == "back"
    finally:
        consumer.disconnect()
    relayed_websocket(group, follower)


def relayed_websocket(group: Group, follower: str) -> None:
    """A WebSocket client of the follower (stomp.py's WSConnection) is relayed the same way."""
    destination = unique()
    conn = stomp.WSConnection([("127.0.0.1", group.members[follower].client_port)], ws_path="/ws", timeout=WAIT,
                              reconnect_attempts_max=1)
    listener = Listener()
    conn.set_listener("test", listener)
    conn.connect(wait=True)
    try:
        assert listener.connected.wait(WAIT)
        conn.subscribe(destination, id="s", ack="client-individual")
        for i in range(20):
            conn.send(destination, f"w{i}", receipt=f"r{i}")
        for i in range(20):
            listener.receipt(f"r{i}")
        assert [listener.message().body for _ in range(20)] == [f"w{i}" for i in range(20)]
        assert status(group, follower)["role"] != "leader"  # served through the follower all along
    finally:
        conn.disconnect()


def test_leader_kill_closes_relayed_connections_and_loses_nothing_receipted(group: Group) -> None:
    leader = group.leader()
    follower = follower_of(group, leader)
    destination = unique()
    conn, listener = stomppy([("127.0.0.1", group.members[follower].client_port)])
    receipted = []
    try:
        for i in range(30):
            conn.send(destination, f"k{i}", receipt=f"k{i}", headers={"persistent": "true"})
            listener.receipt(f"k{i}")
            receipted.append(f"k{i}")
        group.kill(leader)
        # The follower's end of the relay is reset with the leader: the client is told at once.
        assert listener.disconnected.wait(WAIT), "the relayed connection outlived its leader"
    finally:
        try:
            conn.disconnect()
        except Exception:
            pass
    survivors = tuple(i for i in group.members if i != leader)
    group.leader(among=survivors, timeout=15)
    addresses = [("127.0.0.1", group.members[i].client_port) for i in survivors]
    delivered = asyncio.run(drain_queue(addresses, destination))
    assert sorted(body.decode() for _id, body, _headers in delivered) == sorted(receipted)


def test_a_client_asking_for_the_redirect_gets_it_in_relay_mode(group: Group) -> None:
    leader = group.leader()
    follower = follower_of(group, leader)
    client = RawClient(("127.0.0.1", group.members[follower].client_port))
    try:
        client.send(frame_bytes("CONNECT", {"accept-version": "1.2", "host": "x", "raftmq.redirect": "true"}))
        frames = client.read_until_closed()
    finally:
        client.close()
    assert [f.command for f in frames] == ["ERROR"]
    assert frames[0].headers["message"] == "not the leader"
    assert frames[0].headers["leader"] == group.members[leader].client
    assert status(group, follower)["relayed_total"] == 0


def test_failover_client_connects_to_the_leader_directly(group: Group) -> None:
    leader = group.leader()
    follower = follower_of(group, leader)
    hosts = hosts_follower_first(group, leader, follower)
    url = "failover:(" + ",".join(f"stomp://{h}:{p}" for h, p in hosts) + ")?randomize=false"

    async def scenario() -> str:
        client = await connect_failover(url)
        try:
            await client.send(unique(), b"x", receipt=True)
            assert client.address is not None
            return f"{client.address.host}:{client.address.port}"
        finally:
            await client.close()

    before = {i: status(group, i)["relayed_total"] for i in group.members}
    landed = asyncio.run(scenario())
    assert landed == group.members[leader].client  # redirected by the follower, not relayed
    assert {i: status(group, i)["relayed_total"] for i in group.members} == before


def run_bench(url: str, result_path: Path) -> dict:
    run = subprocess.run(
        [sys.executable, "-m", "raftmq", "bench", "--url", url, "-n", "300", "-p", "2", "-c", "2",
         "-s", "256", "--receipt-window", "10", "--timeout", "10", "--json", str(result_path), "-q"],
        capture_output=True, text=True, timeout=90,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(result_path.read_text())
    assert result["lost"] == 0 and result["errors"] == 0 and result["duplicated"] == 0, result
    assert result["received"] == 300, result
    return result


def test_bench_with_a_failover_url_starting_at_a_follower(group: Group, tmp_path: Path) -> None:
    leader = group.leader()
    follower = follower_of(group, leader)
    hosts = hosts_follower_first(group, leader, follower)
    url = "failover:(" + ",".join(f"stomp://{h}:{p}" for h, p in hosts) + ")?randomize=false"
    assert run_bench(url, tmp_path / "failover.json")["url"] == url
    # Its connections were redirected to the leader, not relayed by the follower.
    assert status(group, follower)["relayed_total"] == 0
    # A plain URL naming the follower works too: relayed (2 producers, 2 consumers).
    run_bench(f"stomp://{group.members[follower].client}", tmp_path / "plain.json")
    assert status(group, follower)["relayed_total"] == 4


def test_redirect_mode_refuses_naming_the_leader(tmp_path: Path) -> None:
    group = Group(tmp_path, server={"follower_clients": "redirect"})
    try:
        group.start()
        leader = group.leader()
        follower = follower_of(group, leader)
        conn = stomp.Connection12([("127.0.0.1", group.members[follower].client_port)], timeout=WAIT,
                                  reconnect_attempts_max=1)
        listener = Listener()
        conn.set_listener("t", listener)
        with pytest.raises(stomp.exception.ConnectFailedException):
            conn.connect(wait=True)
        error = listener.errors.get(timeout=WAIT)
        assert error.headers["message"] == "not the leader"
        assert error.headers["leader"] == group.members[leader].client
        assert status(group, follower)["relayed_total"] == 0

        async def through_the_redirect() -> str:  # our clients follow it
            client = await connect_leader(group.client_addresses())
            await client.disconnect()
            return "ok"

        assert asyncio.run(through_the_redirect()) == "ok"
    finally:
        group.close()


def test_connect_headers_reach_the_leader_unchanged(group: Group) -> None:
    """The follower replays CONNECT byte for byte: the leader sees the login and client-id."""
    leader = group.leader()
    follower = follower_of(group, leader)
    client = RawClient(("127.0.0.1", group.members[follower].client_port))
    try:
        client.send(frame_bytes("CONNECT", {"accept-version": "1.1,1.2", "host": "x", "client-id": "relay-me",
                                            "heart-beat": "0,0"})
                    + frame_bytes("SUBSCRIBE", {"destination": "/topic/relay-t", "id": "1", "receipt": "s"}))
        frames = [client.read_frame(), client.read_frame()]
    finally:
        client.close()
    assert [f.command for f in frames] == ["CONNECTED", "RECEIPT"], frames
    assert frames[0].headers["version"] == "1.2"
    assert frames[0].headers["session"].startswith(f"{leader}:")  # the leader's session
    assert frames[1].headers["receipt-id"] == "s"


def tls_table(files: CertFiles) -> str:
    return f'[tls]\ncert_file = "{files.cert}"\nkey_file = "{files.key}"\n'


def test_a_tls_group_relays_over_tls(tmp_path: Path) -> None:
    server, _client = make_certificates(tmp_path / "certs")
    group = Group(tmp_path)
    group.config_path.write_text(group.config_path.read_text() + tls_table(server))
    group.admin_access = AdminAccess(ca_file=str(server.ca))  # its admin ports speak HTTPS too
    try:
        group.start()
        leader = group.leader()
        follower = follower_of(group, leader)
        address = ("127.0.0.1", group.members[follower].client_port)
        conn = stomp.Connection12([address], timeout=WAIT, reconnect_attempts_max=1)
        conn.set_ssl(for_hosts=[address], ca_certs=str(server.ca))
        listener = Listener()
        conn.set_listener("t", listener)
        conn.connect(wait=True)
        try:
            assert listener.connected.wait(WAIT)
            assert status(group, follower)["relayed_sessions"] == 1
            destination = unique()
            conn.subscribe(destination, id="1", ack="auto", headers={"receipt": "s"})
            listener.receipt("s")
            conn.send(destination, "relayed over tls", receipt="m")
            listener.receipt("m")
            assert listener.message().body == "relayed over tls"
        finally:
            conn.disconnect()
    finally:
        group.close()


def test_a_follower_relays_only_to_a_leader_with_the_groups_certificate(tmp_path: Path) -> None:
    """n1 runs with another certificate than n2 and n3 (a misconfiguration, or someone else's
    server on the leader's address): a follower refuses to relay between them."""
    ours, _ = make_certificates(tmp_path / "ours")
    theirs, _ = make_certificates(tmp_path / "theirs", ca_name="another CA")
    group = Group(tmp_path)
    plain = group.config_path.read_text()
    group.config_path.write_text(plain + tls_table(ours))
    odd = tmp_path / "n1.toml"
    odd.write_text(plain + tls_table(theirs))
    both = tmp_path / "both-cas.pem"  # the test reads every member's /status over HTTPS
    both.write_bytes(Path(ours.ca).read_bytes() + Path(theirs.ca).read_bytes())
    group.admin_access = AdminAccess(ca_file=str(both))
    main = group.config_path
    try:
        group.config_path = odd
        group.start("n1", wait=False)
        group.config_path = main
        group.start("n2", "n3", wait=False)
        for node_id in group.members:
            group.wait_ready(node_id)
        leader = group.leader()
        # A follower whose certificate differs from the leader's.
        follower = "n1" if leader != "n1" else "n2"
        files = theirs if follower == "n1" else ours
        address = ("127.0.0.1", group.members[follower].client_port)
        conn = stomp.Connection12([address], timeout=WAIT, reconnect_attempts_max=1)
        conn.set_ssl(for_hosts=[address], ca_certs=str(files.ca))
        listener = Listener()
        conn.set_listener("t", listener)
        with pytest.raises(stomp.exception.ConnectFailedException):
            conn.connect(wait=True)
        error = listener.errors.get(timeout=WAIT)
        assert error.headers["message"] == "not the leader", error.headers
        assert error.headers["leader"] == group.members[leader].client
        assert "certificate" in error.body, error.body
        assert status(group, follower)["relayed_sessions"] == 0
    finally:
        group.config_path = main
        group.close()


def test_relays_to_a_paused_leader_close_once_a_new_leader_is_known(group: Group) -> None:
    """SIGSTOP leaves the old leader's sockets open: the follower closes the relays to it when
    it learns of the new leader, and the client can go on through any member."""
    leader = group.leader()
    follower = follower_of(group, leader)
    destination = unique()
    conn, listener = stomppy([("127.0.0.1", group.members[follower].client_port)])
    try:
        conn.send(destination, "before", receipt="before", headers={"persistent": "true"})
        listener.receipt("before")
        group.signal(leader, signal.SIGSTOP)
        survivors = tuple(i for i in group.members if i != leader)
        group.leader(among=survivors, timeout=15)
        assert listener.disconnected.wait(WAIT), "the relay to the paused leader stayed open"
    finally:
        group.signal(leader, signal.SIGCONT)
        try:
            conn.disconnect()
        except Exception:
            pass
    again, listener = stomppy([("127.0.0.1", group.members[follower].client_port)])
    try:
        again.subscribe(destination, id="s", ack="client-individual")
        message = listener.message()
        assert message.body == "before"
        again.ack(message.headers["ack"], receipt="ack")
        listener.receipt("ack")
    finally:
        again.disconnect()


@pytest.mark.parametrize("when", ["at-once", "once-connected"])
def test_a_client_that_half_closes_still_gets_its_receipts(group: Group, when: str) -> None:
    """CONNECT, SEND with a receipt, then shutdown(SHUT_WR), at once or once the session is open
    (the leader then reads the half-close while its SEND commits, and waits to learn whether the
    relay moves): the follower passes the half-close on and keeps writing what the leader answers
    until the leader closes."""
    leader = group.leader()
    follower = follower_of(group, leader)
    client = RawClient(("127.0.0.1", group.members[follower].client_port))
    destination = unique()
    try:
        last = frame_bytes("SEND", {"destination": destination, "receipt": "sent", "persistent": "true"}, b"last words")
        connect = frame_bytes("CONNECT", {"accept-version": "1.2", "host": "x"})
        if when == "at-once":
            client.send(connect + last)
        else:
            client.send(connect)
            assert client.read_frame().command == "CONNECTED"
            client.send(last)
        client.sock.shutdown(socket.SHUT_WR)
        frames = client.read_until_closed()
    finally:
        client.close()
    assert [f.command for f in frames] == (["CONNECTED", "RECEIPT"] if when == "at-once" else ["RECEIPT"]), frames
    assert frames[-1].headers["receipt-id"] == "sent"
    wait_for(lambda: status(group, leader)["broker"]["destinations"].get(destination, {}).get("depth") == 1,
             "the message is stored")


def test_a_client_arriving_during_an_election_is_relayed_to_the_new_leader(group: Group) -> None:
    leader = group.leader()
    follower = follower_of(group, leader)
    group.kill(leader)
    # At once, before the group has a new leader: the follower waits for one (bounded).
    conn, listener = stomppy([("127.0.0.1", group.members[follower].client_port)])
    try:
        destination = unique()
        conn.send(destination, "after the election", receipt="r")
        listener.receipt("r")
        new = group.leader(among=tuple(i for i in group.members if i != leader))
        assert status(group, new)["broker"]["destinations"][destination]["depth"] == 1
    finally:
        conn.disconnect()


def test_without_a_quorum_a_follower_answers_not_the_leader(group: Group) -> None:
    leader = group.leader()
    follower = follower_of(group, leader)
    for node_id in group.members:
        if node_id != follower:
            group.kill(node_id)
    # pysyncobj keeps naming the dead leader while it reaches no peer: the follower cannot
    # reach it (or, once it forgets it, knows none) and says so after its bounded wait.
    client = RawClient(("127.0.0.1", group.members[follower].client_port))
    started = time.monotonic()
    try:
        client.send(frame_bytes("CONNECT", {"accept-version": "1.2", "host": "x"}))
        frames = client.read_until_closed(timeout=10)
    finally:
        client.close()
    assert [f.command for f in frames] == ["ERROR"], frames
    assert frames[0].headers["message"] == "not the leader"
    body = frames[0].body.decode()
    assert "no leader known" in body or f"cannot relay to the leader {group.members[leader].client}" in body, body
    assert time.monotonic() - started < 9  # a bounded wait, not until the client gives up
    assert status(group, follower)["sessions"] == 0
