"""One table style for every command that prints tables: `raftmq status`, `raftmq queue stat`
and `raftmq manage destinations | connections | consumers`.

Each is a rich table made by `new_table`: the same box, a bold header of lowercase names
(`heading` makes one from a JSON key: `in_flight` is `in flight`), the title above it on the
left, numbers on the right. `print_tables` prints them: on a terminal at its width, into a
pipe or file as wide as the widest table (rich would assume 80 columns and squeeze them).
"""

from __future__ import annotations

from collections.abc import Iterable

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

TABLE_BOX = box.HEAVY_HEAD
HEADER_STYLE = "bold"
PIPE_WIDTH = 120  # at least this wide off a terminal


def new_table(title: str | Text | None = None, caption: str | None = None) -> Table:
    return Table(title=title, title_justify="left", caption=caption, caption_justify="left", box=TABLE_BOX,
                 header_style=HEADER_STYLE)


def heading(key: str) -> str:
    """A column's header from a JSON key: lowercase words (`in_flight` is `in flight`)."""
    return key.replace("_", " ").lower()


def add_columns(table: Table, keys: Iterable[str], numeric: Iterable[str] = ()) -> None:
    """A column per key (`heading`), the `numeric` ones right-justified."""
    right = set(numeric)
    for key in keys:
        table.add_column(heading(key), justify="right" if key in right else "left")


def print_tables(*renderables: RenderableType, console: Console | None = None) -> None:
    console = console or Console()
    if not console.is_terminal:
        width = max([PIPE_WIDTH, *(console.measure(renderable, options=console.options.update_width(10**4)).maximum
                                   for renderable in renderables)])
        console = Console(file=console.file, width=width)
    console.print(*renderables)
