"""Logins, ACLs and TLS against real `python -m raftmq node` processes, with stomp-py, raw
sockets, our asyncio client and the `raftmq send/receive` commands."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import stomp
import websocket
from click.testing import CliRunner

from raftmq.cli import main
from raftmq.client import client_ssl_context, connect_failover
from raftmq.client import connect as client_connect
from raftmq.client.sync import Client
from raftmq.errors import BrokerRefused, ClientError
from raftmq.passwords import hash_password
from tests.helpers.stomp_raw import WAIT, NodeProcess, RawClient, frame_bytes, stomp_connection, unique
from tests.helpers.tls_certs import CertFiles, make_certificates

pytestmark = pytest.mark.integration

PASSWORDS = {"admin": "admin-pw-1", "producer": "producer-pw-2", "consumer": "consumer-pw-3", "first": "first-pw-4"}
# "first" logs in once only: its CONNECT is the one whose passcode check runs in a worker thread.
GROUPS = {"admin": ["admins"], "producer": ["producers"], "consumer": ["consumers"], "first": ["producers"]}
ACL = """
[[acl]]
queue = ">"
read = ["admins"]
write = ["admins"]
admin = ["admins"]

[[acl]]
queue = "orders.>"
read = ["consumers", "admins"]
write = ["producers", "admins"]
admin = ["admins"]

[[acl]]
queue = "open.*"
read = ["consumers"]
write = ["producers"]
admin = ["producers", "consumers"]

