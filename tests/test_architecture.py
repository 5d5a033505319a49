"""The shape of the code base, checked: layers import only downward, no import circles, the
sans-I/O modules load no I/O library, the node's rooms import one way, and modules are small
enough to read in one sitting (docs/architecture.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
# cluster/: the deployment's files, read; chaos/: fault runs; spark_audit/: the audit of their data
PACKAGES = ("raftmq", "cluster", "chaos", "spark_audit")
# The test and proof tools and their libraries: the broker (raftmq.*) never imports them, so a
# node process runs without them (raftmq.cli names their commands as strings, loaded on use).
TOOLS = ("chaos", "spark_audit", "plotly", "pyspark")

# Lower ranks are lower layers; a module may import modules of its own rank or lower.
RANKS = {
    "raftmq.errors": 0,
    "raftmq.clock": 0,
    "raftmq.processes": 0,
    "raftmq.packing": 0,
    "raftmq.values": 0,
    "raftmq.hot_values": 0,
    "raftmq.compiled": 0,  # which build of the hot modules runs; the package's __init__ asks it first
    "raftmq.patterns": 0,  # destination-name patterns: the ACL, address settings and routing read them
    # what a web page may make a node do (Host, Origin, tokens): pure, the admin port and WebSocket ask it
    "raftmq.web_guard": 0,
    "raftmq.protocol": 1,
    "raftmq.vm": 1,  # in-VM connections: the clients dial what an embedded broker serves
    "raftmq.routing": 1,  # cluster connections' pure decisions; the core routes with them
    "raftmq.core": 1,
    "raftmq.passwords": 1,
    "raftmq.logs": 1,
    "raftmq.config": 2,
    "cluster": 2,  # the deployment's files (group, members, topology); reads with raftmq.config
    "raftmq.security_config": 2,
    "raftmq.security": 2,
    "raftmq.tls": 2,  # TLS contexts from [tls]: the ports' and a member's towards another member
    "raftmq.storage": 2,
    "raftmq.client": 3,
    "raftmq.replication": 3,
    "raftmq.server": 4,  # the node's wiring (node, succession, ticker, rates) over its rooms:
    # the rooms are packages of their own, so the package-circle test holds them to one-way imports
    "raftmq.server.seams": 4,
    "raftmq.server.stomp": 4,
    "raftmq.server.replica": 4,
    "raftmq.server.links": 4,
    "raftmq.server.websocket": 4,  # the WebSocket layer under the STOMP session
    "raftmq.server.mqtt": 4,  # the MQTT edge: its sans-I/O session and its shell
    "raftmq.server.admin": 4,
    "raftmq.app": 5,
    "raftmq.embedded": 6,
    "raftmq.testing": 6,
    "raftmq.bench": 6,
    "raftmq.ops": 7,
    "chaos": 7,  # `raftmq chaos`: drives clusters as raftmq.ops does
    "spark_audit": 7,  # `raftmq audit`: reads chaos runs' directories through raftmq.ops
    "raftmq.security_cli": 7,
    "raftmq.node_cli": 7,  # `raftmq node`: composes config, app and the cluster files' readers
    "raftmq.presets": 7,  # the preset group and topology files (package data, cluster.topology finds them)
    "raftmq.cli": 8,
    "raftmq.__main__": 9,
}
PACKAGE_INIT_RANK = 0  # `raftmq/__init__.py`: the version, and raftmq.compiled's choice of build
# Cohesive despite its size: the SQL-92 selector grammar and its evaluator.
SIZE_EXCEPTIONS = {"raftmq.core.selector"}
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPOSITORY).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(path): path for package in PACKAGES for path in sorted((REPOSITORY / package).rglob("*.py"))}


def _rank(module: str) -> int:
    if module == "raftmq":
        return PACKAGE_INIT_RANK
    best = max((prefix for prefix in RANKS if module == prefix or module.startswith(prefix + ".")), key=len)
    return RANKS[best]


def _all_imports(module: str) -> set[str]:
    """Every module `module` imports, anywhere in it (inside a function too), at run time or for
    the type checker only (an import under `if TYPE_CHECKING:` is still a dependency a reader
    has to follow)."""
    tree = ast.parse(MODULES[module].read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & MODULES.keys()
            found.update(submodules)
            if len(submodules) < len(node.names):  # names defined by the module itself
                found.add(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found - {module}


IMPORTS = {module: _all_imports(module) for module in MODULES}
GRAPH = {module: {name for name in names if name in MODULES} for module, names in IMPORTS.items()}


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        _rank(module)  # raises for a module no rank covers


def test_no_import_runs_up_a_layer() -> None:
    upward = [f"{a} -> {b}" for a, targets in GRAPH.items() for b in sorted(targets) if _rank(b) > _rank(a)]
    assert upward == []


def test_the_broker_imports_no_test_or_proof_tool() -> None:
    tools = [f"{module} -> {name}" for module, names in IMPORTS.items() if module.split(".")[0] == "raftmq"
             for name in sorted(names) if name.split(".")[0] in TOOLS]
    assert tools == []


def test_no_module_has_a_test_switch() -> None:
    # Planted bugs (no fsync, receipts before commit) live in tests/helpers/unsafe_node.py: a
    # deployed node has no environment variable that turns one on.
    switches = [module for module, path in MODULES.items() if "RAFTMQ_TEST_" in path.read_text()]
    assert switches == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle a depth-first walk of `graph` meets (a node's edges to itself excepted)."""
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node] - {node}):
            if state.get(target) == 1:
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                walk(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return circles


def test_no_import_circles() -> None:
    assert _circles(GRAPH) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_reads_in_one_sitting(module: str) -> None:
    if module in SIZE_EXCEPTIONS:
        return
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module}: {lines} lines"


