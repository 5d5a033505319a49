"""The sans-I/O STOMP session, driven without a socket, a loop or a clock: bytes and events in,
decisions out. (The same `StompSession` runs inside every socket `Connection`.)"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftmq.config import NodeConfig
from raftmq.core.commands import Connect, Disconnect, Send
from raftmq.passwords import hash_password
from raftmq.protocol.codec import FrameParser
from raftmq.protocol.limits import Limits
from raftmq.routing.forward_batch import BATCH_DESTINATION, inner_receipt
from raftmq.routing.forward_batch import encode as encode_batch
from raftmq.security import AclEntry, Security, SecurityConfig, UserEntry
from raftmq.server.stomp.decisions import CheckLogin, Decision, Note, Propose, Refuse, RelayToLeader
from raftmq.server.stomp.session import SessionState, StompSession

NOW = 1_700_000_000_000


@dataclass
class Host:
    """A SessionHost in a few lines: what a test, a simulator or an in-process bridge provides."""

    config: NodeConfig = field(default_factory=NodeConfig)
    security: Security = field(default_factory=lambda: Security(SecurityConfig()))
    is_leader: bool = True
    leader_hint: str | None = None
    draining: str | None = None
    destinations: set[str] = field(default_factory=set)
    budget: int = 1 << 30
    reserved: int = 0
    hand_over_secret: str | None = None

    def has_destination(self, destination: str) -> bool:
        return destination in self.destinations

    def reserve_unfinished(self, grow: int) -> bool:
        if grow > 0 and self.reserved + grow > self.budget:
            return False
        self.reserved += grow
        return True


def frame(command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    head = "".join(f"{k}:{v}\n" for k, v in (headers or {}).items())
    return f"{command}\n{head}\n".encode() + body + b"\0"


CONNECT = frame("CONNECT", {"accept-version": "1.2", "host": "x"})


def commands(decisions: list[Decision]) -> list[object]:
    return [c for d in decisions if isinstance(d, Propose) for c in d.commands]


def refusal(decisions: list[Decision]) -> Refuse:
    refused = [d for d in decisions if isinstance(d, Refuse)]
    assert len(refused) == 1, decisions
    return refused[0]


def error_headers(refuse: Refuse) -> dict[str, str]:
    (parsed,) = FrameParser(NodeConfig().limits, "1.2").feed(refuse.frame)
    assert parsed.command == "ERROR"
    return dict(parsed.headers)


def test_connect_then_pipelined_send_in_one_read() -> None:
    session = StompSession(Host(), "s1")
    decisions = session.receive(CONNECT + frame("SEND", {"destination": "/queue/a", "receipt": "r1"}, b"hi"), NOW)
    proposed = commands(decisions)
    assert [type(c) for c in proposed] == [Connect, Send]
    assert proposed[0] == Connect("s1", NOW, None, None)
    assert session.state is SessionState.CONNECTING
    connected, opened = session.connect_committed()
    assert connected is not None and connected.startswith(b"CONNECTED\n") and opened
    assert session.state is SessionState.OPEN
    assert session.connect_committed() == (None, False)  # written once


def test_heart_beats_are_agreed_from_both_offers() -> None:
    session = StompSession(Host(NodeConfig(heartbeat_send_ms=2000, heartbeat_receive_ms=3000)), "s1")
    session.receive(frame("CONNECT", {"accept-version": "1.2", "heart-beat": "1000,5000"}), NOW)
    assert (session.send_interval_ms, session.receive_interval_ms) == (5000, 3000)


def test_a_bad_frame_after_good_ones_proposes_the_good_ones_then_refuses_naming_its_receipt() -> None:
    session = StompSession(Host(), "s1")
    session.receive(CONNECT, NOW)
    decisions = session.receive(
        frame("SEND", {"destination": "/queue/a"}, b"ok") + frame("SEND", {"destination": "nowhere", "receipt": "r9"}),
        NOW,
    )
    assert [type(d) for d in decisions] == [Propose, Refuse]
    assert error_headers(refusal(decisions))["receipt-id"] == "r9"
    assert session.state is SessionState.FAILED
    assert session.receive(frame("SEND", {"destination": "/queue/a"}), NOW) == []  # nothing after an ERROR


def test_first_frame_must_be_connect() -> None:
    session = StompSession(Host(), "s1")
    refuse = refusal(session.receive(frame("SEND", {"destination": "/queue/a"}), NOW))
    assert refuse.message == "expected CONNECT"


def test_a_follower_relays_or_names_the_leader() -> None:
    relayed = StompSession(Host(is_leader=False, leader_hint="10.0.0.1:61613"), "s1")
    decisions = relayed.receive(CONNECT, NOW)
    assert decisions == [RelayToLeader(CONNECT)] and relayed.state is SessionState.RELAYED
    redirecting = Host(NodeConfig(follower_clients="redirect"), is_leader=False, leader_hint="10.0.0.1:61613")
    redirected = StompSession(redirecting, "s2")
    refuse = refusal(redirected.receive(CONNECT, NOW))
    assert refuse.message == "not the leader" and error_headers(refuse)["leader"] == "10.0.0.1:61613"


def test_a_draining_group_refuses_a_connect_and_names_the_other_groups() -> None:
    session = StompSession(Host(draining="10.0.0.2:61616,10.0.0.3:61619"), "s1")
    refuse = refusal(session.receive(CONNECT, NOW))
    assert refuse.message == "group draining" and "10.0.0.2:61616,10.0.0.3:61619" in refuse.detail


def test_passcode_check_holds_pipelined_frames_until_answered() -> None:
    users = (UserEntry("alice", hash_password("pw", n=16, r=1, p=1), ("producers",)),)
    host = Host(security=Security(SecurityConfig(authentication=True, users=users)))
    session = StompSession(host, "s1")
    pipelined = frame("SEND", {"destination": "/queue/a"}, b"x")
    connect = frame("CONNECT", {"accept-version": "1.2", "login": "alice", "passcode": "pw"})
    decisions = session.receive(connect + pipelined, NOW)
    assert decisions == [CheckLogin("alice", "pw")] and session.authenticating
    assert session.receive(frame("SEND", {"destination": "/queue/b"}, b"y"), NOW) == []  # held too
    principal = host.security.login("alice", "pw")
    assert principal is not None
    after = session.login_checked(principal, NOW + 5)
    assert [(type(c).__name__, getattr(c, "destination", None)) for c in commands(after)] == [
        ("Connect", None), ("Send", "/queue/a"), ("Send", "/queue/b"),
    ]


def test_a_wrong_passcode_is_refused_without_saying_why() -> None:
    refused = StompSession(Host(security=Security(SecurityConfig(authentication=True, allow_anonymous=False))), "s2")
    decisions = refused.receive(CONNECT, NOW)
    assert refusal(decisions).message == "access refused"
    assert any(isinstance(d, Note) and d.event == "client.login_refused" for d in decisions)


def test_the_acl_denies_creating_a_destination_without_admin() -> None:
    acl = (AclEntry("queue", "orders.>", read=("anonymous",), write=("anonymous",)),)
    host = Host(security=Security(SecurityConfig(acl=acl, anonymous_groups=("anonymous",))))
    session = StompSession(host, "s1")
    session.receive(CONNECT, NOW)
    denied = session.receive(frame("SEND", {"destination": "/queue/orders.new"}), NOW)
    assert refusal(denied).message == "access denied"
    host.destinations.add("/queue/orders.old")
    allowed = StompSession(host, "s2")
    allowed.receive(CONNECT, NOW)
    sent = commands(allowed.receive(frame("SEND", {"destination": "/queue/orders.old"}), NOW))
    assert [type(c) for c in sent] == [Send]


def test_unfinished_input_is_bounded_by_the_nodes_budget() -> None:
    host = Host(budget=100)
    session = StompSession(host, "s1")
    session.receive(CONNECT, NOW)
    decisions = session.receive(b"SEND\ndestination:/queue/a\n\n" + b"x" * 200, NOW)
    assert refusal(decisions).message == "server busy"
    session.closed(NOW)
    assert host.reserved == 0  # a closed session gives its share back


def test_an_abnormal_close_proposes_the_disconnect_once() -> None:
    session = StompSession(Host(), "s1")
    session.receive(CONNECT, NOW)
    assert commands(session.closed(NOW + 1)) == [Disconnect("s1", NOW + 1)]
    assert session.closed(NOW + 2) == []
    polite = StompSession(Host(), "s2")
    polite.receive(CONNECT, NOW)
    assert [type(c) for c in commands(polite.receive(frame("DISCONNECT", {"receipt": "bye"}), NOW))] == [Disconnect]
    assert polite.closed(NOW) == []  # its own DISCONNECT was already proposed


# -- a bridge's forwarded batch (raftmq.routing.forward_batch) ----------------------------------


def batch_frame(messages: list[tuple[str, list[tuple[str, str]], bytes]], receipt: str = "b1") -> bytes:
    body = encode_batch(messages)
    head = f"destination:{BATCH_DESTINATION}\nreceipt:{receipt}\ncontent-length:{len(body)}\n"
    return f"SEND\n{head}\n".encode() + body + b"\0"


def bridge_session(host: Host | None = None) -> StompSession:
    session = StompSession(host or Host(), "s1")
    session.receive(frame("CONNECT", {"accept-version": "1.2", "raftmq-bridge": "g1"}), NOW)
    session.connect_committed()
    return session


def test_a_batch_on_a_cluster_connection_is_one_proposal_of_sends_with_one_receipt() -> None:
    session = bridge_session()
    messages = [("/queue/a", [("_AMQ_DUPL_ID", f"d{i}"), ("k", "v")], f"m{i}".encode()) for i in range(3)]
    decisions = session.receive(batch_frame(messages, "r/7"), NOW)
    proposals = [d for d in decisions if isinstance(d, Propose)]
    assert len(proposals) == 1
    sends = proposals[0].commands
    assert [(c.destination, c.headers, c.body) for c in sends if isinstance(c, Send)] == [
        ("/queue/a", f"_AMQ_DUPL_ID:d{i}\nk:v\n", f"m{i}".encode()) for i in range(3)]
    receipts = [session.receipt_for(c.receipt) for c in sends if isinstance(c, Send) and c.receipt is not None]
    assert receipts == [None, None, "r/7"]  # one RECEIPT, when the last is applied
    assert session.receipt_for("plain") == "plain"


def test_a_batch_from_a_client_that_is_no_bridge_is_a_reserved_destination() -> None:
    session = StompSession(Host(), "s1")
    session.receive(CONNECT, NOW)
    session.connect_committed()
    refused = refusal(session.receive(batch_frame([("/queue/a", [], b"x"), ("/queue/a", [], b"y")]), NOW))
    assert refused.message == "reserved destination"


def test_a_refused_message_of_a_batch_is_named_by_its_index_and_no_receipt_follows() -> None:
    session = bridge_session(Host(NodeConfig(limits=Limits(max_header_line_bytes=64))))
    messages = [("/queue/a", [], b"ok"), ("/queue/a", [("long", "x" * 100)], b"no"), ("/queue/a", [], b"ok")]
    decisions = session.receive(batch_frame(messages, "r1"), NOW)
    proposed = commands(decisions)
    assert len(proposed) == 1 and isinstance(proposed[0], Send) and proposed[0].body == b"ok"
    headers = error_headers(refusal(decisions))
    assert headers["receipt-id"] == "r1" and headers["raftmq-batch-index"] == "1"
    assert session.receipt_for(inner_receipt("r1", 2, 3)) is None  # failed: the ERROR said it all


def test_the_core_refusing_a_message_of_a_batch_names_it_in_the_error() -> None:
    session = bridge_session()
    decisions = session.receive(batch_frame([("/queue/a", [], b"x"), ("/queue/b", [], b"y")], "r9"), NOW)
    second = commands(decisions)[1]
    assert isinstance(second, Send) and second.receipt is not None
    headers = error_headers(refusal(session.fail("address full", "no room", second.receipt)))
    assert headers["receipt-id"] == "r9" and headers["raftmq-batch-index"] == "1"
    assert session.receipt_for(inner_receipt("r9", 1, 2)) is None


def test_a_batch_that_is_not_one_is_refused_whole() -> None:
    session = bridge_session()
    body = b"\xc1 not msgpack"
    head = f"destination:{BATCH_DESTINATION}\nreceipt:r2\ncontent-length:{len(body)}\n"
    headers = error_headers(refusal(session.receive(f"SEND\n{head}\n".encode() + body + b"\0", NOW)))
    assert headers["receipt-id"] == "r2" and "raftmq-batch-index" not in headers


def test_the_acl_authorizes_each_message_of_a_batch() -> None:
    acl = (AclEntry("queue", "orders.>", write=("anonymous",), admin=("anonymous",)),)
    session = bridge_session(Host(security=Security(SecurityConfig(acl=acl, anonymous_groups=("anonymous",)))))
    decisions = session.receive(batch_frame([("/queue/orders.a", [], b"x"), ("/queue/secret", [], b"y")], "r3"), NOW)
    assert [c.destination for c in commands(decisions) if isinstance(c, Send)] == ["/queue/orders.a"]
    headers = error_headers(refusal(decisions))
    assert headers["message"] == "access denied" and headers["raftmq-batch-index"] == "1"


def test_the_clusters_own_headers_are_a_bridges_to_send_and_a_clients_send_with_one_is_refused() -> None:
    forged = b"SEND\ndestination:/queue/a\n_raftmq_to:g3\nreceipt:r1\n\nx\0"
    bridge = bridge_session()
    sends = [c for d in bridge.receive(forged, NOW) if isinstance(d, Propose) for c in d.commands]
    assert [c.destination for c in sends if isinstance(c, Send)] == ["/queue/a"]
    client = StompSession(Host(), "s2")
    client.receive(CONNECT, NOW)
    client.connect_committed()
    decisions = client.receive(forged, NOW)
    assert not any(isinstance(d, Propose) for d in decisions)
    refused = refusal(decisions)
    assert refused.message == "reserved header" and "_raftmq_to" in refused.detail
