from __future__ import annotations

from pathlib import Path

import pytest

from raftmq.config import NodeConfig, load_node_config, split_address
from raftmq.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def test_shipped_preset_loads_and_matches_defaults() -> None:
    assert load_node_config(REPO / "configs" / "node.toml") == NodeConfig()


def test_values_reach_nested_sections(tmp_path: Path) -> None:
    config = load_node_config(write(tmp_path,
                                    "[node]\nport = 7000\n[core]\nmax_delivery_count = 3\n[limits]\nmax_headers = 9\n"))
    assert (config.port, config.core.max_delivery_count, config.limits.max_headers) == (7000, 3, 9)
    origins = load_node_config(write(tmp_path, "[node]\nwebsocket_origins = ['https://app.example', 'loopback']\n"))
    assert origins.websocket_origins == ("https://app.example", "loopback")
    guard = load_node_config(write(tmp_path, "[node]\nadmin_origins = ['https://admin.example']\n"
                                             "host_names = ['broker.example', '[::1]']\n"))
    assert (guard.admin_origins, guard.host_names) == (("https://admin.example",), ("broker.example", "[::1]"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[node]\nprot = 1\n", r"node\.toml: unknown key node\.prot"),
        ("[nodes]\nport = 1\n", r"node\.toml: unknown table or key 'nodes'"),
        ("[node]\nport = 'x'\n", r"node\.toml: node\.port must be int, got str 'x'"),
        ("[node]\nport = -1\n", r"node\.port must not be negative"),
        ("[core]\nmax_delivery_count = true\n", r"core\.max_delivery_count must be int"),
        ("[core]\npage_size = -1\n", r"node\.toml: core\.page_size must not be negative"),
        ("[[core.address]]\nmatch = '/queue/>'\naddress_full_policy = 'block'\n",
         r"node\.toml: core\.address\[0\]: address_full_policy must be one of PAGE, BLOCK, FAIL, DROP, got 'block'"),
        ("[[core.address]]\nmatch = 'orders'\n", r"core\.address\[0\]: match must start with /queue/ or /topic/"),
        ("[[core.address]]\nmatch = '/queue/a.>.b'\n", r"core\.address\[0\]: '>' must be the last element"),
        ("[[core.address]]\nmax_size_messages = 5\n", r"core\.address\[0\]\.match is missing"),
        ("[[core.address]]\nmatch = '/queue/a'\nmax_size = 5\n", r"unknown key core\.address\[0\]\.max_size "),
        ("node = 3\n", r"'node' must be a table"),
        ("[node\n", r"node\.toml: not valid TOML"),
        ("[node]\nfollower_clients = 'Relay'\n",
         r"node\.toml: node\.follower_clients must be one of 'relay', 'redirect'"),
        ("[node]\nwebsocket_origins = 'loopback'\n",
         r"node\.websocket_origins must be a list of strings, got str"),
        ("[node]\nwebsocket_origins = ['app.example.com']\n",
         r"node\.websocket_origins: 'app.example.com' is not an origin"),
        ("[node]\nwebsocket_origins = ['https://app.example/path']\n", r"is not an origin"),
        ("[node]\nwebsocket = '61614'\n", r"node\.toml: node\.websocket: expected host:port"),
        ("[node]\nmqtt = '1883'\n", r"node\.toml: node\.mqtt: expected host:port"),
        ("[node]\nadmin_origins = ['admin.example']\n",
         r"node\.toml: node\.admin_origins: 'admin.example' is not an origin"),
        ("[node]\nadmin_origins = 'https://admin.example'\n", r"node\.admin_origins must be a list of strings"),
        ("[node]\nhost_names = ['https://broker.example']\n",
         r"node\.toml: node\.host_names: 'https://broker.example' is not a host name"),
        ("[node]\nhost_names = ['broker.example:8161']\n",
         r"node\.host_names: 'broker.example:8161' is not a host name"),
    ],
)
def test_errors_name_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_node_config(write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_node_config(tmp_path / "nope.toml")


# -- group files ------------------------------------------------------------------------------

from cluster.group_file import GroupConfig, JournalSettings, is_group_file, load_config, load_group_config  # noqa: E402
from raftmq.config import RaftTimings  # noqa: E402

GROUP = """
[group]
name = "g"
data_dir = "/tmp/raftmq-g"
[[node]]
id = "a"
client = "127.0.0.1:7001"
raft = "127.0.0.1:7101"
admin = "127.0.0.1:7201"
[[node]]
id = "b"
client = "127.0.0.1:7002"
raft = "127.0.0.1:7102"
"""


def write_group(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "group.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["group", "group1", "group5"])
def test_shipped_group_presets_load(name: str) -> None:
    path = REPO / "configs" / f"{name}.toml"
    assert is_group_file(path)
    group = load_config(path)
    assert isinstance(group, GroupConfig)
    assert len(group.members) == {"group": 3, "group1": 1, "group5": 5}[name]
    assert group.raft == RaftTimings() and group.journal == JournalSettings()
    assert group.server.core == NodeConfig().core and group.password is None
    first = group.node_config("n1")
    assert (first.host, first.port, first.name) == ("127.0.0.1", 61613, "n1")


def test_group_file_fills_every_member(tmp_path: Path) -> None:
    text = GROUP + ("[raft]\nelection_timeout_min_ms = 500\nelection_timeout_max_ms = 900\n"
                    "[server]\ntick_interval_ms = 250\n[core]\nmax_delivery_count = 4\n")
    group = load_group_config(write_group(tmp_path, text))
    assert [m.id for m in group.members] == ["a", "b"]
    assert group.members[1].admin is None
    assert (group.raft.election_timeout_min_ms, group.raft.election_timeout_max_ms) == (500, 900)
    b = group.node_config("b")
    assert (b.host, b.port, b.name, b.tick_interval_ms, b.core.max_delivery_count) == ("127.0.0.1", 7002, "b", 250, 4)
    assert group.member_dir("a") == Path("/tmp/raftmq-g/a")
    with pytest.raises(ConfigError, match=r"no member 'c' \(members: a, b\)"):
        group.member("c")


def test_a_single_node_file_is_not_a_group(tmp_path: Path) -> None:
    path = write(tmp_path, "[node]\nport = 7000\n")
    assert not is_group_file(path)
    assert load_config(path) == NodeConfig(port=7000)
    with pytest.raises(ConfigError, match=r"\[\[node\]\] tables describe a group"):
        load_node_config(write_group(tmp_path, GROUP))


def test_password_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = GROUP.replace('name = "g"', 'name = "g"\npassword_env = "RAFTMQ_TEST_PW"')
    monkeypatch.setenv("RAFTMQ_TEST_PW", "s3cret")
    assert load_group_config(write_group(tmp_path, text)).password == "s3cret"
    monkeypatch.delenv("RAFTMQ_TEST_PW")
    with pytest.raises(ConfigError, match=r"group\.toml: group\.password_env names \$RAFTMQ_TEST_PW, which is not set"):
        load_group_config(write_group(tmp_path, text))
    # Another group's member reads this file for its addresses only: no password needed then,
    # and whoever needs it later is told.
    neighbour = load_group_config(write_group(tmp_path, text), require_password=False)
    assert neighbour.password is None and neighbour.members
    with pytest.raises(ConfigError,
                       match=r"group\.toml: \$RAFTMQ_TEST_PW: group\.password_env names a variable that is not set"):
        neighbour.require_password()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda t: t.replace('name = "g"\n', ""), r"group\.toml: group\.name is required"),
        (lambda t: t.replace("[group]", "[group]\ncolour = 1"), r"unknown key group\.colour"),
        (lambda t: t + "[raft]\ntick_ms = 5\n", r"unknown key raft\.tick_ms"),
        (lambda t: t + "[raft]\nelection_timeout_min_ms = '300'\n",
         r"raft\.election_timeout_min_ms must be int, got str"),
        (lambda t: t + "[raft]\nelection_timeout_max_ms = 200\n", r"raft\.election_timeout_max_ms must exceed"),
        (lambda t: t + "[raft]\nmax_entry_bytes = 33554432\n", r"raft\.max_entry_bytes must be below"),
        (lambda t: t + "[raft]\nentry_format = 4\n", r"group\.toml: raft\.entry_format must be 1, 2 or 3, got 4"),
        (lambda t: t + "[raft]\nsettle_wait_ms = 6\n",
         r"group\.toml: raft\.settle_wait_ms must be between 0 and raft\.tick_period_ms"),
        (lambda t: t + "[raft]\nsettle_wait_ms = -1\n", r"raft\.settle_wait_ms must be between 0"),
        (lambda t: t + "[journal]\nsegment_bytes = 0\n", r"journal\.segment_bytes must be positive"),
        (lambda t: t + "[server]\nport = 1\n", r"server\.port: set by each \[\[node\]\]"),
        (lambda t: t + "[server]\nmqtt = '127.0.0.1:1883'\n",
         r"server\.mqtt: set by each \[\[node\]\] \(id, client, admin, mqtt\)"),
        (lambda t: t.replace('client = "127.0.0.1:7002"', 'client = "127.0.0.1:7002"\nmqtt = "nowhere"'),
         r"node\[1\]\.mqtt: expected host:port"),
        (lambda t: t + "[wat]\n", r"unknown table or key 'wat'"),
        (lambda t: t.replace('id = "b"', 'id = "a"'), r"node\[1\]\.id 'a' is used by another"),
        (lambda t: t.replace('id = "b"', 'id = "../b"'), r"node\[1\]\.id '\.\./b': use letters"),
        (lambda t: t.replace('raft = "127.0.0.1:7102"', 'raft = "127.0.0.1:7101"'),
         r"node\[1\]\.raft 127\.0\.0\.1:7101 is also node\[0\]\.raft"),
        (lambda t: t.replace('client = "127.0.0.1:7002"', 'client = "nowhere"'),
         r"node\[1\]\.client: expected host:port"),
        (lambda t: t.replace('client = "127.0.0.1:7002"\n', ""), r"node\[1\]\.client is required"),
        (lambda t: t.replace("[[node]]", "[[node]]\nport = 1", 1), r"unknown key node\[0\]\.port"),
        (lambda t: t[: t.index("[[node]]")], r"needs at least one \[\[node\]\]"),
        (lambda t: t.replace("[group]", "[groups]"), r"unknown table or key 'groups'"),
        (lambda t: t + "[server]\nfollower_clients = 'proxy'\n",
         r"group\.toml: server\.follower_clients must be one of 'relay', 'redirect', got 'proxy'"),
    ],
)
def test_group_errors_name_file_and_key(tmp_path: Path, edit, expected: str) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError, match=expected):
        load_group_config(write_group(tmp_path, edit(GROUP)))