[[acl]]
topic = "prices.*"
read = ["consumers"]
write = ["producers"]
admin = ["producers"]
"""


def users_toml() -> str:
    return "".join(
        f'[[user]]\nname = "{name}"\npassword_hash = "{hash_password(password)}"\ngroups = {GROUPS[name]!r}\n'
        .replace("'", '"')
        for name, password in PASSWORDS.items()
    )


def stop_cleanly(node: NodeProcess) -> str:
    try:
        code = node.terminate()
        stderr = "".join(node.stderr_lines)
        assert code == 0, stderr[-3000:]
        assert "Traceback" not in stderr and "client.internal_error" not in stderr, stderr[-3000:]
        return stderr
    finally:
        node.kill()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    path = tmp_path_factory.mktemp("secure") / "node.toml"
    path.write_text(users_toml() + ACL)
    node = NodeProcess(["--config", str(path)])
    stderr = ""
    try:
        yield node
    finally:
        stderr = stop_cleanly(node)
    for password in (*PASSWORDS.values(), "wrong-passcode"):
        assert password not in stderr  # passcodes, right or wrong, never reach the log


def login(node: NodeProcess, user: str, **headers: str) -> RawClient:
    client = RawClient(node.address)
    client.connect(login=user, passcode=PASSWORDS[user], **headers)
    return client


def expect_error_and_close(client: RawClient, message: str) -> dict[str, str]:
    frames = client.read_until_closed()
    errors = [frame for frame in frames if frame.command == "ERROR"]
    assert len(errors) == 1 and frames[-1].command == "ERROR", frames
    assert errors[0].headers["message"] == message, errors[0]
    return {**errors[0].headers, "body": errors[0].body.decode()}


def send_receipted(client: RawClient, destination: str, body: bytes, receipt: str) -> None:
    client.send(frame_bytes("SEND", {"destination": destination, "receipt": receipt}, body))
    frame = client.read_frame()
    assert (frame.command, frame.headers.get("receipt-id")) == ("RECEIPT", receipt), frame


def queue_contents(node: NodeProcess, destination: str, user: str = "admin", within: float = 0.5) -> list[bytes]:
    """Everything waiting in `destination`, consumed by `user` (auto ack)."""
    client = login(node, user)
    client.send(frame_bytes("SUBSCRIBE", {"destination": destination, "id": "s", "receipt": "sub"}))
    bodies = []
    deadline = time.monotonic() + WAIT
    try:
        while time.monotonic() < deadline:
            try:
                frame = client.read_frame(timeout=within)
            except TimeoutError:
                return bodies
            if frame.command == "MESSAGE":
                bodies.append(frame.body)
            else:
                assert frame.command == "RECEIPT", frame
        raise AssertionError("messages kept coming")
    finally:
        client.close()


# -- authentication ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{"login": "producer", "passcode": "wrong-passcode"}, {"login": "nobody", "passcode": "wrong-passcode"},
     {"login": "producer"}, {}],
    ids=["wrong passcode", "unknown user", "no passcode", "no login"],
)
def test_bad_credentials_get_access_refused_and_a_closed_socket(secure: NodeProcess, headers: dict[str, str]) -> None:
    client = RawClient(secure.address)
    try:
        client.send(frame_bytes("CONNECT", {"accept-version": "1.2", "host": "x", **headers}))
        error = expect_error_and_close(client, "access refused")
        # The same words whether the user exists or not.
        assert "invalid login or passcode" in error["body"] and "nobody" not in error["body"]
        assert "producer" not in error["body"]
    finally:
        client.close()


def test_frames_pipelined_behind_a_refused_connect_do_nothing(secure: NodeProcess) -> None:
    destination = unique("/queue/orders.pipelined")
    send_admin = login(secure, "admin")
    send_receipted(send_admin, destination, b"first", "r1")  # the queue exists, and holds one message
    send_admin.close()
    client = RawClient(secure.address)
    try:
        client.send(
            frame_bytes("CONNECT",
                        {"accept-version": "1.2", "host": "x", "login": "producer", "passcode": "wrong-passcode"})
            + frame_bytes("SEND", {"destination": destination, "receipt": "r"}, b"sneaked in")
        )
        expect_error_and_close(client, "access refused")
    finally:
        client.close()
    assert queue_contents(secure, destination) == [b"first"]


def test_frames_pipelined_behind_an_accepted_connect_wait_for_the_login_check(secure: NodeProcess) -> None:
    destination = unique("/queue/orders.first")
    admin = login(secure, "admin")
    send_receipted(admin, destination, b"existing", "c")
    admin.close()
    client = RawClient(secure.address)
    try:
        client.send(
            frame_bytes("CONNECT",
                        {"accept-version": "1.2", "host": "x", "login": "first", "passcode": PASSWORDS["first"]})
            + frame_bytes("SEND", {"destination": destination, "receipt": "r1"}, b"one")
            + frame_bytes("SEND", {"destination": destination, "receipt": "r2"}, b"two")
        )
        frames = [client.read_frame() for _ in range(3)]
        assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [
            ("CONNECTED", None), ("RECEIPT", "r1"), ("RECEIPT", "r2")]
    finally:
        client.close()
    assert queue_contents(secure, destination, "consumer") == [b"existing", b"one", b"two"]


def test_stomp_py_login(secure: NodeProcess) -> None:
    conn, listener = stomp_connection(secure.address)
    conn.connect(username="consumer", passcode=PASSWORDS["consumer"], wait=True)
    try:
        assert listener.connected.wait(WAIT)
        assert listener.connected_headers["version"] == "1.2"
    finally:
        conn.disconnect()
    refused, refused_listener = stomp_connection(secure.address)
    with pytest.raises(stomp.exception.ConnectFailedException):
        refused.connect(username="consumer", passcode="wrong-passcode", wait=True)
    assert refused_listener.errors.get(timeout=WAIT).headers["message"] == "access refused"
    assert refused_listener.disconnected.wait(WAIT)
    assert not refused_listener.connected.is_set()


def test_our_clients_report_the_refusal_and_do_not_retry(secure: NodeProcess) -> None:
    host, port = secure.address

    async def scenario() -> None:
        with pytest.raises(BrokerRefused, match="access refused"):
            await client_connect(host, port, login="consumer", passcode="wrong-passcode")
        started = time.monotonic()
        with pytest.raises(BrokerRefused, match="access refused"):
            # Retrying forever is the failover default; a refused login must end it at once.
            await connect_failover(f"failover:(stomp://{host}:{port})?maxReconnectAttempts=-1",
                                   login="consumer", passcode="wrong-passcode")
        assert time.monotonic() - started < 3.0
        client = await connect_failover(f"stomp://{host}:{port}", login="consumer", passcode=PASSWORDS["consumer"])
        await client.close()

    asyncio.run(scenario())


# -- authorization -------------------------------------------------------------------------------------


def test_send_without_write_is_denied_and_what_follows_is_dropped(secure: NodeProcess) -> None:
    allowed = unique("/queue/orders.allowed")
    admin = login(secure, "admin")
    send_receipted(admin, allowed, b"created by admin", "c")
    admin.close()
    producer = login(secure, "producer")
    try:
        send_receipted(producer, allowed, b"ok", "r1")
        forbidden = unique("/queue/billing")
        producer.send(
            frame_bytes("SEND", {"destination": forbidden, "receipt": "r2"}, b"denied")
            + frame_bytes("SEND", {"destination": allowed, "receipt": "r3"}, b"after the refusal")
        )
        error = expect_error_and_close(producer, "access denied")
        assert error["receipt-id"] == "r2"
        assert f"user 'producer' may not write to {forbidden}" in error["body"]
    finally:
        producer.close()
    assert queue_contents(secure, allowed, "consumer") == [b"created by admin", b"ok"]
    assert queue_contents(secure, forbidden) == []


def test_send_in_a_transaction_is_checked_and_the_transaction_rolls_back(secure: NodeProcess) -> None:
    allowed = unique("/queue/orders.tx")
    admin = login(secure, "admin")
    send_receipted(admin, allowed, b"existing", "c")
    admin.close()
    producer = login(secure, "producer")
    try:
        producer.send(
            frame_bytes("BEGIN", {"transaction": "t1"})
            + frame_bytes("SEND", {"destination": allowed, "transaction": "t1"}, b"in the transaction")
            + frame_bytes("SEND", {"destination": unique("/queue/payroll"), "transaction": "t1", "receipt": "bad"},
                          b"x")
            + frame_bytes("COMMIT", {"transaction": "t1", "receipt": "commit"})
        )
        error = expect_error_and_close(producer, "access denied")
        assert error["receipt-id"] == "bad"
    finally:
        producer.close()
    assert queue_contents(secure, allowed, "consumer") == [b"existing"]


def test_subscribe_without_read_is_denied(secure: NodeProcess) -> None:
    destination = unique("/queue/orders.read")
    admin = login(secure, "admin")
    send_receipted(admin, destination, b"secret", "c")
    admin.close()
    conn, listener = stomp_connection(secure.address)
    conn.connect(username="producer", passcode=PASSWORDS["producer"], wait=True)
    try:
        conn.subscribe(destination, id="1", ack="auto", headers={"receipt": "sub-1"})
        error = listener.errors.get(timeout=WAIT)
        assert error.headers["message"] == "access denied"
        assert error.headers["receipt-id"] == "sub-1"
        assert f"may not read from {destination}" in error.body
        assert listener.disconnected.wait(WAIT)
        listener.no_message(0.2)
    finally:
        conn.disconnect()
    assert queue_contents(secure, destination, "consumer") == [b"secret"]  # still there


def test_browsing_a_queue_needs_read(secure: NodeProcess) -> None:
    destination = unique("/queue/orders.browse")
    admin = login(secure, "admin")
    send_receipted(admin, destination, b"kept", "c")
    admin.close()
    producer = login(secure, "producer")
    try:
        producer.send(frame_bytes("SUBSCRIBE",
                                  {"destination": destination, "id": "b", "browser": "true", "receipt": "s"}))
        error = expect_error_and_close(producer, "access denied")
        assert error["receipt-id"] == "s" and f"may not read from {destination}" in error["body"]
    finally:
        producer.close()


def test_browsing_a_missing_queue_does_not_let_a_subscribe_create_it(secure: NodeProcess) -> None:
    destination = unique("/queue/orders.unborn")  # consumers: read, not admin
    consumer = login(secure, "consumer")
    try:
        consumer.send(
            frame_bytes("SUBSCRIBE", {"destination": destination, "id": "b", "browser": "true", "receipt": "b1"})
            + frame_bytes("SUBSCRIBE", {"destination": destination, "id": "s", "receipt": "s2"})
        )
        frames = consumer.read_until_closed()
        assert frames[-1].command == "ERROR" and frames[-1].headers["message"] == "access denied", frames
        assert frames[-1].headers["receipt-id"] == "s2" and "may not create" in frames[-1].body.decode()
    finally:
        consumer.close()


def test_creating_a_destination_needs_admin(secure: NodeProcess) -> None:
    fresh = unique("/queue/orders.fresh")
    producer = login(secure, "producer")
    try:
        producer.send(frame_bytes("SEND", {"destination": fresh, "receipt": "new"}, b"x"))
        error = expect_error_and_close(producer, "access denied")
        assert f"user 'producer' may not create {fresh} (admin permission" in error["body"]
    finally:
        producer.close()
    consumer = login(secure, "consumer")
    try:  # reading would create it as well
        consumer.send(frame_bytes("SUBSCRIBE", {"destination": fresh, "id": "1", "receipt": "s"}))
        assert "may not create" in expect_error_and_close(consumer, "access denied")["body"]
    finally:
        consumer.close()
    admin = login(secure, "admin")
    send_receipted(admin, fresh, b"made by admin", "a")
    admin.close()
    producer = login(secure, "producer")  # once it exists, write is enough
    send_receipted(producer, fresh, b"now allowed", "ok")
    producer.close()
    assert queue_contents(secure, fresh, "consumer") == [b"made by admin", b"now allowed"]


def test_wildcard_entries_grant_what_they_say(secure: NodeProcess) -> None:
    star = unique("/queue/open.q")  # open.<one element>
    producer = login(secure, "producer")
    send_receipted(producer, star, b"via open.*", "r")  # creates it: producers are admin there
    producer.close()
    assert queue_contents(secure, star, "consumer") == [b"via open.*"]
    deeper = star + ".deeper"  # two elements after "open": only ">" (admins) governs it
    producer = login(secure, "producer")
    try:
        producer.send(frame_bytes("SEND", {"destination": deeper}, b"x"))
        assert "queue = '>' grants write to admins" in expect_error_and_close(producer, "access denied")["body"]
    finally:
        producer.close()

    async def topics() -> None:
        host, port = secure.address
        topic = unique("/topic/prices.eu")
        publisher = await client_connect(host, port, login="producer", passcode=PASSWORDS["producer"])
        await publisher.send(topic, b"creates the topic", receipt=True)
        subscriber = await client_connect(host, port, login="consumer", passcode=PASSWORDS["consumer"])
        subscription = subscriber.subscribe(topic, receipt=True)
        await asyncio.wait_for(subscription.receipt, WAIT)
        await publisher.send(topic, b"price", receipt=True)
        message = await asyncio.wait_for(subscription.get(), WAIT)
        assert message.body == b"price"
        await publisher.disconnect()
        await subscriber.disconnect()
        outsider = await client_connect(host, port, login="consumer", passcode=PASSWORDS["consumer"])
        refused = outsider.subscribe(topic + ".fx", receipt=True)  # prices.*.* has no entry
        with pytest.raises(BrokerRefused, match="access denied"):
            await asyncio.wait_for(refused.receipt, WAIT)
        assert isinstance(await asyncio.wait_for(outsider.closed, WAIT), BrokerRefused)

    asyncio.run(topics())


# -- TLS ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[CertFiles, CertFiles]:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory, certs: tuple[CertFiles, CertFiles]) -> Iterator[NodeProcess]:
    server, _ = certs
    path = tmp_path_factory.mktemp("tls") / "node.toml"
    user = f'[[user]]\nname = "app"\npassword_hash = "{hash_password("tls-pw")}"\ngroups = []\n'
    path.write_text(f'[tls]\ncert_file = "{server.cert}"\nkey_file = "{server.key}"\n' + user)
    node = NodeProcess(["--config", str(path)])
    try:
        yield node
    finally:
        stop_cleanly(node)


def test_tls_with_our_client_and_the_failover_url(tls_node: NodeProcess, certs: tuple[CertFiles, CertFiles]) -> None:
    host, port = tls_node.address
    ca = str(certs[0].ca)

    async def scenario() -> None:
        client = await client_connect(host, port, ca_file=ca, login="app", passcode="tls-pw")
        assert client._transport._transport.get_extra_info("ssl_object").version() in ("TLSv1.2", "TLSv1.3")
        destination = unique()
        subscription = client.subscribe(destination, receipt=True)
        await asyncio.wait_for(subscription.receipt, WAIT)
        await client.send(destination, b"over tls", receipt=True)
        assert (await asyncio.wait_for(subscription.get(), WAIT)).body == b"over tls"
        await client.disconnect()
        for scheme in ("stomp+ssl", "ssl"):
            failover = await connect_failover(f"failover:({scheme}://{host}:{port})", ca_file=ca,
                                              login="app", passcode="tls-pw")
            assert await failover.send(destination, scheme.encode()) is not None
            await failover.close()
        with pytest.raises(ClientError, match="access refused"):
            await client_connect(host, port, ca_file=ca, login="app", passcode="nope")

    asyncio.run(scenario())
    with Client.connect(f"stomp+ssl://{host}:{port}", ca_file=ca, login="app", passcode="tls-pw") as sync_client:
        destination = unique()
        sync_client.send(destination, b"blocking client over tls")
        subscription = sync_client.subscribe(destination)
        message = subscription.receive(timeout=WAIT)
        assert message is not None and message.body == b"blocking client over tls"


def test_tls_with_stomp_py(tls_node: NodeProcess, certs: tuple[CertFiles, CertFiles]) -> None:
    conn, listener = stomp_connection(tls_node.address)
    conn.set_ssl(for_hosts=[tls_node.address], ca_certs=str(certs[0].ca))
    conn.connect(username="app", passcode="tls-pw", wait=True)
    try:
        assert listener.connected.wait(WAIT)
        destination = unique()
        conn.subscribe(destination, id="1", ack="auto", headers={"receipt": "s"})
        listener.receipt("s")
        conn.send(destination, "stomp-py over tls")
        assert listener.message().body == "stomp-py over tls"
    finally:
        conn.disconnect()


def test_wss_on_the_tls_client_port_with_a_login_in_connect(tls_node: NodeProcess,
                                                             certs: tuple[CertFiles, CertFiles]) -> None:
    host, port = tls_node.address
    client = websocket.create_connection(f"wss://{host}:{port}/ws", subprotocols=["v12.stomp"], timeout=WAIT,
                                         sslopt={"ca_certs": str(certs[0].ca), "check_hostname": False})
    try:
        client.send("CONNECT\naccept-version:1.2\nhost:/\nlogin:app\npasscode:tls-pw\n\n\0")
        assert client.recv().startswith("CONNECTED\n")
        destination = unique()
        client.send(f"SUBSCRIBE\nid:1\ndestination:{destination}\n\n\0SEND\ndestination:{destination}\n\nover wss\0")
        assert "over wss" in client.recv()
    finally:
        client.close()
    refused = websocket.create_connection(f"wss://{host}:{port}/ws", timeout=WAIT,
                                          sslopt={"ca_certs": str(certs[0].ca), "check_hostname": False})
    try:
        refused.send("CONNECT\naccept-version:1.2\nhost:/\nlogin:app\npasscode:wrong\n\n\0")
        assert refused.recv().startswith("ERROR\n")
    finally:
        refused.close()


def test_plain_tcp_and_untrusted_certificates_are_refused(
    tls_node: NodeProcess, certs: tuple[CertFiles, CertFiles], tmp_path: Path
) -> None:
    host, port = tls_node.address
    other_ca, _ = make_certificates(tmp_path / "other", ca_name="someone else")

    async def scenario() -> None:
        with pytest.raises(ClientError) as plain:
            await client_connect(host, port, login="app", passcode="tls-pw", timeout=WAIT)
        assert not isinstance(plain.value, BrokerRefused)  # no STOMP frame ever came back
        with pytest.raises(ClientError, match="CERTIFICATE_VERIFY_FAILED"):
            await client_connect(host, port, ca_file=str(other_ca.ca), login="app", passcode="tls-pw")

    asyncio.run(scenario())
    raw = RawClient(tls_node.address)  # a STOMP frame on the TLS port: closed without a STOMP answer
    try:
        raw.send(frame_bytes("CONNECT", {"accept-version": "1.2", "host": "x", "login": "app", "passcode": "tls-pw"}))
        assert raw.read_until_closed() == []
    finally:
        raw.close()


def test_cli_send_and_receive_over_tls_with_a_login(tls_node: NodeProcess, certs: tuple[CertFiles, CertFiles]) -> None:
    host, port = tls_node.address
    destination = unique()
    common = ["--url", f"stomp+ssl://{host}:{port}", "--tls-ca", str(certs[0].ca), "--login", "app"]
    runner = CliRunner()
    sent = runner.invoke(main, ["send", destination, "cli over tls", *common], env={"RAFTMQ_PASSCODE": "tls-pw"})
    assert sent.exit_code == 0, sent.output
    got = runner.invoke(main, ["receive", destination, *common, "--passcode", "tls-pw"])
    assert got.exit_code == 0, got.output
    assert got.output == "cli over tls\n"
    refused = runner.invoke(main, ["receive", destination, *common, "--passcode", "wrong", "--connect-timeout", "20"])
    assert refused.exit_code == 1
    assert "the broker refused: access refused" in refused.output


def test_client_certificates_when_required(tmp_path: Path, certs: tuple[CertFiles, CertFiles]) -> None:
    server, client_cert = certs
    path = tmp_path / "node.toml"
    path.write_text(f'[tls]\ncert_file = "{server.cert}"\nkey_file = "{server.key}"\n'
                    f'ca_file = "{server.ca}"\nrequire_client_cert = true\n')
    node = NodeProcess(["--config", str(path)])
    try:
        host, port = node.address

        async def scenario() -> None:
            with pytest.raises(ClientError):
                anonymous_tls = await client_connect(host, port, ca_file=str(server.ca), timeout=WAIT)
                await anonymous_tls.send(unique(), b"x", receipt=True)  # TLS 1.3 reports it here
            context = client_ssl_context(str(server.ca), str(client_cert.cert), str(client_cert.key))
            client = await client_connect(host, port, ssl_context=context)
            assert await client.send(unique(), b"with a client certificate", receipt=True) is not None
            await client.disconnect()

        asyncio.run(scenario())
    finally:
        stop_cleanly(node)


def test_ssl_context_and_ca_file_are_exclusive() -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError, match="not both"):
            await client_connect("127.0.0.1", 1, ssl_context=ssl.create_default_context(), ca_file="x.pem")

    asyncio.run(scenario())
