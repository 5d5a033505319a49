"""The `raftmq` command imports its subcommands on first use: a node process never loads the
chaos harness, the audit or their libraries, `raftmq --help` loads no command, and a command
whose extra is not installed says which one to install (raftmq.cli)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from raftmq.cli import COMMANDS, EXTRAS, LazyGroup, load_command

TOOLS = ("chaos", "spark_audit", "plotly", "pyspark")

# What `python -m raftmq node` imports before it serves: the command and everything it calls
# (raftmq.node_cli imports these inside the command), checked in a fresh interpreter.
NODE_IMPORTS = textwrap.dedent("""
    import sys
    from raftmq.cli import main
    main.get_command(None, "node")
    import raftmq.app.group, raftmq.app.run, raftmq.config, cluster.node_settings, raftmq.server.node
    tools = sorted(name for name in sys.modules if name.split(".")[0] in {tools!r})
    assert not tools, tools
    print("clean", len(sys.modules))
""")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_help_line_is_the_commands_own(name: str) -> None:
    command = load_command(name, COMMANDS[name])
    assert command.get_short_help_str(limit=10**6) == COMMANDS[name].help


def test_help_lists_every_command_without_loading_one() -> None:
    group = LazyGroup(lazy=COMMANDS, name="raftmq")
    result = CliRunner().invoke(group, ["--help"])
    assert result.exit_code == 0, result.output
    listed = result.output.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed] == sorted(COMMANDS)
    assert group.commands == {}


def test_a_mistyped_command_is_suggested_from_every_name() -> None:
    result = CliRunner().invoke(LazyGroup(lazy=COMMANDS, name="raftmq"), ["sned"])
    assert result.exit_code == 2 and "Did you mean 'send'?" in result.output


@pytest.mark.parametrize(("command", "extra", "library"), [
    ("audit", "spark", "pyspark"), ("audit", "spark", "plotly"), ("chaos", "chaos", "plotly"),
    ("chaos", "chaos", "paho"),
])
def test_a_command_without_its_extra_names_the_install(command: str, extra: str, library: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert library in EXTRAS[extra]
    monkeypatch.setitem(sys.modules, library, None)  # `import library` now fails as if it were not installed
    result = CliRunner().invoke(LazyGroup(lazy=COMMANDS, name="raftmq"), [command, "--help"])
    assert result.exit_code == 1
    assert result.output == f"Error: raftmq {command} needs the {extra} extra: pip install -e '.[{extra}]'\n"


def test_a_missing_module_that_no_extra_provides_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "raftmq.bench.runner", None)
    monkeypatch.delitem(sys.modules, "raftmq.bench.cli", raising=False)
    with pytest.raises(ModuleNotFoundError):
        load_command("bench", COMMANDS["bench"])


@pytest.mark.integration
def test_a_node_process_imports_no_test_or_proof_tool() -> None:
    result = _python(NODE_IMPORTS.format(tools=TOOLS))
    assert result.returncode == 0 and result.stdout.startswith("clean"), result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("command", ["node", "send", "up", "status", "bench", "passwd", "manage", "queue"])
def test_broker_commands_help_imports_no_test_or_proof_tool(command: str) -> None:
    result = _python(textwrap.dedent(f"""
        import sys
        from raftmq.cli import main
        try:
            main([{command!r}, "--help"])
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        tools = sorted(name for name in sys.modules if name.split(".")[0] in {TOOLS!r})
        assert not tools, tools
    """))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Usage: " in result.stdout


@pytest.mark.integration
def test_raftmq_help_imports_no_command() -> None:
    result = _python(textwrap.dedent("""
        import sys
        from raftmq.cli import main
        try:
            main(["--help"])
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        loaded = sorted(name for name in sys.modules if name.startswith(("raftmq.", "chaos", "spark_audit")))
        assert loaded == ["raftmq.cli", "raftmq.compiled"], loaded  # the package's __init__ picks the build
    """))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.parametrize(("argv", "extra", "blocked"), [
    (["audit", "runs"], "spark", "pyspark"),
    (["chaos", "list"], "chaos", "plotly"),
])
def test_a_command_without_its_extra_says_one_line_in_a_process(argv: list[str], extra: str, blocked: str) -> None:
    result = _python(f"import sys; sys.modules[{blocked!r}] = None; sys.argv = ['raftmq', *{argv!r}]; "
                     "from raftmq.cli import main; main()")
    assert result.returncode == 1
    assert result.stderr == f"Error: raftmq {argv[0]} needs the {extra} extra: pip install -e '.[{extra}]'\n"
    assert result.stdout == ""


# What an operator's command loads before it runs (its --help): neither raftmq's STOMP client
# (the admin API needs none; raftmq.client imports its modules on first use), nor the WebSocket
# library (loaded for a ws:// connection only), nor the broker core's commands, model and
# selector compiler (a configuration reads destination names only: raftmq.core.validation).
# Each of these once took tens of ms of every such command's start.
NOT_FOR_OPERATORS = ("wsproto", "raftmq.client.failover", "raftmq.client.stomp_client", "raftmq.core.commands",
                     "raftmq.core.model", "raftmq.core.selector")


@pytest.mark.integration
@pytest.mark.parametrize("command", ["status", "manage", "up", "group"])
def test_operators_commands_start_without_the_client_or_the_core(command: str) -> None:
    result = _python(textwrap.dedent(f"""
        import sys
        from raftmq.cli import main
        try:
            main([{command!r}, "--help"])
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        loaded = sorted(name for name in {NOT_FOR_OPERATORS!r} if name in sys.modules)
        assert not loaded, loaded
    """))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration
def test_a_stomp_client_loads_the_websocket_library_only_for_a_websocket() -> None:
    result = _python("import sys, raftmq.client.failover; assert 'wsproto' not in sys.modules; "
                     "from raftmq.client import FailoverClient; import raftmq.client.websocket; "
                     "assert 'wsproto' in sys.modules")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_client_package_names_each_of_its_exports_once() -> None:
    import raftmq.client as package

    assert sorted(package.__all__) == sorted(package._WHERE)
    for name in package.__all__:
        assert name == "POLICY_NAMES" or getattr(package, name).__name__ == name
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        package.nothing
