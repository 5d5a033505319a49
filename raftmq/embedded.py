"""A raftmq broker inside the current Python process, for users' own tests (ActiveMQ's `vm://`).

    from raftmq.embedded import EmbeddedBroker

    with EmbeddedBroker() as broker:                 # one node, in memory, a free loopback port
        with broker.client() as client:              # a connected raftmq.client.sync.Client
            client.send("/queue/a", "hello")
            message = client.subscribe("/queue/a").receive(timeout=5)

    with EmbeddedBroker(nodes=3) as broker:          # a Raft group of three, in a temp directory
        broker.stop_node(broker.wait_for_leader())   # the clients of broker.url fail over

    with EmbeddedBroker(name="svc", data_dir="svc-data"):   # durable, and in-VM as vm://svc
        with Client.connect("vm://svc") as client:   # no socket: raftmq.vm
            client.send("/queue/a", "hello")          # the receipt: on disk

The nodes run on one asyncio event loop in a background thread owned by the broker (each
Raft member adds pysyncobj's tick thread); every method here is called from any other thread
and waits for the loop. Every node listens on 127.0.0.1 (STOMP and an admin HTTP port serving
`/status`, which `raftmq queue stat --admin` reads), on ports picked free at start.

With `name`, the broker also serves in-VM clients of this process (`vm://NAME`, raftmq.vm): the
same sessions as over its sockets, without them; a sync client of a vm:// URL runs on the
broker's loop. A group's in-VM connections are served by the member that leads when they open.

One node without `data_dir` keeps everything in memory (`InMemoryLog`). Several nodes, or
one with a `data_dir`, are a Raft group (`RaftLog`, body journal) whose files go to
`data_dir`, or to a temporary directory removed by `stop()`. A Raft member lowers the
process's GIL switch interval (see raftmq.replication.raft_log), for this whole process.

The nodes log through structlog as configured by the application; if it configured nothing,
`start()` sends their events to the standard `logging` module (shown where the application's
logging, or pytest's log capture, shows them; never printed from the broker's thread).
`raftmq.logs.configure_logging(level="warning")` sends only warnings and errors to stderr,
`json_path=...` adds a JSON-lines file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cluster.group_file import GroupConfig, GroupMember
from cluster.network_uris import parse_network
from raftmq import vm
from raftmq.client.sync import Client
from raftmq.config import NodeConfig, split_address
from raftmq.errors import EmbeddedBrokerError, NoVmBroker
from raftmq.logs import log_through_stdlib_if_unconfigured
from raftmq.processes import free_ports
from raftmq.routing.cluster_connection import ClusterView
from raftmq.server.admin.http import AdminServer
from raftmq.server.node import Node
from raftmq.server.replica.bodies import BodyStore

T = TypeVar("T")

DEFAULT_START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0  # a graceful stop of every node (hand-overs and drains are bounded inside)
LEADER_POLL_SECONDS = 0.02
LOOPBACK = "127.0.0.1"
EMBEDDED_FILE = "embedded.json"  # what a named broker with a data directory ran as (`_record`)


@dataclass
class _RunningNode:
    node: Node
    admin: AdminServer | None
    bodies: BodyStore | None  # a group member's body journal; None for the in-memory node


class EmbeddedBroker:
    """A broker running in this process until `stop()` (or the end of a `with` block).

    `config`: a `NodeConfig` holds the settings every node shares (limits, core, heart-beats);
    its host, port and name are replaced (loopback, free ports, ids n1..nN). A `GroupConfig`
    is used as it is: its members name every address, `nodes` must be left at 1 or match.
    `name`: serve in-VM clients as `vm://NAME`. `network`: ActiveMQ network-connector URIs
    (cluster.network_uris): `static:(stomp://HUB:PORT,...)?duplex=true` links it to a hub as an
    edge, `multicast://ADDRESS:PORT?group=G` finds the other brokers announcing there, peer to
    peer; the group is then called `name`; `cluster_password` signs the announcements and is the
    password of a static URI's `userName`.
    """

    def __init__(
        self,
        nodes: int = 1,
        config: NodeConfig | GroupConfig | None = None,
        data_dir: str | Path | None = None,
        *,
        admin: bool = True,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        name: str | None = None,
        network: Sequence[str] = (),
        cluster_password: str | None = None,
    ) -> None:
        if isinstance(config, GroupConfig):
            if nodes not in (1, len(config.members)):
                raise ValueError(f"nodes={nodes} but the group configuration has {len(config.members)} members")
            if data_dir is not None:
                raise ValueError("a GroupConfig names its own data_dir; do not pass data_dir too")
        elif nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {nodes}")
        if network and (name is None or data_dir is None or isinstance(config, GroupConfig)):
            raise ValueError("a broker in a network needs a name (its group's, unique in the network) and a "
                             "data_dir (what waits for the network is kept there); not a GroupConfig")
        # multicast:// URIs (cluster.network_uris): checked now, so a bad one fails the constructor
        self._network = parse_network(network, cluster_password, name or "") if network else None
        self._network_uris = tuple(network)
        self._requested_nodes = nodes
        self.name = name
        self._vm: vm.VmBroker | None = None
        self._config = config
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._admin = admin
        self.start_timeout = start_timeout
        self._group: GroupConfig | None = None
        self._single: NodeConfig | None = None
        self._temp_dir: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running: dict[str, _RunningNode] = {}
        self._node_ids: tuple[str, ...] = ()
        # The in-memory node's addresses, known once it listens (its ports are picked then).
        self._single_addresses: list[tuple[str, int]] = []
        self._single_admin: list[str] = []
        self._clients: list[Client] = []
        self._lock = threading.Lock()
        self._state = "new"  # new, running, stopped

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> EmbeddedBroker:
        """Start every node (a group: and wait until it has a leader). Raises
        `EmbeddedBrokerError` naming what failed; nothing is left running then."""
        if self._state != "new":
            raise EmbeddedBrokerError(f"start() on an embedded broker that is {self._state}")
        self._state = "running"
        log_through_stdlib_if_unconfigured()
        deadline = time.monotonic() + self.start_timeout
        try:
            self._plan()
            self._record()
            self._start_loop()
            for node_id in self._node_ids:
                self._call(self._start_node(node_id), max(0.1, deadline - time.monotonic()))
            if self._group is not None:
                self.wait_for_leader(max(0.1, deadline - time.monotonic()))
            if self.name is not None:
                assert self._loop is not None
                self._vm = vm.serve(self.name, self._loop, self._accept_in_vm)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, Exception) and not isinstance(exc, EmbeddedBrokerError):
                raise EmbeddedBrokerError(f"embedded broker did not start: {exc}") from exc
            raise
        return self

    def stop(self) -> None:
        """Close the clients `client()` handed out, stop every node (a group's leader hands
        over first), end the loop thread and remove the temporary data directory. Idempotent."""
        with self._lock:
            if self._state == "stopped":
                return
            self._state = "stopped"
            clients, self._clients = self._clients, []
        if self._vm is not None:
            vm.unserve(self._vm)  # no new in-VM connection; those open end with the nodes
            self._vm = None
        for client in clients:
            try:
                client.close()
            except Exception:  # a client already broken must not keep the broker running
                pass
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            try:
                self._call(self._stop_everything(), STOP_TIMEOUT)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(STOP_TIMEOUT)
                if not thread.is_alive():
                    loop.close()
        self._running.clear()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self) -> EmbeddedBroker:
        if self._state == "new":
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what clients need ----------------------------------------------------------------------

    @property
    def node_ids(self) -> tuple[str, ...]:
        return self._node_ids

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Every node's STOMP (host, port), stopped nodes included (they may come back)."""
        self._check_started()
        if self._group is not None:
            return [split_address(member.client) for member in self._group.members]
        return list(self._single_addresses)

    @property
    def url(self) -> str:
        """A failover URL naming every node: `failover:(stomp://127.0.0.1:P1,...)`; with a
        `name`, `vm://NAME` (the same broker without a socket)."""
        if self.name is not None:
            return f"vm://{self.name}"
        hosts = ",".join(f"stomp://{host}:{port}" for host, port in self.addresses)
        return f"failover:({hosts})"

    @property
    def admin_addresses(self) -> list[str]:
        """Every node's admin HTTP "host:port" (for `raftmq queue stat --admin`); [] without admin."""
        self._check_started()
        if self._group is not None:
            return [member.admin for member in self._group.members if member.admin is not None]
        return list(self._single_admin)

    @property
    def data_dir(self) -> Path | None:
        """Where a group keeps its files (None for the in-memory node)."""
        return Path(self._group.data_dir) if self._group is not None else None

    def client(self, **kwargs: Any) -> Client:
        """A sync client connected to `url` (keyword arguments go to `Client.connect`, e.g.
        `login=`, `timeout=`). `stop()` closes it if the caller has not."""
        self._check_running()
        client = Client.connect(self.url, **kwargs)
        with self._lock:
            if self._state != "running":
                client.close()
                raise EmbeddedBrokerError("the embedded broker stopped while the client connected")
            self._clients.append(client)  # closing twice is harmless
        return client

    # -- nodes ----------------------------------------------------------------------------------

    @property
    def running_nodes(self) -> list[str]:
        return [node_id for node_id in self._node_ids if node_id in self._running]

    def leader(self) -> str | None:
        """The id of the node that leads now (the in-memory node always does), or None."""
        self._check_running()
        return self._call(self._leader(), 5.0)

    def wait_for_leader(self, timeout: float = 10.0) -> str:
        """The leader's node id once there is one; raises `EmbeddedBrokerError` after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.leader()
            if leader is not None:
                return leader
            if time.monotonic() >= deadline:
                raise EmbeddedBrokerError(f"no leader among {', '.join(self.running_nodes) or 'no running node'} "
                                          f"within {timeout:g} s")
            time.sleep(LEADER_POLL_SECONDS)

    def status(self, node_id: str | None = None) -> dict[str, Any]:
        """A node's `/status` document (the leader's by default)."""
        self._check_running()
        node_id = node_id or self.wait_for_leader()
        return self._call(self._status(node_id), 5.0)

    def stop_node(self, node_id: str) -> None:
        """Stop one node the way SIGTERM stops a process: a leader hands leadership over and
        sends its clients to the new leader. Its files stay (`start_node` brings it back)."""
        self._check_running()
        if node_id not in self._node_ids:
            raise EmbeddedBrokerError(f"no node {node_id!r} (nodes: {', '.join(self._node_ids)})")
        self._call(self._stop_node(node_id), STOP_TIMEOUT)

    def start_node(self, node_id: str) -> None:
        """Start a node `stop_node` stopped again (a group member rejoins from its files)."""
        self._check_running()
        if node_id not in self._node_ids:
            raise EmbeddedBrokerError(f"no node {node_id!r} (nodes: {', '.join(self._node_ids)})")
        if self._group is None:
            raise EmbeddedBrokerError("the in-memory node cannot be restarted (its messages are gone); "
                                      "use nodes>1 or data_dir")
        self._call(self._start_node(node_id), self.start_timeout)

    # -- internals: planning (caller's thread) -----------------------------------------------

    def _plan(self) -> None:
        config = self._config
        if isinstance(config, GroupConfig):
            self._group = config
        elif self._requested_nodes == 1 and self._data_dir is None:
            base = config or NodeConfig()
            self._single = dataclasses.replace(base, host=LOOPBACK, port=0, name="n1")
        else:
            self._group = self._generated_group(config or NodeConfig())
        if self._group is not None:
            self._node_ids = tuple(member.id for member in self._group.members)
        else:
            self._node_ids = ("n1",)

    def _record(self) -> None:
        """A named broker with a data directory leaves `embedded.json` there: its group, its
        network URIs and its core settings, so `raftmq audit` replays its journal as it ran."""
        group = self._group
        if group is None or self.name is None or self._data_dir is None:
            return
        core = group.server.core
        table: dict[str, Any] = {f.name: getattr(core, f.name) for f in dataclasses.fields(core)
                                 if f.name not in ("addresses", "cluster")}
        table["address"] = [dataclasses.asdict(address) for address in core.addresses]
        record = {"format": 1, "group": group.name, "members": [member.id for member in group.members],
                  "network": list(self._network_uris), "core": table}
        self._data_dir.mkdir(parents=True, exist_ok=True)
        (self._data_dir / EMBEDDED_FILE).write_text(json.dumps(record, indent=2) + "\n")

    def _in_network(self, server: NodeConfig, name: str, members: tuple[GroupMember, ...]) -> NodeConfig:
        """`server` with the group's place in its network: its connections, where it announces."""
        if self._network is None:
            return server
        view = ClusterView(name, self._network.connections)
        return dataclasses.replace(server, core=dataclasses.replace(server.core, cluster=view),
                                   cluster_broadcast=self._network.broadcast,
                                   cluster_group_clients=tuple(member.client for member in members),
                                   cluster_hubs_file=str(self._data_dir / "hubs.json") if self._data_dir else None)

    def _generated_group(self, server: NodeConfig) -> GroupConfig:
        if self._data_dir is None:
            self._temp_dir = Path(tempfile.mkdtemp(prefix="raftmq-embedded-"))
        data_dir = self._data_dir or self._temp_dir
        assert data_dir is not None
        count = self._requested_nodes
        ports = free_ports(3 * count)
        members = tuple(
            GroupMember(
                id=f"n{i + 1}",
                client=f"{LOOPBACK}:{ports[3 * i]}",
                raft=f"{LOOPBACK}:{ports[3 * i + 1]}",
                admin=f"{LOOPBACK}:{ports[3 * i + 2]}" if self._admin else None,
            )
            for i in range(count)
        )
        name = self.name or "embedded"
        return GroupConfig(name=name, data_dir=str(data_dir), members=members,
                           server=self._in_network(server, name, members))

    def _start_loop(self) -> None:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="raftmq-embedded-loop", daemon=True)
        self._loop, self._thread = loop, thread
        thread.start()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        loop = self._loop
        if loop is None or loop.is_closed() or threading.current_thread() is self._thread:
            coro.close()
            raise EmbeddedBrokerError("the embedded broker's loop is not running (or was called from its own thread)")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"embedded broker: no result within {timeout:g} s") from None

    def _check_started(self) -> None:
        if not self._node_ids:
            raise EmbeddedBrokerError("the embedded broker is not started")

    def _check_running(self) -> None:
        if self._state != "running":
            raise EmbeddedBrokerError(f"the embedded broker is {self._state}")

    # -- internals: on the loop -------------------------------------------------------------------

    async def _start_node(self, node_id: str) -> None:
        if node_id in self._running:
            raise EmbeddedBrokerError(f"node {node_id} is already running")
        running = self._open_group_member(node_id) if self._group is not None else self._open_single()
        try:
            await running.node.start()
            if running.admin is not None:
                await running.admin.start()
        except BaseException:
            await self._close(running)
            raise
        self._running[node_id] = running
        if self._group is None:
            self._single_addresses = [running.node.address]
            self._single_admin = [f"{LOOPBACK}:{running.admin.port}"] if running.admin is not None else []

    def _open_single(self) -> _RunningNode:
        assert self._single is not None
        node = Node(self._single)
        admin = AdminServer(node.status, None, None, LOOPBACK, 0) if self._admin else None
        return _RunningNode(node, admin, None)

    def _open_group_member(self, node_id: str) -> _RunningNode:
        from raftmq.app.group import open_member

        assert self._group is not None
        member = open_member(self._group, node_id)
        return _RunningNode(member.node, member.admin, member.bodies)

    async def _stop_node(self, node_id: str) -> None:
        running = self._running.pop(node_id, None)
        if running is None:
            raise EmbeddedBrokerError(f"node {node_id} is not running")
        await self._close(running)

    async def _close(self, running: _RunningNode) -> None:
        try:
            if running.admin is not None:
                await running.admin.stop()
            await running.node.stop()
        finally:
            if running.bodies is not None:
                running.bodies.close()

    async def _stop_everything(self) -> None:
        # Leader first: it hands over to a caught-up follower at once. A leader stopped last,
        # with no follower left, would wait out its hand-over and drain timeouts instead.
        while self._running:
            leader = await self._leader()
            node_id = leader if leader is not None else next(iter(self._running))
            try:
                await self._stop_node(node_id)
            except Exception:
                pass  # a node that fails to stop cleanly must not keep the others running
        current = asyncio.current_task()
        leftovers = [task for task in asyncio.all_tasks() if task is not current]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)
        loop = asyncio.get_running_loop()
        await loop.shutdown_asyncgens()
        await loop.shutdown_default_executor()

    def _accept_in_vm(self) -> asyncio.Protocol:
        """(On the loop.) A new in-VM connection: the leader serves it, or any running member
        (it relays the session to the leader)."""
        best: tuple[int, Node] | None = None
        for running in self._running.values():
            log = running.node.commit_log
            if log.is_leader and (best is None or log.status().term > best[0]):
                best = (log.status().term, running.node)
        if best is None and not self._running:
            raise NoVmBroker(f"the in-VM broker {self.name!r} has no running node")
        node = best[1] if best is not None else next(iter(self._running.values())).node
        return node.accept_in_vm()

    async def _leader(self) -> str | None:
        best: tuple[int, str] | None = None
        for node_id, running in self._running.items():
            node = running.node
            if node.commit_log.is_leader:
                term = node.commit_log.status().term
                if best is None or term > best[0]:
                    best = (term, node_id)
        return None if best is None else best[1]

    async def _status(self, node_id: str) -> dict[str, Any]:
        running = self._running.get(node_id)
        if running is None:
            raise EmbeddedBrokerError(f"node {node_id} is not running")
        return running.node.status()
