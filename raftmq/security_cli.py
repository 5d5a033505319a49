"""`raftmq passwd`: the password hash line for a `[[user]]` entry (listed by raftmq.cli)."""

from __future__ import annotations

import sys

import click


@click.command("passwd")
@click.option("--stdin", "from_stdin", is_flag=True,
              help="Read the password from the first line of stdin instead of prompting (for scripts).")
@click.option("--user", "user", metavar="NAME",
              help="Print a whole [[user]] table for NAME instead of the hash alone.")
def passwd_command(from_stdin: bool, user: str | None) -> None:
    """Hash a password for the config's [[user]] password_hash (scrypt, random salt).

    Prompts twice without echo; the password itself is never stored or printed."""
    from raftmq.passwords import hash_password

    if from_stdin:
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        password = password[:-1] if password.endswith("\r") else password
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt="Repeat the password")
    if not password:
        raise click.ClickException("empty password: refusing to hash it")
    encoded = hash_password(password)
    if user is None:
        click.echo(encoded)
        return
    quoted = user.replace("\\", "\\\\").replace('"', '\\"')
    click.echo(f'[[user]]\nname = "{quoted}"\npassword_hash = "{encoded}"\ngroups = []')
