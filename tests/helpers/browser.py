"""Headless Chromium driven by Selenium, for the web console's browser test.

Debian's `chromium` and `chromium-driver` (installed with the chaos packages:
`python3 -m chaos.system_packages`, as root) and the `selenium` package (the test extra).
Missing ones fail the test with what to install, never skip it: CI installs them, so a test
that silently skipped would hide a console nobody checks.

Every wait here is bounded: the browser's start, page loads, scripts, each driver command
(`COMMAND_TIMEOUT`) and `wait_until`. `browser()` quits Chromium at the end, and kills by pid
whatever of the processes it started outlived the quit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

CHROMIUM = os.environ.get("RAFTMQ_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("RAFTMQ_CHROMEDRIVER", "/usr/bin/chromedriver")
WINDOW = (1400, 1000)
ARGUMENTS = ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={WINDOW[0]},{WINDOW[1]}")
PAGE_LOAD_TIMEOUT = 20.0
SCRIPT_TIMEOUT = 10.0
COMMAND_TIMEOUT = 30  # each HTTP request to chromedriver (selenium's default: 120 s)
WAIT = 15.0  # wait_until's default
POLL = 0.1
KILL_WAIT = 5.0
INSTALL_HINT = (
    "as root: `python3 -m chaos.system_packages` (installs chromium and chromium-driver) "
    "or `apt-get install -y chromium chromium-driver`"
)

T = TypeVar("T")


def _require_installed() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not (Path(path).is_file() and os.access(path, os.X_OK))]
    if missing:
        pytest.fail(f"the console's browser test needs {' and '.join(missing)}: {INSTALL_HINT}", pytrace=False)
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.fail("the console's browser test needs selenium: pip install -e '.[test]' (or selenium)", pytrace=False)


@contextlib.contextmanager
def browser(log_dir: Path) -> Iterator[Any]:
    """A headless Chromium (a selenium WebDriver) with a 1400×1000 window; chromedriver's log
    goes to `log_dir / "chromedriver.log"`. Quit at the end, whatever happened."""
    _require_installed()
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM  # and the driver's path below: Selenium Manager never runs
    for argument in ARGUMENTS:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    log_dir.mkdir(parents=True, exist_ok=True)
    # Chromium's own temporary files (org.chromium.Chromium.*) go to a directory removed at the
    # end; a short one, as its sockets' paths must stay under 108 bytes.
    scratch = tempfile.mkdtemp(prefix="rmq-chromium-")
    service = Service(executable_path=CHROMEDRIVER, log_output=str(log_dir / "chromedriver.log"),
                      env={**os.environ, "TMPDIR": scratch})
    try:
        driver = webdriver.Chrome(options=options, service=service)
    except WebDriverException as error:
        service.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        pytest.fail(f"headless chromium did not start ({CHROMIUM}, {CHROMEDRIVER}): {error.msg}\n"
                    f"chromedriver log: {log_dir / 'chromedriver.log'}", pytrace=False)
    started = _descendants(service.process.pid) if service.process is not None else []
    try:
        driver.command_executor.client_config.timeout = COMMAND_TIMEOUT
        driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT)
        driver.set_script_timeout(SCRIPT_TIMEOUT)
        driver.implicitly_wait(0)
        driver.set_window_size(*WINDOW)
        yield driver
    finally:
        pids = started + (_descendants(service.process.pid) if service.process is not None else [])
        try:
            driver.quit()  # ends the session (Chromium) and stops chromedriver
        finally:
            service.stop()
            _kill_survivors(pids)
            shutil.rmtree(scratch, ignore_errors=True)


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, start time) of every living descendant of `pid` (from /proc; the start time tells
    a pid reused by another process apart)."""
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) "
        child = int(entry.name)
        children.setdefault(int(fields[1]), []).append(child)
        starts[child] = fields[19]
    found: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append((child, starts[child]))
            todo.append(child)
    return found


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[19]


def _kill_survivors(pids: list[tuple[int, str]]) -> None:
    """SIGKILL those of `pids` (browser processes we started) still alive after the quit."""
    deadline = time.monotonic() + KILL_WAIT
    alive = [(pid, start) for pid, start in dict.fromkeys(pids) if _start_time(pid) == start]
    while alive and time.monotonic() < deadline:
        time.sleep(POLL)  # the quit's own shutdown first
        alive = [(pid, start) for pid, start in alive if _start_time(pid) == start]
    for pid, _ in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_until(check: Callable[[], T | None], what: str, timeout: float = WAIT, driver: Any = None) -> T:
    """The first truthy `check()` within `timeout` seconds; otherwise fail naming `what`, the
    last exception `check` raised, and the page's status line if `driver` is given."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except Exception as error:  # a stale or not yet rendered element: look again
            last_error = error
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL)
    detail = f" (last error: {last_error!r})" if last_error is not None else ""
    if driver is not None:
        detail += f"; status line: {status_line(driver)!r}"
    raise AssertionError(f"not within {timeout:.0f} s: {what}{detail}")


def status_line(driver: Any) -> str:
    with contextlib.suppress(Exception):
        return str(driver.execute_script(
            "const s = document.getElementById('status'); return s ? s.dataset.state + ': ' + s.textContent : '';"))
    return "?"


def polls(driver: Any) -> int:
    """How many refreshes the console has finished (its body's data-polls)."""
    return int(driver.execute_script("return Number(document.body.dataset.polls || 0);"))


def wait_for_poll(driver: Any, timeout: float = WAIT) -> None:
    """Until the console has finished a refresh that started after now."""
    seen = polls(driver)
    wait_until(lambda: polls(driver) >= seen + 2, "two more console refreshes", timeout, driver)


def accept_dialog(driver: Any, timeout: float = WAIT) -> str:
    """Accept the confirm() dialog the page opens (waiting for it): its text."""
    alert = wait_until(lambda: driver.switch_to.alert, "a confirmation dialog", timeout)
    text = str(alert.text)
    alert.accept()
    return text


def text_of(driver: Any, css: str) -> str | None:
    """The textContent of the first element `css` selects (as in the page, whatever its
    style shows), or None when there is none."""
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, css)
    return str(found[0].get_attribute("textContent")) if found else None


def javascript_errors(driver: Any) -> list[str]:
    """The browser console's errors other than failed requests (a 4xx/5xx answer the page shows)."""
    entries = driver.get_log("browser")
    return [entry["message"] for entry in entries
            if entry.get("level") == "SEVERE" and "Failed to load resource" not in entry.get("message", "")]


def save_screenshot(driver: Any, path: Path) -> None:
    """The whole page (not only the window) as a PNG at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # The window's height is the page's plus the browser's own frame (outer - inner).
    height = int(driver.execute_script(
        "window.scrollTo(0, 0);"
        "return document.documentElement.scrollHeight + window.outerHeight - window.innerHeight;"))
    driver.set_window_size(WINDOW[0], max(WINDOW[1], min(height, 6000)))
    try:
        if not driver.save_screenshot(str(path)):
            raise AssertionError(f"the screenshot was not saved to {path}")
    finally:
        driver.set_window_size(*WINDOW)
