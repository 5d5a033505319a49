"""The Raft wire's codec and group secret (raftmq.replication.wire); the handshake and limits
are tested against real members in tests/server/test_group_raft_port.py, the order of the HELLOs
and a STOMP client at the port in tests/server/test_wrong_port.py."""

from __future__ import annotations

import multiprocessing
import os
import socket
import stat
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pysyncobj.poller import PollPoller
from pysyncobj.tcp_connection import CONNECTION_STATE

from raftmq.client.transport import RAFT_HELLO
from raftmq.errors import ConfigError
from raftmq.replication.group_secret import SECRET_FILE, group_secret
from raftmq.replication.wire import MAGIC, NONCE_BYTES, RaftConnection, decode_message, encode_message

plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=5).map(tuple) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)


@given(plain)
def test_any_plain_message_round_trips(message: object) -> None:
    assert decode_message(encode_message(message)) == message


def test_entries_come_back_as_the_tuples_pysyncobj_indexes() -> None:
    message = {"type": "append_entries", "term": 3, "entries": [(b"\x01cmd", 7, 3), (b"\x01cmd2", 8, 3)], "lm": 12.5,
               "prevLogIdx": 6, "prevLogTerm": 2, "commit_index": 6}
    decoded = decode_message(encode_message(message))
    assert decoded["entries"] == ((b"\x01cmd", 7, 3), (b"\x01cmd2", 8, 3))
    assert decoded["entries"][-1][1] == 8 and isinstance(decoded["lm"], float)


def test_nothing_but_plain_data_decodes() -> None:
    import pickle

    for stranger in (pickle.dumps(os.getcwd), b"\xc7\x01\x05x"):  # a pickle, a msgpack extension type
        try:
            value = decode_message(stranger)
        except Exception:
            continue
        assert isinstance(value, (int, float, str, bytes, tuple, dict, type(None), bool)), value


def _secret(directory: str, queue: multiprocessing.Queue) -> None:
    queue.put(group_secret(None, directory))


def test_members_starting_at_once_agree_on_one_private_secret(tmp_path: Path) -> None:
    queue: multiprocessing.Queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_secret, args=(str(tmp_path), queue)) for _ in range(6)]
    for p in procs:
        p.start()
    secrets = {queue.get(timeout=20) for _ in procs}
    for p in procs:
        p.join(20)
    assert len(secrets) == 1
    assert stat.S_IMODE((tmp_path / SECRET_FILE).stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [SECRET_FILE]  # no temp files left
    assert group_secret("configured", tmp_path) == "configured"


def test_a_secret_others_can_read_is_refused(tmp_path: Path) -> None:
    group_secret(None, tmp_path)
    (tmp_path / SECRET_FILE).chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        group_secret(None, tmp_path)


def test_the_client_knows_the_hello_of_a_raft_port() -> None:
    # raftmq.client.transport recognises a Raft port by it, without importing this module.
    assert RAFT_HELLO == len(MAGIC + bytes(NONCE_BYTES)).to_bytes(4, "big") + MAGIC


class _CountingSocket:
    """A socket that counts the calls made of it (the system calls a connection spends)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.sock, name)
        if not callable(attr):
            return attr

        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            return attr(*args)
        return counted


@pytest.mark.integration
def test_an_open_connection_never_asks_its_socket_for_errors_per_event() -> None:
    poller = PollPoller()
    listener = socket.create_server(("127.0.0.1", 0))
    client = RaftConnection(poller, "s3cret", timeout=5.0)
    received: list[Any] = []
    server: RaftConnection | None = None
    try:
        assert client.connect("127.0.0.1", listener.getsockname()[1])
        accepted, _ = listener.accept()
        accepted.setblocking(False)
        server = RaftConnection(poller, "s3cret", timeout=5.0, sock=accepted)
        server.setOnMessageReceivedCallback(received.append)
        deadline = time.monotonic() + 5
        while (client.state != CONNECTION_STATE.CONNECTED or server.state != CONNECTION_STATE.CONNECTED) \
                and time.monotonic() < deadline:
            poller.poll(0.05)
        assert client.state == server.state == CONNECTION_STATE.CONNECTED
        counting = server._sock = _CountingSocket(accepted)  # type: ignore[assignment]
        for i in range(5):
            client.send({"type": "append_entries", "term": 1, "n": i})
            deadline = time.monotonic() + 5
            while len(received) <= i and time.monotonic() < deadline:
                poller.poll(0.05)
        assert [m["n"] for m in received] == list(range(5))
        assert counting.calls["recv"] >= 5 and counting.calls["getsockopt"] == 0, counting.calls
    finally:
        client.disconnect()
        if server is not None:
            server.disconnect()
        listener.close()