def test_message_ids_are_unique_per_group_by_default(tmp_path: Path) -> None:
    """Each group mints ids `<broker_name>-<n>`; two groups that exchange messages must not
    collide, so broker_name defaults to the group's name (a node: its own name)."""
    from cluster.group_file import single_node_group

    group = load_group_config(write_group(tmp_path, GROUP))
    assert {group.node_config(m.id).core.broker_name for m in group.members} == {"g"}
    named = load_group_config(write_group(tmp_path, GROUP + '[core]\nbroker_name = "orders"\n'))
    assert named.node_config("a").core.broker_name == "orders"
    solo = single_node_group(NodeConfig(name="edge1"))
    assert solo.node_config("edge1").core.broker_name == "edge1"


def test_address_settings_load_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text("[core]\nglobal_max_size_bytes = 1000000\n\n"
                    "[[core.address]]\nmatch = '/queue/orders.>'\nmax_size_messages = 10\n"
                    "address_full_policy = 'BLOCK'\n\n"
                    "[[core.address]]\nmatch = '/topic/>'\nmax_size_bytes = 4096\naddress_full_policy = 'DROP'\n")
    core = load_config(path).core
    assert [(a.match, a.max_size_messages, a.max_size_bytes, a.address_full_policy) for a in core.addresses] == [
        ("/queue/orders.>", 10, 0, "BLOCK"), ("/topic/>", 0, 4096, "DROP")]
    assert core.global_max_size_bytes == 1_000_000


@pytest.mark.parametrize(("text", "expected"), [("127.0.0.1:61613", ("127.0.0.1", 61613)),
                                                ("[::1]:61613", ("::1", 61613)),
                                                ("node-1.example:1", ("node-1.example", 1))])
def test_a_node_option_reads_an_address_as_a_configuration_file_does(text: str, expected: tuple[str, int]) -> None:
    from raftmq.node_cli import _parse_listen

    assert _parse_listen(text) == split_address(text) == expected


@pytest.mark.parametrize("text", ["61613", ":61613", "host:", "host:0", "host:65536", "host:http"])
def test_a_node_option_refuses_what_is_no_address(text: str) -> None:
    import click

    from raftmq.node_cli import _parse_listen

    with pytest.raises(click.BadParameter, match="expected HOST:PORT"):
        _parse_listen(text, "--admin")
