"""`raftmq group add-node / remove-node / replace-node`: change who is in a running group.

Each change is one committed Raft configuration change (raftmq.replication.membership), asked
of the group's leader through its admin port (`POST /membership`, signed with the group
secret). Around it:

- add: the new member's addresses go into the group's members file first
  (`<data_dir>/members.toml`, cluster.group_file.MEMBERS_FILE), so the members can name it (client
  redirects, body fetches) and `raftmq up` starts it next time; the supervisor of `raftmq up`
  starts it now (or the operator does, as the command says); then the change commits and the
  command waits until the member has applied everything the leader had committed (it catches
  up from a snapshot, fetching the bodies it references, and the journal after it);
- remove: the change commits (a leader asked to remove itself hands leadership over first),
  then the member is stopped, dropped from the members file, and its data directory set
  aside (`<id>.removed-<time>`): started again with the same id it begins empty;
- replace: add the new member, then remove the old one, so the group never has fewer than
  its usual members.

One change at a time: the leader refuses a second one until the first has committed.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cluster.group_file import MEMBERS_FILE, GroupConfig, GroupMember
from cluster.topology import Topology
from raftmq.config import split_address
from raftmq.errors import DeploymentError
from raftmq.ops.launcher import NODE_LOG, DeploymentState, check_port_free, launcher_alive, read_state
from raftmq.ops.rolling_requests import JOIN, LEAVE, pending_member_request, request_member
from raftmq.ops.status_view import fetch_status
from raftmq.replication.group_secret import group_secret
from raftmq.replication.membership import ADD, REMOVE, Change
from raftmq.server.admin.http import post_membership
from raftmq.tls import member_client_tls

POLL_SECONDS = 0.1
Report = Callable[[str], None]
StatusFetch = Callable[[str], "dict[str, Any] | None"]


@dataclass(frozen=True, slots=True)
class ChangeResult:
    members: tuple[str, ...]  # the group's Raft addresses after the change
    seconds: float  # from the request to done (for an add: to caught up)
    catch_up_seconds: float = 0.0  # add: from the commit to caught up


def members_file_text(members: tuple[GroupMember, ...]) -> str:
    lines = ["# The group's members, kept by `raftmq group add-node / remove-node / replace-node`.",
             "# It takes the place of the group file's [[node]] tables (cluster.group_file.MEMBERS_FILE)."]
    for member in members:
        lines += ["", "[[node]]"] + [f"{key} = {json.dumps(value)}" for key, value in
                                     (("id", member.id), ("client", member.client), ("raft", member.raft),
                                      ("admin", member.admin), ("mqtt", member.mqtt))
                                     if value is not None]
    return "\n".join(lines) + "\n"


def write_members(group: GroupConfig, members: tuple[GroupMember, ...]) -> Path:
    path = Path(group.data_dir) / MEMBERS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{MEMBERS_FILE}.tmp")
    temporary.write_text(members_file_text(members), encoding="utf-8")
    temporary.replace(path)
    return path


def caught_up(status: dict[str, Any] | None, committed: int) -> bool:
    """A member's state machine has applied `committed` (not only its Raft log: a member
    restoring a snapshot holds what follows until it has every body the snapshot references)
    and it misses no body."""
    if status is None:
        return False
    missing = int(status.get("bodies", {}).get("missing_indexes", 0))
    return int(status.get("applied_index", -1)) >= committed and missing == 0


class MembershipChanger:
    def __init__(self, topology: Topology, group: str, report: Report, timeout: float = 300.0,
                 fetch: StatusFetch = fetch_status) -> None:
        spec = next((g for g in topology.groups if g.name == group), None)
        if spec is None:
            raise DeploymentError(f"no group {group!r} in {topology.source or 'the built-in topology'} "
                                  f"(groups: {', '.join(g.name for g in topology.groups)})")
        self.topology, self.spec, self.report, self.timeout, self.fetch = topology, spec, report, timeout, fetch
        spec.config.require_password()
        self.secret = group_secret(spec.config.password, spec.config.data_dir)

    def _admin(self, member: GroupMember) -> str:
        return self.group.admin_endpoint(member) or ""

    def _member_tls(self) -> tuple[ssl.SSLContext, bytes] | None:
        tls = self.group.server.security.tls
        return None if tls is None else member_client_tls(tls)

    @property
    def group(self) -> GroupConfig:
        return self.spec.config

    # -- the three commands

    def add(self, member: GroupMember) -> ChangeResult:
        started = time.monotonic()
        if member in self.group.members:
            # An earlier add-node wrote it and started it, then failed (say, no leader in
            # time): carry on from there.
            self.report(f"{self.group.name}/{member.id} is in the members file already: resuming")
        else:
            self._check_new(member)
            write_members(self.group, (*self.group.members, member))
            self.spec = replace(self.spec, config=replace(self.group, members=(*self.group.members, member)))
        self._start(member)
        assert member.admin is not None
        self._wait(f"{member.id} to answer on {member.admin}", lambda: self.fetch(self._admin(member)))
        members = self._commit(Change(ADD, member.raft))
        committed = time.monotonic()
        self.report(f"{self.group.name}: {member.id} is a member ({len(members)} members); catching up")
        self._wait(f"{member.id} to catch up", lambda: self._caught_up(member))
        done = time.monotonic()
        self.report(f"{self.group.name}/{member.id}: caught up in {done - committed:.1f} s")
        return ChangeResult(members, done - started, done - committed)

    def remove(self, node_id: str) -> ChangeResult:
        started = time.monotonic()
        member = self.group.member(node_id)
        if len(self.group.members) == 1:
            raise DeploymentError(f"{self.group.name}/{node_id} is the group's only member")
        members = self._commit(Change(REMOVE, member.raft))
        self.report(f"{self.group.name}: {node_id} is no longer a member ({len(members)} members); stopping it")
        self._stop(member)
        remaining = tuple(m for m in self.group.members if m.id != node_id)
        write_members(self.group, remaining)
        self.spec = replace(self.spec, config=replace(self.group, members=remaining))
        self._set_aside(member)
        return ChangeResult(members, time.monotonic() - started)

    def replace_member(self, old_id: str, new: GroupMember) -> ChangeResult:
        started = time.monotonic()
        self.group.member(old_id)  # unknown: ConfigError before anything changes
        added = self.add(new)
        removed = self.remove(old_id)
        return ChangeResult(removed.members, time.monotonic() - started, added.catch_up_seconds)

    # -- steps

    def _check_new(self, member: GroupMember) -> None:
        if member.admin is None:
            raise DeploymentError(f"{member.id}: an admin address is needed (the command waits on its /status)")
        taken = {m.id for m in self.group.members}
        if member.id in taken:
            raise DeploymentError(f"{self.group.name}: there is already a member {member.id!r}")
        used = {getattr(m, kind): f"{g.name}/{m.id} {kind}" for g, m in self.topology.members()
                for kind in ("client", "raft", "admin")}
        for kind in ("client", "raft", "admin"):
            address = getattr(member, kind)
            if address in used:
                raise DeploymentError(f"{member.id} {kind} address {address} is already {used[address]}")
            check_port_free(address, f"{member.id} {kind} address")

    def _supervised(self) -> DeploymentState | None:
        state = read_state(self.topology.state_dir)
        if state is None or not launcher_alive(state) or not any(n.group == self.group.name for n in state.nodes):
            return None
        return state

    def _start(self, member: GroupMember) -> None:
        state = self._supervised()
        if state is None:
            self.report(f"start it: raftmq node --config {self.spec.config_path} --node {member.id}")
            return
        sibling = next(n for n in state.nodes if n.group == self.group.name)
        argv = list(sibling.argv)
        argv[argv.index("--node") + 1] = member.id
        log_path = (Path(self.group.data_dir) / member.id).resolve() / NODE_LOG
        request_member(self.topology.state_dir, JOIN, (self.group.name, member.id),
                       {"argv": argv, "log": str(log_path), "client": member.client, "raft": member.raft,
                        "admin": member.admin, "mqtt": member.mqtt})
        self.report(f"{self.group.name}/{member.id}: started by the supervisor of `raftmq up` (log: {log_path})")

    def _stop(self, member: GroupMember) -> None:
        if self._supervised() is None:
            self.report(f"stop it: the process of {self.group.name}/{member.id} (it serves no one now)")
            return
        key = (self.group.name, member.id)
        request_member(self.topology.state_dir, LEAVE, key)
        self._wait(f"{member.id} to stop", lambda: not pending_member_request(self.topology.state_dir, LEAVE, key))

    def _set_aside(self, member: GroupMember) -> None:
        directory = Path(self.group.data_dir) / member.id
        if self._supervised() is None or not directory.exists():
            return  # the operator stops it; the directory stays
        aside = directory.with_name(f"{member.id}.removed-{time.strftime('%Y%m%d-%H%M%S')}")
        directory.rename(aside)
        self.report(f"{self.group.name}/{member.id}: its data directory is now {aside}")

    def _leader(self) -> tuple[GroupMember, dict[str, Any]] | None:
        for member in self.group.members:
            status = self.fetch(self._admin(member)) if member.admin else None
            if status is not None and status.get("role") == "leader":
                return member, status
        return None

    def _commit(self, change: Change) -> tuple[str, ...]:
        """Ask the leader until the change is committed (or is found to be in effect)."""
        last = "no leader"

        def attempt() -> tuple[str, ...] | None:
            nonlocal last
            found = self._leader()
            if found is None:
                return None
            leader, status = found
            members = tuple(status.get("raft", {}).get("members", ()))
            if (change.address in members) == (change.op == ADD) and members:
                return members  # already in effect (an earlier attempt whose answer was lost)
            assert leader.admin is not None
            host, port = split_address(leader.admin)
            try:
                code, answer = post_membership(host, port, change, self.secret, tls=self._member_tls())
            except OSError as exc:
                last = f"{leader.id}: {exc}"
                return None
            if code == 200:
                return tuple(answer.get("members", ()))
            if code == 400:
                raise DeploymentError(f"{self.group.name}: {answer.get('error')}")
            if code == 403:  # asking again cannot help
                raise DeploymentError(
                    f"{self.group.name}: {leader.id} refused the request's signature: the group secret here "
                    f"(group.password, or {self.group.data_dir}/group.secret) is not the group's")
            last = f"{leader.id}: HTTP {code} {answer.get('error')}"
            return None

        what = f"the group to commit {change.op} {change.address} (last: {{last}})"
        return self._wait(what, attempt, lambda: last)  # type: ignore[no-any-return]

    def _caught_up(self, member: GroupMember) -> bool:
        found = self._leader()
        if found is None:
            return False
        return caught_up(self.fetch(self._admin(member)), int(found[1].get("commit_index", 0)))

    def _wait(self, what: str, probe: Callable[[], Any], detail: Callable[[], str] | None = None) -> Any:
        deadline = time.monotonic() + self.timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                text = what.replace("{last}", detail()) if detail is not None else what
                raise DeploymentError(f"timed out after {self.timeout:g} s waiting for {text}")
            time.sleep(POLL_SECONDS)

