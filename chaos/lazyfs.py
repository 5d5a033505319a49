"""A power-loss filesystem for the chaos harness, in the spirit of Jepsen's lazyfs: a FUSE
passthrough over a backing directory whose file data, written but not yet fsynced, lives only
in the FUSE process's memory. "Losing power" drops it, so a node killed with SIGKILL and
restarted on the same mount sees only what it fsynced, as after a real power cut.

    python -m chaos.lazyfs BACKING_DIR MOUNTPOINT [--control SOCKET]

runs in the foreground and prints `lazyfs mounted MOUNTPOINT over BACKING_DIR` once the mount
answers; `fusermount3 -u MOUNTPOINT` or SIGTERM ends it. The operations are in
chaos/lazyfs_fs.py; this module is the entry point and the harness's side (`LazyFS`).

Semantics:
- Data: a write goes to the file's dirty extents in memory; reads overlay them on the backing
  file; sizes (writes past the end, O_APPEND) come from the cache. fsync / fdatasync of a file
  write its dirty extents to the backing file and fsync it. close() writes nothing back.
- Metadata goes to the backing directory at once and is never lost: create, mkdir, rename
  (RENAME_NOREPLACE / EXCHANGE flags are ignored: mfusepy drops them), unlink, rmdir, link,
  symlink, chmod, chown, utimens, and sizes set by truncate / ftruncate / O_TRUNC and by
  fallocate (mode 0 only; others EOPNOTSUPP). So a truncate is durable, and un-fsynced data it
  cut off is simply gone; a file created and written without fsync survives a power loss
  empty. Directory fsync is a no-op (the names are already in the backing directory). Mode-0
  fallocate is served rather than refused because glibc's posix_fallocate answers EOPNOTSUPP
  by writing a zero byte per 4 KiB block itself, so the caller would never see the refusal.
- An unlinked file still open lives on as libfuse's `.fuse_hiddenNNN` until closed; the kernel
  caches neither pages (direct_io) nor attributes, so a power loss shows at once.
- The backing directory only ever holds data that some fsync (or `flush`) wrote through.
- A clean unmount writes everything through; a SIGKILL of the FUSE process loses it.

Control (the Unix socket given by --control): connect, send one line, read one line back.
`lose` drops every un-fsynced write (the reply is `ok BYTES FILES`, the bytes dropped: dirty
bytes counted once however often overwritten); `flush` writes everything through and fsyncs it
(`ok BYTES FILES`); `dirty` says how many bytes are un-fsynced (`ok BYTES`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes.util
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from chaos.lazyfs_fs import LazyOperations
from raftmq import processes
from raftmq.errors import ProcessNotReady

READY = "lazyfs mounted "
CONTROL_TIMEOUT = 30.0  # a flush of much dirty data to a slow disk takes a while
UNMOUNT_TIMEOUT = 10.0
CONTROL_READ_TIMEOUT = 10.0


def available() -> str | None:
    """None when a lazyfs can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian package fuse3)"
    if ctypes.util.find_library("fuse3") is None:
        return "no libfuse3 (Debian package libfuse3-3)"
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed"
    return None


