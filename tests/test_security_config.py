"""The security tables of node and group files: what loads, and an error naming file and key
for everything that must not."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cluster.group_file import GroupConfig, load_group_config
from raftmq.app.group import raft_settings
from raftmq.config import NodeConfig, load_node_config
from raftmq.errors import ConfigError
from raftmq.passwords import hash_password, parse_hash, verify_password
from raftmq.security import AclEntry, Security, SecurityConfig

REPO = Path(__file__).resolve().parents[1]
HASH = hash_password("pw", n=16, r=1, p=1)
USER = f'[[user]]\nname = "app"\npassword_hash = "{HASH}"\ngroups = ["producers"]\n'


def write(tmp_path: Path, text: str, name: str = "node.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_no_security_tables_is_the_open_broker() -> None:
    assert load_node_config(REPO / "configs" / "node.toml").security == SecurityConfig()
    assert NodeConfig().security == SecurityConfig()


def test_users_and_acl_load(tmp_path: Path) -> None:
    text = USER + '[[acl]]\nqueue = "orders.>"\nwrite = ["producers"]\nadmin = ["producers"]\n'
    security = load_node_config(write(tmp_path, text)).security
    assert security.authentication and not security.allow_anonymous and security.authorization
    assert [u.name for u in security.users] == ["app"] and security.users[0].groups == ("producers",)
    assert security.acl == (AclEntry("queue", "orders.>", (), ("producers",), ("producers",)),)


def test_shipped_secure_preset_loads_and_its_demo_passwords_verify() -> None:
    security = load_node_config(REPO / "configs" / "secure-node.toml").security
    passwords = {"admin": "demo-admin", "app": "demo-app", "reader": "demo-reader"}
    assert {user.name for user in security.users} == set(passwords)
    for user in security.users:
        assert verify_password(passwords[user.name], parse_hash(user.password_hash))
    app = Security(security).login("app", "demo-app")
    assert app is not None
    assert Security(security).refusal(app, "write", "/queue/orders.eu", exists=False) is None


def test_anonymous_only_broker(tmp_path: Path) -> None:
    text = '[security]\nauthentication = true\nallow_anonymous = true\nanonymous_groups = ["guests"]\n' \
           '[[acl]]\ntopic = "news.*"\nread = ["guests"]\n'
    security = load_node_config(write(tmp_path, text)).security
    assert security.authentication and security.allow_anonymous and security.anonymous_groups == ("guests",)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[security]\nauthentification = true\n", r"node\.toml: unknown key security\.authentification"),
        ("[security]\nauthentication = 'yes'\n", r"security\.authentication must be true or false"),
        ("[security]\nauthentication = true\n", r"security\.authentication is true but there is no \[\[user\]\]"),
        ("[security]\nauthentication = false\n" + USER, r"security\.authentication = false but \[\[user\]\]"),
        ("[security]\nanonymous_groups = 'guests'\n", r"security\.anonymous_groups must be a list of group names"),
        ("security = 1\n", r"'security' must be a table"),
        ("user = 1\n", r"'user' must be an array of tables \(\[\[user\]\]\)"),
        ("[user]\nname = 'a'\n", r"'user' must be an array of tables"),
        ('[[user]]\nname = "a"\npassword = "hunter2"\n',
         r"user\[0\]\.password: plaintext passwords are not accepted; set user\[0\]\.password_hash .*raftmq passwd"),
        ('[[user]]\nname = "a"\npassword_hash = "hunter2"\n',
         r"user\[0\]\.password_hash: not a raftmq password hash .*raftmq passwd"),
        ('[[user]]\nname = "a"\npassword_hash = 7\n', r"user\[0\]\.password_hash must be a non-empty string, got int$"),
        ('[[user]]\nname = "a"\n', r"user\[0\]\.password_hash is required"),
        (f'[[user]]\npassword_hash = "{HASH}"\n', r"user\[0\]\.name is required"),
        (f'[[user]]\nname = "a"\npassword_hash = "{HASH}"\nrole = "x"\n', r"unknown key user\[0\]\.role"),
        (f'[[user]]\nname = "a"\npassword_hash = "{HASH}"\ngroups = "admins"\n', r"user\[0\]\.groups must be a list"),
        (USER + USER, r"user\[1\]\.name 'app' is used by another \[\[user\]\]"),
        (USER + '[[acl]]\nread = ["producers"]\n', r"acl\[0\]: give exactly one of queue"),
        (USER + '[[acl]]\nqueue = "a"\ntopic = "b"\n', r"acl\[0\]: give exactly one of queue"),
        (USER + '[[acl]]\nqueue = "a"\nbrowse = ["producers"]\n', r"unknown key acl\[0\]\.browse"),
        (USER + '[[acl]]\nqueue = "ord*"\n', r"acl\[0\]\.queue: a wildcard must be a whole element"),
        (USER + '[[acl]]\ntopic = "a.>.b"\n', r"acl\[0\]\.topic: '>' must be the last element"),
        (USER + '[[acl]]\nqueue = "/queue/orders"\n', r"acl\[0\]\.queue: a name pattern without the /queue/ prefix"),
        (USER + '[[acl]]\nqueue = "a"\nwrite = ["producer"]\n', r"acl\[0\]\.write: group 'producer' has no member"),
        (USER + '[[acl]]\nqueue = "a"\n[[acl]]\nqueue = "a"\n', r"acl\[1\]\.queue 'a' is also acl\[0\]"),
        ("[tls]\ncert_file = 'c.pem'\n", r"tls\.key_file is required"),
        ("[tls]\ncert_file = 'missing.pem'\nkey_file = 'missing.key'\n",
         r"tls\.cert_file: file .*missing\.pem not found"),
        ("[tls]\ncert_file = 'c.pem'\nkey_file = 'c.pem'\nverify = true\n", r"unknown key tls\.verify"),
    ],
)
def test_errors_name_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "c.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=expected) as info:
        load_node_config(write(tmp_path, text))
    assert "hunter2" not in str(info.value)  # a secret pasted in the wrong place is never echoed


def test_tls_file_that_is_not_pem(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=r"tls: cannot load tls\.cert_file .*c\.pem"):
        load_node_config(write(tmp_path, "[tls]\ncert_file = 'c.pem'\nkey_file = 'c.pem'\n"))
    with pytest.raises(ConfigError, match=r"tls\.require_client_cert = true needs tls\.ca_file"):
        load_node_config(write(tmp_path,
                               "[tls]\ncert_file = 'c.pem'\nkey_file = 'c.pem'\nrequire_client_cert = true\n"))


def test_security_key_inside_node_table_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"node\.security: use a \[security\] table instead"):
        load_node_config(write(tmp_path, "[node]\nsecurity = {}\n"))


# -- group files --------------------------------------------------------------------------------------

GROUP = """[group]
name = "g"
data_dir = "data"
password_env = "RAFTMQ_TEST_GROUP_SECRET"
[[node]]
id = "n1"
client = "127.0.0.1:7001"
raft = "127.0.0.1:7101"
"""


def test_group_members_share_the_security_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFTMQ_TEST_GROUP_SECRET", "raft-secret-value")
    text = GROUP + USER + '[[acl]]\ntopic = "t.*"\nread = ["producers"]\n'
    group = load_group_config(write(tmp_path, text, "group.toml"))
    assert isinstance(group, GroupConfig)
    assert group.password == "raft-secret-value"
    security = group.node_config("n1").security
    assert [u.name for u in security.users] == ["app"] and security.acl[0].pattern == "t.*"
    assert "raft-secret-value" not in repr(group)
    assert HASH not in repr(group)


def test_group_password_from_the_file_is_not_in_the_repr(tmp_path: Path) -> None:
    text = GROUP.replace('password_env = "RAFTMQ_TEST_GROUP_SECRET"', 'password = "inline-secret"')
    group = load_group_config(write(tmp_path, text, "group.toml"))
    assert group.password == "inline-secret"
    assert "inline-secret" not in repr(group) and "inline-secret" not in str(group)
    settings = raft_settings(group, "n1")  # what the Raft log is built from
    assert settings.password == "inline-secret" and "inline-secret" not in repr(settings)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ('[server]\nsecurity = {}\n', r"server\.security: set by a \[security\] table"),
        ('[[user]]\nname = "a"\npassword = "hunter2"\n', r"group\.toml: user\[0\]\.password: plaintext passwords"),
        ("[tls]\ncert_file = 'nope.pem'\nkey_file = 'nope.key'\n",
         r"group\.toml: tls\.cert_file: file .*nope\.pem not found"),
    ],
)
def test_group_file_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str, expected: str) -> None:
    monkeypatch.setenv("RAFTMQ_TEST_GROUP_SECRET", "x")
    with pytest.raises(ConfigError, match=expected):
        load_group_config(write(tmp_path, GROUP + extra, "group.toml"))


def test_tls_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    # A real certificate is made by the server tests; here only the path handling matters.
    nested = tmp_path / "conf"
    nested.mkdir()
    (nested / "c.pem").write_text("x")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)  # not the config's directory
        with pytest.raises(ConfigError, match=r"cannot load tls\.cert_file " + re.escape(str(nested / "c.pem"))):
            load_node_config(write(nested, "[tls]\ncert_file = 'c.pem'\nkey_file = 'c.pem'\n"))
    finally:
        os.chdir(cwd)
