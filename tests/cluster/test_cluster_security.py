"""A cluster whose groups require logins: bridges log in as the cluster user, applications'
messages still travel, and nobody else may tell a group what the others have."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from raftmq.client import connect_failover
from raftmq.client.admin import AdminAccess
from raftmq.errors import BrokerRefused, ClientError
from raftmq.passwords import hash_password
from raftmq.routing.bindings import Advert, encode_advert
from raftmq.routing.route import ADVERT_HEADER, CONTROL_DESTINATION
from tests.helpers.cluster_harness import Cluster, sync

pytestmark = pytest.mark.integration

APP_PASSCODE = "app-login-Qw31"
CLUSTER_PASSCODE = "cluster-login-Zx82"


def secure(cluster: Cluster) -> None:
    for group in cluster.groups.values():
        text = group.config_path.read_text()
        text += f'[[user]]\nname = "app"\npassword_hash = "{hash_password(APP_PASSCODE)}"\ngroups = ["apps"]\n'
        text += (f'[[user]]\nname = "cluster"\npassword_hash = "{hash_password(CLUSTER_PASSCODE)}"\n'
                 'groups = ["bridges"]\n')
        text += ('[[acl]]\nqueue = "orders.>"\nread = ["apps"]\nwrite = ["apps", "bridges"]\n'
                 'admin = ["apps", "bridges"]\n')
        text += '[[acl]]\nqueue = "$.raftmq.>"\nwrite = ["apps", "bridges"]\nadmin = ["bridges"]\n'
        group.config_path.write_text(text)
        group.admin_access = AdminAccess(login="app", passcode=APP_PASSCODE)  # /status needs a login


def failover_url(cluster: Cluster, group: str) -> str:
    return "failover:(" + ",".join(f"stomp://{h}:{p}" for h, p in cluster.addresses(group)) + ")"


@sync
async def test_bridges_log_in_as_the_cluster_user_and_only_it_may_advertise(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, ["g1", "g2"], cluster_user="cluster", cluster_password=CLUSTER_PASSCODE)
    secure(cluster)
    try:
        cluster.start()
        cluster.wait_links()
        g1, g2 = failover_url(cluster, "g1"), failover_url(cluster, "g2")
        consumer = await connect_failover(g2, login="app", passcode=APP_PASSCODE)
        subscription = consumer.subscribe("/queue/orders.eu", ack="client-individual")
        await asyncio.sleep(1.0)
        producer = await connect_failover(g1, login="app", passcode=APP_PASSCODE)
        await producer.send("/queue/orders.eu", b"across", receipt=True)
        delivery = await asyncio.wait_for(subscription.get(), 15)
        assert delivery.body == b"across"
        await consumer.ack(delivery)
        forged = Advert("g1", 1 << 40, (("g1", 1),), ())
        with pytest.raises((BrokerRefused, ClientError)):
            await producer.send(CONTROL_DESTINATION, b"", [(ADVERT_HEADER, encode_advert(forged))], receipt=True)
        await producer.close()
        await consumer.close()
    finally:
        cluster.close()


@sync
async def test_a_forward_the_neighbours_acl_refuses_inside_a_batch_is_dead_lettered_and_the_rest_arrive_once(
        tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, ["g1", "g2"], cluster_user="cluster", cluster_password=CLUSTER_PASSCODE,
                      message_load_balancing="ON_DEMAND")
    secure(cluster)
    for group in cluster.groups.values():  # apps may use secret.>, the bridges may not send there
        text = group.config_path.read_text()
        text += '[[acl]]\nqueue = "secret.>"\nread = ["apps"]\nwrite = ["apps"]\nadmin = ["apps"]\n'
        group.config_path.write_text(text + "[core]\nmax_delivery_count = 1\n")
    try:
        cluster.start()
        cluster.wait_links()
        g1, g2 = failover_url(cluster, "g1"), failover_url(cluster, "g2")
        consumer = await connect_failover(g2, login="app", passcode=APP_PASSCODE)
        orders = consumer.subscribe("/queue/orders.eu", ack="client-individual")
        consumer.subscribe("/queue/secret.x", ack="client-individual")
        await asyncio.sleep(1.0)  # both subscriptions advertised to g1: everything goes to g2
        producer = await connect_failover(g1, login="app", passcode=APP_PASSCODE)
        sends = [producer.send_nowait("/queue/secret.x" if i in (50, 150, 250) else "/queue/orders.eu",
                                      f"m{i}".encode(), receipt=True) for i in range(300)]
        await asyncio.gather(*sends)
        got: list[bytes] = []
        while len(got) < 297:
            delivery = await asyncio.wait_for(orders.get(), 20)
            got.append(delivery.body)
            await consumer.ack(delivery)
        assert sorted(got) == sorted(f"m{i}".encode() for i in range(300) if i not in (50, 150, 250))

        def link() -> dict[str, Any]:
            status = cluster.cluster_status("g1") or {}
            return next((dict(item) for item in status.get("links", []) if item.get("to") == "g2"), {})

        deadline = asyncio.get_running_loop().time() + 10
        while link().get("refused") != 3 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        # Refused inside a batch: forwarded first (then the store path's refusals count), or from the queue.
        assert link()["refused"] == 3 and (link()["batches"] >= 1 or link()["forwarded_first"] >= 1), link()
        assert cluster.queue_depths("/queue/DLQ").get("g1") == 3
        with pytest.raises(TimeoutError):  # and nothing twice
            await asyncio.wait_for(orders.get(), 1.0)
        await producer.close()
        await consumer.close()
    finally:
        cluster.close()
