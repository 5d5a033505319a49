"""One member of a group: a `Node` on a `RaftLog`, its body journal and its admin port.

`<data_dir>/<member id>/raft/` holds the Raft journal, metadata and snapshot;
`<data_dir>/<member id>/bodies/` the body journal (docs/journal-format.md);
`<data_dir>/<member id>/raftmq.log.jsonl` its log (JSON lines, see raftmq.logs). `serve_group` is
what `raftmq node --config GROUP.toml --node ID` runs.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from cluster.group_file import GroupConfig
from raftmq.app.run import ReadyCallback, new_event_loop, raise_fd_limit, run_until_stopped, setup_logging, unbound
from raftmq.config import split_address
from raftmq.errors import ConfigError, JournalCorrupt, RaftmqError
from raftmq.logs import LOG_FILE_NAME
from raftmq.replication.group_secret import group_secret
from raftmq.replication.membership import REMOVE, Change
from raftmq.replication.membership_change import change_membership
from raftmq.replication.raft_log import RaftLog
from raftmq.replication.raft_settings import RaftSettings
from raftmq.server.admin.http import AdminServer, fetch_bodies
from raftmq.server.admin.management import ManagementApi
from raftmq.server.gc_tuning import unwatch_gc_pauses, watch_gc_pauses
from raftmq.server.node import Node
from raftmq.server.replica.bodies import BodyStore, IndexRecords
from raftmq.tls import admin_ssl_context, member_client_tls

log = structlog.get_logger("raftmq.app.group")

FETCH_BUDGET_SECONDS = 5.0
# One round of body fetching holds at most this much before it is written (the replica asks
# again for the rest): a new member catching up with 1 GiB peaked at 1.16 GiB RSS without it.
FETCH_ROUND_BYTES = 64 * 2**20
SOLO_LEADER_WAIT_SECONDS = 10.0
HAND_OVER_SECONDS = 5.0


def raft_settings(group: GroupConfig, node_id: str, secret: str | None = None) -> RaftSettings:
    """`secret`: the group's (`group_secret`), read from its data directory when not given."""
    return RaftSettings(
        # Nobody connects to a group of one: its Raft port stays where it is (loopback).
        bind_host=group.server.bind_host if len(group.members) > 1 else None,
        tls=tls if (tls := group.server.security.tls) is not None and tls.raft else None,
        self_address=group.member(node_id).raft,
        peers=tuple(member.raft for member in group.members),
        data_dir=str(group.member_dir(node_id) / "raft"),
        password=group.password,
        secret=secret or group_secret(group.password, group.data_dir),
        timings=group.raft,
    )


Reload = Callable[[], GroupConfig]


@dataclass
class Roster:
    """The group file as last read: members' addresses (client, admin) by Raft address. A
    membership change (`raftmq group add-node`) writes the file first, so the members read
    it again when the change reaches them."""

    group: GroupConfig
    reload: Reload | None = None
    listeners: list[Callable[[GroupConfig], None]] = field(default_factory=list)

    def members_changed(self, members: tuple[str, ...]) -> None:
        if self.reload is not None:
            try:
                self.group = self.reload()
            except ConfigError as exc:
                log.error("node.group_file_unreadable", error=str(exc))
        known = {m.raft for m in self.group.members}
        unknown = [address for address in members if address not in known]
        if unknown:
            log.warning("node.member_not_in_group_file", members=unknown)
        for listener in self.listeners:
            listener(self.group)


@dataclass
class RunningMember:
    node: Node
    raft: RaftLog
    bodies: BodyStore
    admin: AdminServer | None


async def _change_members(node: Node, raft: RaftLog, change: Change) -> tuple[str, ...]:
    leaving = change.op == REMOVE and change.address == raft.settings.self_address
    if leaving:
        node.succession.going = True
    try:
        return await change_membership(raft, change)  # a leader leaving hands its leadership over first
    finally:
        if leaving and not raft.is_leader:
            await node.send_clients_off()  # it is stopped next
        elif leaving:
            node.succession.going = False  # it stays: its sessions are handed over as at any transfer


