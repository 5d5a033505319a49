"""What a node does when leadership changes hands, and the services that run only on a leader.

Losing leadership hands every client's session to the new leader (once it is known, bounded
wait; raftmq.server.stomp.adoption) and relays its connection there; a session that cannot be
handed over (commands of unknown outcome, not open, no group secret, the successor refuses) is
closed with an ERROR naming the new leader, as is every session of a node that is stopping (its
connections end with it; a leader that stops gracefully hands its sessions over before it stops,
raftmq.server.node).
Gaining leadership proposes a Disconnect for every session the core still knows from earlier
leaders and nobody adopted, so their unacknowledged deliveries return to their queues: after a
transfer once the old leader's sessions had `ADOPTION_WINDOW_SECONDS` to arrive
(raftmq.server.takeover), after an election at once.

`LeaderService`s (a cluster bridge, say) start once this node leads and everything of earlier
terms is applied, and stop as soon as it no longer leads (before its clients are redirected).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from raftmq.core.commands import Disconnect
from raftmq.server.seams.host import ClientConnection, LeaderService, SuccessionHost
from raftmq.server.stomp.adoption import Ticket
from raftmq.server.takeover import ADOPTION_WINDOW_SECONDS, Takeover

log = structlog.get_logger("raftmq.server.succession")

# A node that lost leadership waits this long to learn the new leader before it closes its
# clients (so the ERROR can name it); meanwhile whatever they send fails with NotLeader.
LEADER_HINT_WAIT_SECONDS = 1.0


class Succession:
    def __init__(self, host: SuccessionHost) -> None:
        self._host = host
        self._epoch = 0
        self._background: set[asyncio.Task[None]] = set()
        self._logged_leader: str | None = None  # the leader last reported as raft.leader_changed
        self._services: list[LeaderService] = []
        self._running: list[LeaderService] = []
        self.leader_changes = 0
        self.sessions_swept = 0  # Disconnects proposed for sessions of earlier leaders
        self.takeover = Takeover()
        self.stopping = False  # the node stops: its clients are told where the leader is, not handed over
        # The node goes once it handed its leadership over (a stop, a removal): the sessions it
        # hands over are parked at the successor for their clients to resume (hand_over).
        self.going = False

    def add_service(self, service: LeaderService) -> None:
        """Run `service` whenever this node leads (started at the next leadership gained, or
        now if this node already leads and has taken over)."""
        self._services.append(service)

    def lead_alone(self) -> None:
        """The log always leads (InMemoryLog): nothing will ever call `role_changed`, so the
        leader's services start now."""
        self._spawn(self._start_services())

    def role_changed(self, leader: bool) -> None:
        """The commit log's role listener: called on the loop before proposals in flight fail."""
        self.leader_changes += 1
        self._epoch += 1
        self.note_leader(force=True)
        self.takeover.reset()
        if leader:
            self.stopping = self.going = False  # a member removed, then added back, leads again
        if leader and self._host.commit_log.won_by_hand_over:
            self._expect_adoptions()
        if not leader:
            self._spawn(self._stop_services())
        if not leader and self.new_leader() is not None:
            # Before the log fails the proposals in flight, so clients read where to go.
            self.send_clients_to(self.new_leader())
            return
        if not leader:
            for session in self._host.sessions.values():
                session.hold_for_redirect()
        self._spawn(self._take_over(self._epoch) if leader else self.close_for_new_leader())

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = self._host.loop.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _take_over(self, epoch: int) -> None:
        """New leader: once everything of earlier terms is applied (an empty entry of ours has
        committed), disconnect the sessions the core still knows but this node does not
        serve; they belonged to an earlier leader. Then start the leader's services."""
        host = self._host
        try:
            await host.commit_log.propose([])
        except Exception:
            return  # lost leadership again; the next leader sweeps
        if epoch != self._epoch or not host.commit_log.is_leader:
            return
        takeover = self.takeover
        takeover.done.set()
        if host.commit_log.won_by_hand_over:
            self._expect_adoptions()  # sessions whose Connect this node applied only now
            await takeover.until(lambda: not takeover.awaiting or epoch != self._epoch,
                                 host.loop.time() + ADOPTION_WINDOW_SECONDS, host.loop)
            if epoch != self._epoch or not host.commit_log.is_leader:
                return
        stale = [session_id for session_id in host.session_ids_in_core()
                 if session_id not in host.sessions and session_id not in takeover.parked]
        takeover.swept.update(stale)
        takeover.end_window()
        if stale:
            now = host.clock.now_ms()
            try:
                await host.commit_log.propose([Disconnect(session_id, now) for session_id in stale])
            except Exception:
                return
            self.sessions_swept += len(stale)
            log.info("node.sessions_swept", node=host.name, sessions=len(stale))
        if epoch == self._epoch and host.commit_log.is_leader:
            await self._start_services()

    def _expect_adoptions(self) -> None:
        host = self._host
        self.takeover.expect(host.session_ids_in_core(), host.sessions.__contains__, host.commit_log)

    async def claim(self, session_id: str) -> str | None:
        """May this node adopt `session_id` now (a ticket arrived)? None, or why not."""
        host = self._host
        return await self.takeover.claim(
            session_id, lambda: host.commit_log.is_leader, host.sessions.__contains__,
            lambda sid: sid in host.session_ids_in_core(),
        )

    def adopt(self, session_id: str, connection: ClientConnection) -> int:
        return self.takeover.adopt(session_id, connection)

    def park(self, ticket: Ticket, unfinished: bytes) -> None:
        host = self._host
        self.takeover.park(ticket, unfinished, host.commit_log, host.loop, self._parked_too_long)

    async def claim_parked(self, session_id: str) -> tuple[Ticket, bytes] | str:
        if not self._host.commit_log.is_leader:
            return "this node does not lead its group any more"
        parked = await self.takeover.claim_parked(session_id, self._host.sessions.__contains__, self._host.loop)
        return parked if isinstance(parked, str) else (parked.ticket, parked.unfinished)

    def _parked_too_long(self, session_id: str) -> None:
        host = self._host
        if self.takeover.unpark(session_id) and host.commit_log.is_leader:
            log.info("client.park_expired", node=host.name, session=session_id)
            self.takeover.swept.add(session_id)
            self.sessions_swept += 1
            host.commit_log.propose([Disconnect(session_id, host.clock.now_ms())]).add_done_callback(_ignore)

    async def _start_services(self) -> None:
        for service in self._services:
            if service in self._running:
                continue
            try:
                await service.start()
            except Exception:
                log.exception("node.service_failed", node=self._host.name, service=service.name)
                continue
            self._running.append(service)

    async def _stop_services(self) -> None:
        running, self._running = self._running, []
        for service in reversed(running):
            try:
                await service.stop()
            except Exception:
                log.exception("node.service_failed", node=self._host.name, service=service.name)

    async def stop(self) -> None:
        await self._stop_services()

    async def close_for_new_leader(self) -> None:
        """Not the leader any more: close every client connection with an ERROR naming the
        new leader, once it is known (bounded wait)."""
        host = self._host
        # (leader again: the held sessions may have lost commands silently, so they go too)
        await self.takeover.until(
            lambda: self.new_leader() is not None or not host.sessions or host.commit_log.is_leader,
            host.loop.time() + LEADER_HINT_WAIT_SECONDS, host.loop)
        self.send_clients_to(self.new_leader(), held_only=host.commit_log.is_leader)

    def leader_changed(self) -> None:
        """The leader this node knows of may have changed: logged, and a wait for it looks again."""
        self.note_leader()
        self.takeover.changed()

    def note_leader(self, force: bool = False) -> None:
        """Log `raft.leader_changed` when the leader this node knows of is not the one it last
        reported (a follower learns of a new leader without a role change of its own)."""
        commit_log = self._host.commit_log
        leader = commit_log.leader_hint  # a client address, this node's own when it leads
        if leader == self._logged_leader and not force:
            return
        self._logged_leader = leader
        try:
            term: int | None = commit_log.status().term if commit_log.status().replicated else None
        except Exception:  # not started yet, or already stopped
            term = None
        log.info("raft.leader_changed", node=self._host.name, role="leader" if commit_log.is_leader else "follower",
                 leader=leader, term=term)

    def new_leader(self) -> str | None:
        """The leader's client address if known and not this node's own."""
        hint = self._host.commit_log.leader_hint
        own = self._host.own_client_address()
        if hint is None or own is None:
            return hint
        return None if hint == own else hint

    def send_clients_to(self, hint: str | None, held_only: bool = False) -> None:
        """Hand every session to the leader at `hint`, or close it with an ERROR naming it.
        `held_only`: this node leads again; sessions held meanwhile may have lost commands
        silently, so they are closed."""
        for session in list(self._host.sessions.values()):
            if held_only and not session.held_for_redirect:
                continue
            if hint is not None and not held_only and not self.stopping and session.hand_over(hint):
                continue  # (a session already being handed over is left to it)
            self.refuse(session, hint)

    @staticmethod
    def refuse(session: ClientConnection, hint: str | None) -> None:
        session.fail(
            "not the leader",
            f"this node is no longer the leader of its group; leader: {hint or 'unknown'}",
            extra={"leader": hint} if hint else None,
        )


def _ignore(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()  # lost leadership meanwhile: the next leader sweeps it
