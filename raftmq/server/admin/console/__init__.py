"""The web console: one static page (index.html, console.js, console.css) served at `/` of the
admin port, which reads and drives the JSON management API under `/api/` (docs/management.md).

No build step and no third-party code: the files here are what the browser gets, read with
importlib.resources so they ship inside the package (pyproject.toml's package-data).
"""

from __future__ import annotations

import functools
from importlib import resources

# Request path -> (file in this package, Content-Type).
_ASSETS: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}


def asset(path: str) -> tuple[str, bytes] | None:
    """(Content-Type, bytes) of the console file `path` names (`/`, `/index.html`,
    `/console.js`, `/console.css`; a query string is ignored); None for any other path."""
    found = _ASSETS.get(path.partition("?")[0])
    if found is None:
        return None
    name, content_type = found
    return content_type, _read(name)


@functools.cache
def _read(name: str) -> bytes:
    return resources.files(__name__).joinpath(name).read_bytes()
