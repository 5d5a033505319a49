"""A 3-member group whose file holds users and the Raft password: logins work on the leader,
and neither the password nor a passcode shows up in what a running member logs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from raftmq.client import connect_failover
from raftmq.client.admin import AdminAccess
from raftmq.errors import BrokerRefused
from raftmq.passwords import hash_password
from tests.helpers.group_harness import Group
from tests.helpers.stomp_raw import unique

RAFT_PASSWORD = "raft-secret-Zq81"
PASSCODE = "member-login-Xy42"


@pytest.mark.integration
def test_login_on_a_group_leader_and_no_secret_in_the_logs(tmp_path: Path) -> None:
    group = Group(tmp_path)
    text = group.config_path.read_text().replace('name = "test"\n', f'name = "test"\npassword = "{RAFT_PASSWORD}"\n', 1)
    text += f'[[user]]\nname = "app"\npassword_hash = "{hash_password(PASSCODE)}"\ngroups = ["apps"]\n'
    text += '[[acl]]\nqueue = "app.>"\nread = ["apps"]\nwrite = ["apps"]\nadmin = ["apps"]\n'
    group.config_path.write_text(text)
    group.admin_access = AdminAccess(login="app", passcode=PASSCODE)  # /status needs a login
    try:
        group.start()
        leader = group.leader()
        url = "failover:(" + ",".join(f"stomp://{m.client}" for m in group.members.values()) + ")?randomize=false"

        async def scenario() -> None:
            client = await connect_failover(url, login="app", passcode=PASSCODE)
            assert client.address is not None and client.address.port == group.members[leader].client_port
            destination = unique("/queue/app.orders")
            subscription = client.subscribe(destination, ack="client-individual")
            await client.send(destination, b"through the leader")
            delivery = await asyncio.wait_for(subscription.get(), 10)
            assert delivery.body == b"through the leader"
            with pytest.raises(BrokerRefused, match="access denied"):
                await client.send(unique("/queue/other"), b"no acl entry")
            await client.close()
            with pytest.raises(BrokerRefused, match="access refused"):
                await connect_failover(url, login="app", passcode="not-" + PASSCODE)

        asyncio.run(scenario())
    finally:
        group.close()
    logs = [member.stderr() for member in group.members.values()]
    logs += [path.read_text(errors="replace") for path in group.data_dir.rglob("*.log*") if path.is_file()]
    assert any("client.login_refused" in text for text in logs)  # the members did log, and this
    for text in logs:
        assert RAFT_PASSWORD not in text and PASSCODE not in text