def _package(module: str) -> str:
    """The package (room) a module lives in: the longest name in RANKS that covers it, so
    `raftmq.core`, `cluster`, `raftmq.server`, and each module directly under `raftmq/` (a room
    of its own, with its own rank). A subpackage belongs to the room around it."""
    if module == "raftmq":
        return module
    return max((prefix for prefix in RANKS if module == prefix or module.startswith(prefix + ".")), key=len)


def test_no_package_import_circles() -> None:
    packages: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        packages.setdefault(_package(module), set()).update(_package(target) for target in targets)
    assert _circles(packages) == []


# Where configuration files may be read: the deployment's files in cluster/, a single node's file
# in raftmq.config (which also defines read_toml). Anywhere else, parsing would spread again.
TOML_READERS = ("cluster", "raftmq.config")
PRODUCTION_PACKAGES = ("raftmq", "cluster", "chaos", "spark_audit")


def _reads_toml(path: Path) -> bool:
    """True when the module imports tomllib (or tomli) or names `read_toml`."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] in ("tomllib", "tomli")
                                                for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom):
            if node.module and node.module.split(".")[0] in ("tomllib", "tomli"):
                return True
            if any(alias.name == "read_toml" for alias in node.names):
                return True
        if isinstance(node, ast.Name) and node.id == "read_toml":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "read_toml":
            return True
    return False


def test_only_cluster_and_the_node_config_read_toml() -> None:
    readers = sorted(
        _module_name(path)
        for package in PRODUCTION_PACKAGES
        for path in sorted((REPOSITORY / package).rglob("*.py"))
        if _reads_toml(path)
    )
    assert readers, "no module reads TOML: the scan is broken"
    strays = [m for m in readers if not any(m == r or m.startswith(r + ".") for r in TOML_READERS)]
    assert strays == []


# -- Sans-I/O -----------------------------------------------------------------------------------
# Importing one of these loads no I/O library: they take bytes and events in and hand decisions
# out, and the shell around them does the I/O (docs/architecture.md). A name ending in "." stands
# for every module of that package.
IO_LIBRARIES = ("asyncio", "socket", "ssl", "logging", "structlog", "uvloop", "aiofiles")
IO_FREE = (
    "raftmq.protocol.codec", "raftmq.protocol.frame", "raftmq.protocol.header_block", "raftmq.protocol.escaping",
    "raftmq.protocol.negotiation", "raftmq.protocol.limits", "raftmq.protocol.mqtt.",
    "raftmq.core.", "raftmq.routing.",
    "raftmq.server.stomp.session", "raftmq.server.stomp.translate", "raftmq.server.stomp.decisions",
    "raftmq.server.stomp.authorization",
    "raftmq.server.stomp.frames", "raftmq.server.stomp.adoption", "raftmq.server.stomp.mobility",
    "raftmq.server.stomp.relay_events", "raftmq.server.stomp.serving", "raftmq.testing.mobility_sim",
    "raftmq.server.websocket.session", "raftmq.server.mqtt.session", "raftmq.server.mqtt.outbound",
    "raftmq.server.mqtt.kept", "raftmq.server.mqtt.subscriptions", "raftmq.server.mqtt.headers",
    "raftmq.server.mqtt.decisions", "raftmq.server.mqtt.aliases",
    "raftmq.replication.command_codec", "raftmq.replication.entry_codec",
)
# In a fresh interpreter: import each module named, then print the I/O libraries that got loaded.
_LOADED = ("import importlib, sys\n"
           "modules, libraries = sys.argv[1].split(), sys.argv[2].split()\n"
           "for module in modules: importlib.import_module(module)\n"
           "print(' '.join(name for name in libraries if name in sys.modules))")


def _io_free_modules() -> list[str]:
    return sorted(m for m in MODULES
                  if any(m == name or (name.endswith(".") and m.startswith(name)) for name in IO_FREE))


def _libraries_loaded(modules: list[str]) -> list[str]:
    """The I/O libraries a fresh interpreter has loaded after importing `modules` (this build)."""
    done = subprocess.run([sys.executable, "-c", _LOADED, " ".join(modules), " ".join(IO_LIBRARIES)], cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def io_violations(modules: list[str]) -> dict[str, list[str]]:
    """Each of `modules` whose import loads an I/O library, with those libraries: all of them in
    one interpreter first, then one at a time only when that found something, to name the culprits."""
    if not _libraries_loaded(modules):
        return {}
    found = {module: _libraries_loaded([module]) for module in modules}
    return {module: loaded for module, loaded in found.items() if loaded}


@pytest.mark.integration  # fresh interpreters
def test_the_sans_io_modules_load_no_io_library() -> None:
    modules = _io_free_modules()
    assert len(modules) > 40, "the list names modules that no longer exist"
    assert io_violations(modules) == {}


@pytest.mark.integration
def test_the_io_check_names_a_module_that_does_io() -> None:
    # Planted: the relay (the shell that opens a connection to the leader) among the sans-I/O ones.
    found = io_violations(["raftmq.protocol.codec", "raftmq.server.stomp.relay"])
    assert list(found) == ["raftmq.server.stomp.relay"]
    assert {"asyncio", "ssl", "structlog"} <= set(found["raftmq.server.stomp.relay"])


# -- The node's rooms ---------------------------------------------------------------------------
# raftmq.server's packages, and the rooms each may import: the seams (the protocols the rooms
# meet through) at the bottom, the WebSocket layer under the STOMP room, the replica and the
# links over it, the node's own wiring (raftmq.server's modules) and the admin port on top.
ROOMS_BELOW = {
    "raftmq.server.seams": set(),
    "raftmq.server.websocket": {"raftmq.server.seams"},
    "raftmq.server.stomp": {"raftmq.server.seams", "raftmq.server.websocket"},
    "raftmq.server.replica": {"raftmq.server.seams", "raftmq.server.stomp"},
    "raftmq.server.links": {"raftmq.server.seams", "raftmq.server.stomp"},
    "raftmq.server.mqtt": {"raftmq.server.seams", "raftmq.server.stomp"},
    "raftmq.server": {"raftmq.server.seams", "raftmq.server.websocket", "raftmq.server.stomp", "raftmq.server.replica",
                      "raftmq.server.links", "raftmq.server.mqtt"},
    "raftmq.server.admin": {"raftmq.server.seams", "raftmq.server.websocket", "raftmq.server.stomp",
                            "raftmq.server.replica", "raftmq.server.links", "raftmq.server.mqtt", "raftmq.server"},
}


def _room(module: str) -> str | None:
    rooms = [room for room in ROOMS_BELOW if module == room or module.startswith(room + ".")]
    return max(rooms, key=len) if rooms else None


def room_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports from one room into another that `ROOMS_BELOW` does not allow."""
    found = []
    for module, targets in sorted(graph.items()):
        room = _room(module)
        for target in sorted(targets):
            other = _room(target)
            if room is not None and other is not None and other != room and other not in ROOMS_BELOW[room]:
                found.append(f"{module} -> {target}")
    return found


def test_every_room_of_the_node_is_known() -> None:
    packages = (REPOSITORY / "raftmq" / "server").glob("*/__init__.py")
    rooms = {".".join(path.relative_to(REPOSITORY).parts[:3]) for path in packages}
    assert rooms == set(ROOMS_BELOW) - {"raftmq.server"}


def test_rooms_import_one_way() -> None:
    assert room_violations(GRAPH) == []


def test_the_room_check_names_a_wrong_way_import() -> None:
    # Planted: the seams importing the WebSocket layer (as they did before this check).
    seams = "raftmq.server.seams.host"
    planted = {**GRAPH, seams: GRAPH[seams] | {"raftmq.server.websocket.session"}}
    assert room_violations(planted) == ["raftmq.server.seams.host -> raftmq.server.websocket.session"]