class LazyFS:
    """One lazyfs process, mounted at `mountpoint` over `backing`, its output appended to `log`."""

    def __init__(self, backing: Path, mountpoint: Path, log: Path) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.log = log
        self._proc: subprocess.Popen[bytes] | None = None
        self._control_dir: str | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def mount(self, timeout: float = 10.0) -> None:
        """Start the FUSE process and wait until the mount answers."""
        if self._proc is not None:
            raise RuntimeError(f"lazyfs already mounted at {self.mountpoint}")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._control_dir = tempfile.mkdtemp(prefix="lazyfs-")  # short: a socket path has <108 bytes
        start = self.log.stat().st_size if self.log.exists() else 0
        argv = [sys.executable, "-m", "chaos.lazyfs", str(self.backing), str(self.mountpoint),
                "--control", self._control_path()]
        self._proc = processes.spawn(argv, self.log, append=True, cwd=Path(__file__).resolve().parent.parent)
        try:
            self._wait_ready(start, timeout)
        except BaseException:
            self.unmount()
            raise

    def lose_unsynced(self) -> int:
        """Power loss: drop every un-fsynced write; the bytes dropped."""
        return int(self._ask("lose").split()[0])

    def flush(self) -> None:
        """Write everything through (as a clean shutdown would)."""
        self._ask("flush")

    def dirty_bytes(self) -> int:
        return int(self._ask("dirty").split()[0])

    def unmount(self) -> None:
        """Unmount (lazily if still busy) and stop the process by its pid. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if _is_mounted(self.mountpoint):
                done = subprocess.run(["fusermount3", "-u", str(self.mountpoint)], capture_output=True,
                                      timeout=UNMOUNT_TIMEOUT, check=False)
                if done.returncode != 0 and _is_mounted(self.mountpoint):
                    subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], capture_output=True,
                                   timeout=UNMOUNT_TIMEOUT, check=False)
            try:
                proc.wait(timeout=UNMOUNT_TIMEOUT)  # libfuse's loop ends with the mount
            except subprocess.TimeoutExpired:
                processes.terminate(proc, grace=5.0)
        finally:
            if self._control_dir is not None:
                shutil.rmtree(self._control_dir, ignore_errors=True)
                self._control_dir = None

    def _control_path(self) -> str:
        assert self._control_dir is not None
        return os.path.join(self._control_dir, "control.sock")

    def _wait_ready(self, start: int, timeout: float) -> None:
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            with open(self.log, "rb") as f:
                f.seek(start)
                if READY.encode() in f.read():
                    return
            time.sleep(processes.POLL_SECONDS)
        state = f"exited with {proc.returncode}" if proc.poll() is not None else f"not ready in {timeout:.0f} s"
        raise ProcessNotReady(f"lazyfs pid {proc.pid} {state}: see {self.log}")

    def _ask(self, command: str) -> str:
        if self._proc is None:
            raise RuntimeError("lazyfs is not mounted")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(CONTROL_TIMEOUT)
            sock.connect(self._control_path())
            sock.sendall(command.encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
        text = reply.decode().strip()
        if not text.startswith("ok"):
            raise RuntimeError(f"lazyfs {command}: {text or 'no reply'}")
        return text[2:].strip()


def _is_mounted(path: Path) -> bool:
    """From the mount table: a mount whose FUSE process died fails every stat, so
    os.path.ismount would say no."""
    target = os.path.realpath(path)
    with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
        for line in mounts:
            fields = line.split()
            # The table escapes spaces and such as octal (\040).
            if len(fields) > 1 and fields[1].encode().decode("unicode_escape") == target:
                return True
    return False


# -- the FUSE process ---------------------------------------------------------------------------------
def serve_control(ops: LazyOperations, path: str) -> threading.Thread:
    """Answer one-line commands (`lose`, `flush`, `dirty`) on the Unix socket `path`."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)

    def answer(command: str) -> str:
        if command == "lose":
            nbytes, nfiles = ops.lose_unsynced()
            print(f"lazyfs: power loss dropped {nbytes} bytes in {nfiles} files", file=sys.stderr, flush=True)
            return f"ok {nbytes} {nfiles}"
        if command == "flush":
            nbytes, nfiles = ops.flush_all()
            print(f"lazyfs: flushed {nbytes} bytes in {nfiles} files", file=sys.stderr, flush=True)
            return f"ok {nbytes} {nfiles}"
        if command == "dirty":
            return f"ok {ops.dirty_bytes()}"
        return f"error unknown command {command!r}"

    def loop() -> None:
        while True:
            conn, _ = server.accept()
            conn.settimeout(CONTROL_READ_TIMEOUT)  # a client that sends nothing must not wedge us
            with conn, conn.makefile("rw", encoding="ascii", newline="\n") as stream:
                try:
                    reply = answer(stream.readline().strip())
                except Exception as exc:  # noqa: BLE001 - the harness gets it, not a dead control thread
                    reply = f"error {exc!r}"
                stream.write(reply + "\n")

    thread = threading.Thread(target=loop, name="lazyfs-control", daemon=True)
    thread.start()
    return thread


def run(backing: Path, mountpoint: Path, control: str | None) -> None:
    """Mount and serve until unmounted (fusermount3 -u) or SIGTERM/SIGINT."""
    import mfusepy  # here, not at the top: the harness side must import without libfuse

    ops = LazyOperations(backing)
    if control:
        serve_control(ops, control)

    device_before = os.stat(mountpoint).st_dev

    def announce() -> None:
        # Usable once a stat of the mountpoint is answered by us (after libfuse's INIT): a new
        # device there (os.path.ismount would also say yes over an older mount).
        for _ in range(600):
            with contextlib.suppress(OSError):
                if os.stat(mountpoint).st_dev != device_before:
                    print(f"lazyfs mounted {mountpoint} over {backing}", flush=True)
                    return
            time.sleep(0.05)
        print("lazyfs: the mount did not appear in 30 s", file=sys.stderr, flush=True)

    threading.Thread(target=announce, name="lazyfs-ready", daemon=True).start()
    mfusepy.FUSE(
        ops, str(mountpoint), foreground=True, nothreads=False, fsname="lazyfs", subtype="lazyfs",
        # Given, as libfuse 3.14's defaults make it complain about an invalid thread count.
        max_threads=8, max_idle_threads=4,
        # No kernel page cache: a read after a power loss must come to us, not from stale pages.
        direct_io=True,
        # No kernel caching of attributes or names: after a power loss sizes shrink under it.
        attr_timeout=0, entry_timeout=0, negative_timeout=0,
    )
    if control:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(control)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chaos.lazyfs",
                                     description="A FUSE mount that loses un-fsynced data on demand.")
    parser.add_argument("backing", type=Path)
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--control", help="Unix socket path for lose / flush / dirty")
    args = parser.parse_args(argv)
    run(args.backing.resolve(), args.mountpoint.resolve(), args.control)


if __name__ == "__main__":
    main()
