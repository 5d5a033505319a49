"""The operations of the power-loss filesystem (chaos/lazyfs.py has the semantics, the process
and the control protocol): FUSE operations over a backing directory that keep each file's
un-fsynced writes in this process's memory until an fsync writes them through.

Runs under mfusepy (ctypes bindings for libfuse 3), multithreaded: libfuse calls the operations
from several threads, so every operation that touches the cache holds `LazyOperations.mutex`
(not `lock`: mfusepy would take that name for the FUSE operation on POSIX locks).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

GONE = (errno.ENOENT, errno.ENOTDIR)
# libfuse hands utimens these tv_nsec values (with tv_sec 0); mfusepy folds them into nanoseconds.
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2


class Extents:
    """The dirty bytes of one file: sorted, non-overlapping, non-adjacent runs (a journal's
    appends grow one run in place)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.runs: list[bytearray] = []

    @property
    def nbytes(self) -> int:
        return sum(len(run) for run in self.runs)

    def write(self, offset: int, data: bytes) -> None:
        if not data:
            return
        end = offset + len(data)
        last = bisect_right(self.starts, end)  # runs [first, last) touch [offset, end]
        first = max(bisect_right(self.starts, offset) - 1, 0)
        if first < last and self.starts[first] + len(self.runs[first]) < offset:
            first += 1
        if first == last:
            self.starts.insert(first, offset)
            self.runs.insert(first, bytearray(data))
            return
        if last - first == 1 and self.starts[first] <= offset:
            at = offset - self.starts[first]
            self.runs[first][at:at + len(data)] = data  # overwrites and/or extends the run
            return
        start = min(offset, self.starts[first])
        stop = max(end, self.starts[last - 1] + len(self.runs[last - 1]))
        merged = bytearray(stop - start)
        for run_start, run in zip(self.starts[first:last], self.runs[first:last]):
            merged[run_start - start:run_start - start + len(run)] = run
        merged[offset - start:end - start] = data
        self.starts[first:last] = [start]
        self.runs[first:last] = [merged]

    def overlay(self, buf: bytearray, offset: int) -> None:
        """Copy the dirty bytes that fall in [offset, offset + len(buf)) over `buf`."""
        end = offset + len(buf)
        i = max(bisect_right(self.starts, offset) - 1, 0)
        while i < len(self.starts) and self.starts[i] < end:
            start, run = self.starts[i], self.runs[i]
            lo, hi = max(start, offset), min(start + len(run), end)
            if lo < hi:
                buf[lo - offset:hi - offset] = run[lo - start:hi - start]
            i += 1

    def truncate(self, length: int) -> None:
        while self.starts and self.starts[-1] >= length:
            self.starts.pop()
            self.runs.pop()
        if self.starts and self.starts[-1] + len(self.runs[-1]) > length:
            del self.runs[-1][length - self.starts[-1]:]

    def clear(self) -> None:
        self.starts.clear()
        self.runs.clear()


@dataclass(eq=False)
class CachedFile:
    """One backing inode while it is open or dirty. `fd` keeps the inode alive (so its number is
    never reused while it keys `files`) and is where write-back goes, whatever its path now is."""

    key: tuple[int, int]
    fd: int
    size: int  # as the mount shows it; never less than the backing file's size
    dirty: Extents = field(default_factory=Extents)
    refs: int = 0  # open handles


@dataclass
class Handle:
    file: CachedFile
    append: bool


def _pwrite_all(fd: int, data: bytearray, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _pread_full(fd: int, size: int, offset: int) -> bytearray:
    """`size` bytes at `offset`, zeros past the backing file's end."""
    buf = bytearray()
    while len(buf) < size:
        chunk = os.pread(fd, size - len(buf), offset + len(buf))
        if not chunk:
            break
        buf += chunk
    buf.extend(bytes(size - len(buf)))
    return buf


def _stat_dict(st: os.stat_result) -> dict[str, int]:
    attrs = {key: getattr(st, key) for key in ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size",
                                                "st_blocks", "st_blksize", "st_rdev")}
    attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
    return attrs


