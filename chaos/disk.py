"""Disk-full faults: a small size-limited tmpfs mounted where a node keeps its data, filled up
to `leave_bytes` with a filler file and freed again. Needs root (mount).

    disk = SmallDisk(run_dir / "disk-n1", 64 * 1024 * 1024)
    disk.mount()                      # start the node with --data-dir under disk.mountpoint
    disk.fill()                       # every write the node makes now fails with ENOSPC
    disk.free()                       # room again
    disk.unmount()                    # idempotent; lazy when the node still holds files there

tmpfs rather than a loop-mounted ext4 image: what matters here is ENOSPC, which tmpfs returns
exactly when its size is used (no reserved blocks that root, which the nodes run as, could
still write into; no journal or metadata overhead to guess), and it needs no image file nor
loop device. It has no fsync semantics (everything is in memory), so it says nothing about
crash durability; that is the lazyfs nemesis's job.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from raftmq.errors import FaultUnavailable

FILLER = "raftmq-chaos-filler"
FS_NAME = "raftmq-chaos-disk"  # the source column of /proc/mounts: tells our mounts apart
CHUNK = 1024 * 1024
MOUNT_TIMEOUT_SECONDS = 30.0
# Bounds the fill loop: a filesystem larger than this is not a small disk.
MAX_FILL_BYTES = 64 * 1024 * 1024 * 1024


class DiskUnavailable(FaultUnavailable):
    """Not root, no mount, or a mountpoint that is not ours."""


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=MOUNT_TIMEOUT_SECONDS)


def _mounted_here(mountpoint: Path) -> str | None:
    """The source of what is mounted exactly at `mountpoint`, or None."""
    target = str(mountpoint.resolve())
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    source = None
    for line in lines:  # the last one wins: mounts stack
        fields = line.split()
        if len(fields) >= 2 and fields[1].replace("\\040", " ") == target:
            source = fields[0]
    return source


def available() -> str | None:
    """None when small disks can be mounted here; otherwise why not."""
    if os.geteuid() != 0:
        return "mounting a small disk needs root"
    for tool in ("mount", "umount"):
        if shutil.which(tool) is None:
            return f"no {tool} command (apt-get install -y mount)"
    # Containers may be root without the right to mount: try it on a tiny one.
    with tempfile.TemporaryDirectory(prefix="raftmq-disk-probe-") as probe:
        result = _run(["mount", "-t", "tmpfs", "-o", "size=64k", FS_NAME, probe])
        if result.returncode != 0:
            return f"cannot mount a tmpfs here: {result.stderr.strip()}"
        _run(["umount", probe])
    return None


class SmallDisk:
    """A tmpfs of `size_bytes` at `mountpoint` (created if missing)."""

    def __init__(self, mountpoint: Path, size_bytes: int) -> None:
        if size_bytes < 64 * 1024:
            raise DiskUnavailable(f"a small disk needs at least 64 KiB, not {size_bytes} bytes")
        self.mountpoint = Path(mountpoint)
        self.size_bytes = size_bytes

    @property
    def filler(self) -> Path:
        return self.mountpoint / FILLER

    @property
    def mounted(self) -> bool:
        return _mounted_here(self.mountpoint) == FS_NAME

    def mount(self) -> None:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        source = _mounted_here(self.mountpoint)
        if source == FS_NAME:
            return
        if source is not None:
            raise DiskUnavailable(f"{self.mountpoint} already has {source} mounted on it")
        if any(self.mountpoint.iterdir()):
            # Mounting over files would hide them from the node (and from us at cleanup).
            raise DiskUnavailable(f"{self.mountpoint} is not empty")
        result = _run(["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes},mode=0755", FS_NAME,
                       str(self.mountpoint)])
        if result.returncode != 0:
            raise DiskUnavailable(f"mount of a {self.size_bytes}-byte tmpfs at {self.mountpoint} failed: "
                                  f"{result.stderr.strip()}")

    def free_bytes(self) -> int:
        stats = os.statvfs(self.mountpoint)
        return stats.f_bavail * stats.f_frsize

    def fill(self, leave_bytes: int = 0) -> int:
        """Write to the filler file until at most `leave_bytes` are free; the bytes written.
        With leave_bytes=0 it writes until the filesystem says ENOSPC."""
        if not self.mounted:
            raise DiskUnavailable(f"{self.mountpoint} is not mounted: mount() first")
        written = 0
        chunk = b"\0" * CHUNK
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while written < MAX_FILL_BYTES:
                room = self.free_bytes() - leave_bytes
                if room <= 0:
                    break
                try:
                    n = os.write(fd, chunk[:min(CHUNK, room)])
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
                if n <= 0:
                    break
                written += n
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        """Remove the filler: the space it took is free again."""
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        """Unmount (idempotent); lazily when a process still has files open there, so the mount
        leaves the namespace now and goes when they close them."""
        if not self.mounted:
            return
        result = _run(["umount", str(self.mountpoint)])
        if result.returncode != 0 and self.mounted:
            lazy = _run(["umount", "-l", str(self.mountpoint)])
            if lazy.returncode != 0 and self.mounted:
                raise DiskUnavailable(f"umount {self.mountpoint} failed: {result.stderr.strip()}; "
                                      f"lazy: {lazy.stderr.strip()}")