def open_member(group: GroupConfig, node_id: str, reload: Reload | None = None) -> RunningMember:
    """Build (not start) a member. Raises JournalCorrupt when its body journal fails
    verification, ConfigError for an unknown id. `reload` reads the group file again."""
    from raftmq.storage.journal import Journal

    group.require_password()
    member = group.member(node_id)
    journal = Journal(
        group.member_dir(node_id) / "bodies",
        segment_bytes=group.journal.segment_bytes,
        cache_bytes=group.journal.cache_bytes,
    )
    bodies = BodyStore(journal, group.journal.body_cache_bytes)
    # The Raft wire and the body fetches between members authenticate with it; strangers get nothing.
    secret = group_secret(group.password, group.data_dir)
    raft = RaftLog(raft_settings(group, node_id, secret), client_addresses={m.raft: m.client for m in group.members})
    roster = Roster(group, reload)
    roster.listeners.append(lambda changed: raft.set_client_addresses({m.raft: m.client for m in changed.members}))
    raft.set_members_listener(roster.members_changed)
    node = Node(
        group.node_config(node_id), raft, bodies=bodies,
        fetch_bodies=lambda indexes: _fetch_from_peers(roster.group, node_id, raft, indexes, secret),
    )
    node.hand_over_secret = secret  # sessions move with the leadership (raftmq.server.stomp.hand_over)
    # A follower relays MQTT clients to the leader's MQTT address (raftmq.server.mqtt.relay).
    node.mqtt.peers = lambda: {m.client: m.mqtt for m in roster.group.members if m.mqtt}
    admin = None
    if member.admin is not None:
        host, port = split_address(member.admin)
        host = group.server.bind_host or host
        api = ManagementApi(node, lambda: [{"node": m.id, "client": m.client, "admin": m.admin}
                                           for m in roster.group.members],
                            group=group.name)
        admin = AdminServer(node.status, bodies, node.replica.verify_bodies, host, port, secret, group=group.name,
                            change_members=lambda change: _change_members(node, raft, change), api=api,
                            ssl=admin_ssl(group), authenticate=api.authenticated,
                            hand_over=lambda: hand_over(raft),
                            hosts=node.known_names.with_names(member.admin, member.client, member.raft),
                            origins=node.config.admin_origins)
    return RunningMember(node, raft, bodies, admin)


def admin_ssl(group: GroupConfig) -> ssl.SSLContext | None:
    """The admin port's TLS: the client port's certificate, when the group has [tls]."""
    tls = group.server.security.tls
    return None if tls is None else admin_ssl_context(tls)


async def hand_over(raft: RaftLog, timeout: float = HAND_OVER_SECONDS) -> dict[str, Any]:
    """Hand leadership to another member if this one leads (`POST /leadership`)."""
    if not raft.is_leader:
        return {"handed_over": False, "was_leader": False, "leader": raft.leader_hint}
    done = await raft.transfer_leadership(timeout=timeout)
    return {"handed_over": done, "was_leader": True, "leader": raft.leader_hint}


def _fetch_from_peers(group: GroupConfig, node_id: str, raft: RaftLog, indexes: Sequence[int],
                      secret: str) -> list[IndexRecords]:
    """The leader first (it has applied the most), then the other members."""
    try:
        leader = raft.raft_status().leader
    except AssertionError:  # restoring while the Raft member is still being built
        leader = None
    others = [m for m in group.members if m.id != node_id and m.admin is not None]
    others.sort(key=lambda m: m.raft != leader)
    peers = [split_address(m.admin) for m in others if m.admin is not None]
    tls = group.server.security.tls
    return fetch_bodies(peers, list(indexes), secret, budget=FETCH_BUDGET_SECONDS, max_bytes=FETCH_ROUND_BYTES,
                        tls=None if tls is None else member_client_tls(tls))


async def _run_member(group: GroupConfig, node_id: str, on_ready: ReadyCallback | None, reload: Reload | None) -> int:
    watch_gc_pauses()
    try:
        member = open_member(group, node_id, reload)
    except JournalCorrupt as exc:
        raise SystemExit(
            f"raftmq node {node_id}: {exc}; refusing to start (restore that file, or remove "
            f"{group.member_dir(node_id)} to resync this member from its peers)"
        ) from None
    except RaftmqError as exc:
        raise SystemExit(f"raftmq node {node_id}: {exc}") from None
    node = member.node
    try:
        try:
            await node.start()
            if member.admin is not None:
                await member.admin.start()
        except OSError as exc:
            own = group.member(node_id)
            where = unbound(node, own.client, own.mqtt, own.admin)
            raise SystemExit(f"raftmq node {node_id}: cannot listen on {where}: {exc.strerror or exc}") from None
        except RaftmqError as exc:
            raise SystemExit(f"raftmq node {node_id}: {exc}") from None
        if len(group.members) == 1:
            # A group of one leads as soon as its journal is replayed: say "ready" only then, so
            # a client that connects on the readiness line is served, not sent elsewhere.
            deadline = asyncio.get_running_loop().time() + SOLO_LEADER_WAIT_SECONDS
            while not node.commit_log.is_leader and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.005)
        await run_until_stopped(node, on_ready)
    finally:
        log.info("node.stopping", node=node.name)
        if member.admin is not None:
            await member.admin.stop()
        await node.stop()
        member.bodies.close()
    return 1 if node.failure else 0


def serve_group(
    group: GroupConfig,
    node_id: str,
    *,
    on_ready: ReadyCallback | None = None,
    log_file: str | os.PathLike[str] | None = None,
    log_level: str | None = None,
    reload: Reload | None = None,
) -> None:
    """Run member `node_id` of `group` in the foreground until SIGINT/SIGTERM. It logs to
    stderr and as JSON lines to `log_file`, by default `<member dir>/raftmq.log.jsonl`.
    `reload` reads the group file again (after a membership change)."""
    json_path = log_file if log_file is not None else group.member_dir(node_id) / LOG_FILE_NAME
    setup_logging(f"raftmq node {node_id}", json_path, log_level)
    raise_fd_limit()
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            code = runner.run(_run_member(group, node_id, on_ready, reload))
    finally:
        # A member's last words (a refusal, say) must stay its last line: the collections of a
        # process tearing itself down are no news.
        unwatch_gc_pauses()
    if code:
        raise SystemExit(code)