class LazyOperations:
    """mfusepy operations (found by name; not a subclass of mfusepy.Operations, which is untyped)."""

    # Times in integer nanoseconds. Paths are always given (no nullpath_ok: mfusepy passes
    # truncate no handle), so an unlinked file that is still open lives on under libfuse's
    # .fuse_hidden name, and fstat / ftruncate keep working on it.
    use_ns = True

    def __init__(self, backing: Path) -> None:
        self.backing = os.path.realpath(backing)
        self.mutex = threading.Lock()
        self.files: dict[tuple[int, int], CachedFile] = {}
        self.handles: dict[int, Handle] = {}
        self.dirs: dict[int, int] = {}  # directory handle -> backing directory fd
        self.next_handle = 1

    def real(self, path: str | None) -> str:
        if path is None:  # libfuse gives none only with nullpath_ok, which we do not ask for
            raise OSError(errno.EOPNOTSUPP, "needs a path")
        return self.backing + path

    # -- the cache (callers hold self.mutex) ------------------------------------------------------
    def _attach(self, fd: int) -> CachedFile:
        """The cached file of the inode `fd` refers to; `fd` is adopted or closed."""
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        if key in self.files:
            os.close(fd)
            return self.files[key]
        cached = self.files[key] = CachedFile(key, fd, st.st_size)
        return cached

    def _new_handle(self, cached: CachedFile, flags: int) -> int:
        handle = self.next_handle
        self.next_handle += 1
        cached.refs += 1
        self.handles[handle] = Handle(cached, bool(flags & os.O_APPEND))
        return handle

    def _cached_at(self, path: str | None) -> CachedFile | None:
        try:
            st = os.lstat(self.real(path))
        except OSError as exc:
            if exc.errno in GONE:
                return None
            raise
        return self.files.get((st.st_dev, st.st_ino)) if stat.S_ISREG(st.st_mode) else None

    def _truncate(self, cached: CachedFile, length: int) -> None:
        os.ftruncate(cached.fd, length)  # sizes are metadata: durable at once
        cached.dirty.truncate(length)
        cached.size = length

    def _write_back(self, cached: CachedFile) -> int:
        written = 0
        for start, run in zip(cached.dirty.starts, cached.dirty.runs):
            _pwrite_all(cached.fd, run, start)
            written += len(run)
        cached.dirty.clear()
        if os.fstat(cached.fd).st_size < cached.size:
            os.ftruncate(cached.fd, cached.size)
        return written

    def _reap(self, cached: CachedFile) -> None:
        """Forget a file nobody has open that is clean, or unlinked (its dirty data then goes
        nowhere: no name reaches it any more)."""
        if cached.refs > 0 or (cached.dirty.starts and os.fstat(cached.fd).st_nlink > 0):
            return
        del self.files[cached.key]
        os.close(cached.fd)

    def lose_unsynced(self) -> tuple[int, int]:
        """Power loss: (bytes, files) of un-fsynced data dropped."""
        with self.mutex:
            dropped = [(cached, cached.dirty.nbytes) for cached in self.files.values() if cached.dirty.starts]
            for cached, _ in dropped:
                cached.dirty.clear()
                cached.size = os.fstat(cached.fd).st_size
            for cached in list(self.files.values()):
                self._reap(cached)
            return sum(n for _, n in dropped), len(dropped)

    def flush_all(self) -> tuple[int, int]:
        """Write everything through and fsync it: (bytes, files)."""
        with self.mutex:
            total = count = 0
            for cached in list(self.files.values()):
                if cached.dirty.starts:
                    total += self._write_back(cached)
                    os.fsync(cached.fd)
                    count += 1
                self._reap(cached)
            return total, count

    def dirty_bytes(self) -> int:
        with self.mutex:
            return sum(cached.dirty.nbytes for cached in self.files.values())

    # -- files --------------------------------------------------------------------------------------
    def open(self, path: str, flags: int) -> int:
        fd = os.open(self.real(path), os.O_RDWR | os.O_NOFOLLOW)
        with self.mutex:
            cached = self._attach(fd)
            if flags & os.O_TRUNC:
                self._truncate(cached, 0)
            return self._new_handle(cached, flags)

    def create(self, path: str, mode: int, flags: int) -> int:
        fd = os.open(self.real(path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | (flags & os.O_EXCL), mode)
        with self.mutex:
            cached = self._attach(fd)
            if flags & os.O_TRUNC:
                self._truncate(cached, 0)
            return self._new_handle(cached, flags)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self.mutex:
            cached = self.handles[fh].file
            size = min(size, cached.size - offset)
            if size <= 0:
                return b""
            buf = _pread_full(cached.fd, size, offset)
            cached.dirty.overlay(buf, offset)
            return bytes(buf)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self.mutex:
            handle = self.handles[fh]
            cached = handle.file
            if handle.append:  # the kernel's idea of the end may predate a power loss
                offset = cached.size
            cached.dirty.write(offset, data)
            cached.size = max(cached.size, offset + len(data))
            return len(data)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self.mutex:
            cached = self.handles[fh].file if fh is not None else self._cached_at(path)
            if cached is None:
                os.truncate(self.real(path), length)
            else:
                self._truncate(cached, length)
        return 0

    def fallocate(self, path: str | None, mode: int, offset: int, length: int, fh: int) -> int:
        # Plain allocation only; it is metadata (size, blocks), so it goes to the backing file.
        # Other modes would change data: EOPNOTSUPP (glibc's posix_fallocate never asks for them).
        if mode != 0:
            raise OSError(errno.EOPNOTSUPP, "only mode 0")
        with self.mutex:
            cached = self.handles[fh].file
            os.posix_fallocate(cached.fd, offset, length)
            cached.size = max(cached.size, offset + length)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self.mutex:
            cached = self.handles[fh].file
            self._write_back(cached)
            fd = os.dup(cached.fd)  # fsync outside the lock, on an fd nobody can close under us
        try:
            (os.fdatasync if datasync else os.fsync)(fd)
        finally:
            os.close(fd)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0  # close() writes nothing back: that is the point

    def release(self, path: str | None, fh: int) -> int:
        with self.mutex:
            cached = self.handles.pop(fh).file
            cached.refs -= 1
            self._reap(cached)
        return 0

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, int]:
        with self.mutex:
            handle = self.handles.get(fh) if fh is not None else None  # (a directory's is not here)
            if handle is not None:
                cached: CachedFile | None = handle.file
                st = os.fstat(handle.file.fd)
            else:
                st = os.lstat(self.real(path))
                cached = self.files.get((st.st_dev, st.st_ino)) if stat.S_ISREG(st.st_mode) else None
            attrs = _stat_dict(st)
            if cached is not None:
                attrs["st_size"] = cached.size
                attrs["st_blocks"] = max(st.st_blocks, (cached.size + 511) // 512)
            return attrs

    # -- names: straight to the backing directory --------------------------------------------------
    def unlink(self, path: str) -> int:
        with self.mutex:
            cached = self._cached_at(path)
            os.unlink(self.real(path))
            if cached is not None:
                self._reap(cached)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self.mutex:
            replaced = self._cached_at(new)
            os.rename(self.real(old), self.real(new))
            if replaced is not None and replaced.key in self.files:
                self._reap(replaced)
        return 0

    def link(self, target: str, source: str) -> int:
        os.link(self.real(source), self.real(target))
        return 0

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self.real(target))
        return 0

    def readlink(self, path: str) -> str:
        return os.readlink(self.real(path))

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self.real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self.real(path))
        return 0

    def chmod(self, path: str | None, mode: int) -> int:
        os.chmod(self.real(path), mode)
        return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        os.lchown(self.real(path), uid, gid)
        return 0

    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        real = self.real(path)
        if times is None:
            os.utime(real, follow_symlinks=False)
            return 0
        st = os.lstat(real)
        now = time.time_ns()
        atime, mtime = ({UTIME_NOW: now, UTIME_OMIT: current}.get(value, value)
                        for value, current in zip(times, (st.st_atime_ns, st.st_mtime_ns)))
        os.utime(real, ns=(atime, mtime), follow_symlinks=False)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self.backing)
        return {key: getattr(sv, key) for key in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                  "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")}

    # -- directories ------------------------------------------------------------------------------
    def opendir(self, path: str) -> int:
        fd = os.open(self.real(path), os.O_RDONLY | os.O_DIRECTORY)
        with self.mutex:
            handle = self.next_handle
            self.next_handle += 1
            self.dirs[handle] = fd
        return handle

    def readdir(self, path: str | None, fh: int) -> list[str]:
        with self.mutex:
            fd = self.dirs[fh]
        return [".", ".."] + os.listdir(fd)

    def releasedir(self, path: str | None, fh: int) -> int:
        with self.mutex:
            fd = self.dirs.pop(fh)
        os.close(fd)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        return 0  # names are in the backing directory already, which outlives our "power loss"

    def destroy(self, path: str) -> None:
        self.flush_all()  # a clean unmount is a clean shutdown, which syncs
