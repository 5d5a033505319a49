"""Clock faults for one node process: skew, jumps and a faster or slower clock, with libfaketime
(Debian's `libfaketime`, 0.9.10) preloaded into the process.

    clock = ClockControl(run_dir / "n1.faketime", wall_only=True)
    proc = subprocess.Popen(argv, env=clock.environ())      # or {**os.environ, **clock.env()}
    clock.attach(proc.pid)                                  # only rate() needs it
    clock.skew(3600)     # its wall clock is now 1 h ahead of the machine's
    clock.jump(-30)      # ... and steps back 30 s (an NTP step)
    clock.rate(2)        # ... and from now on runs twice as fast
    clock.reset()        # real time again (a step back to it)

libfaketime reads the control file `path` on every clock read (FAKETIME_NO_CACHE=1, about 5 µs
a read), so a change takes effect at the process's next read. The file holds an offset and a
rate ("+3600.000000 x1.000000"); libfaketime computes, for every faked clock,
`start + offset + (now - start) * rate` where `start` is when the process started, so a new
rate alone would move the clock by the whole elapsed time: `rate` and `skew` (when the rate
is not 1) fold that into the offset, which is why they need the process's start (`attach`).

Which clocks move (`wall_only`):
- True (the default; what an NTP step or a wrong NTP server does): only CLOCK_REALTIME
  (`time.time`) moves; CLOCK_MONOTONIC, _RAW, _COARSE and BOOTTIME stay real
  (FAKETIME_DONT_FAKE_MONOTONIC=1). In raftmq that is the `now` of commands (message expiry,
  the Tick that expires messages, log timestamps), not election timeouts, heart-beats or the
  leader lease.
- False (a VM paused and resumed, or a faulty clock source): every clock moves by the same
  offset at the same rate, so `jump(5)` makes every monotonic deadline 5 s closer at once (an
  election, a lease expiring) and `rate(2)` runs timers twice as fast (libfaketime also
  shortens sleeps, poll/epoll/select timeouts by the rate). A negative skew or jump then moves
  monotonic time backwards, which no real Linux clock does: use it knowing that.

libfaketime 0.9.10 breaks CPython 3.11 in either mode, so a small preload of ours (`shim`,
built once with the C compiler) goes in front of it:
- with monotonic time real, it turns `time.sleep`'s absolute CLOCK_MONOTONIC deadline into a
  negative one (EINVAL: wolfcw/libfaketime#426; pysyncobj's tick thread dies of it) and makes
  every timed wait on a monotonic condition variable (the GIL) time out at once (a spinning
  waiter);
- with monotonic time faked, it does not intercept sem_clockwait, so every timed lock wait
  (`Event.wait(t)`, `Queue.get(timeout=t)`, `Lock.acquire(timeout=t)`) waits for the faked
  deadline on the real clock: forever.
The shim sends those calls to glibc with a real deadline. Timed lock waits are not sped up by
`rate`.

Each faked process creates /dev/shm/faketime_shm_<pid> and sem.faketime_sem_<pid>, removed
when it exits normally; one killed with SIGKILL leaves them (`remove_leftovers(pid)`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from raftmq.errors import FaultUnavailable

LIBRARY_DIR = Path("/usr/lib/x86_64-linux-gnu/faketime")
# The thread-safe build: a node reads its clocks from several threads (the event loop,
# pysyncobj's tick thread, to_thread workers) and the plain build parses the control file into
# shared static buffers without a lock.
LIBRARY = LIBRARY_DIR / "libfaketimeMT.so.1"
SHM_DIR = Path("/dev/shm")
BUILD_TIMEOUT_SECONDS = 60.0
# Variables that would override or confuse the control file in a child: FAKETIME wins over
# FAKETIME_TIMESTAMP_FILE; FAKETIME_SHARED would tie the child to our own libfaketime state.
OVERRIDING_VARIABLES = ("FAKETIME", "FAKETIME_SHARED", "FAKETIME_XRESET", "FAKETIME_FMT",
                        "FAKETIME_START_AFTER_SECONDS", "FAKETIME_STOP_AFTER_SECONDS",
                        "FAKETIME_START_AFTER_NUMCALLS", "FAKETIME_STOP_AFTER_NUMCALLS")

SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Loaded in front of libfaketime 0.9.10 (raftmq chaos/clock_fault.py): the calls CPython 3.11 makes
   that it gets wrong go to glibc with a real deadline. */

static int monotonic_faked(void) {
    const char *v = getenv("FAKETIME_DONT_FAKE_MONOTONIC");
    return !(v != NULL && v[0] == '1');
}

static int is_monotonic(clockid_t c) {
    return c == CLOCK_MONOTONIC || c == CLOCK_MONOTONIC_RAW || c == CLOCK_MONOTONIC_COARSE || c == CLOCK_BOOTTIME;
}

/* time.sleep: an absolute CLOCK_MONOTONIC deadline, which libfaketime shifts by its faked
   start even when monotonic time is not faked (EINVAL, wolfcw/libfaketime#426). */
int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req, struct timespec *rem) {
    static int (*next)(clockid_t, int, const struct timespec *, struct timespec *);
    if (!monotonic_faked() && is_monotonic(clock)) {
        long r = syscall(SYS_clock_nanosleep, clock, flags, req, rem);
        return r == 0 ? 0 : errno;
    }
    if (next == NULL) next = dlsym(RTLD_NEXT, "clock_nanosleep");
    return next(clock, flags, req, rem);
}

/* Timed lock waits: glibc hands the faked deadline to the kernel, which waits for it on the
   real clock. Turn it into the same time left on the real clock. */
int sem_clockwait(sem_t *sem, clockid_t clock, const struct timespec *abstime) {
    static int (*next)(sem_t *, clockid_t, const struct timespec *);
    if (next == NULL) next = dlsym(RTLD_NEXT, "sem_clockwait");
    if (is_monotonic(clock) && !monotonic_faked()) return next(sem, clock, abstime);
    struct timespec faked, real, deadline;
    clock_gettime(clock, &faked);
    syscall(SYS_clock_gettime, clock, &real);
    long long left = (long long)(abstime->tv_sec - faked.tv_sec) * 1000000000LL + (abstime->tv_nsec - faked.tv_nsec);
    if (left < 0) left = 0;
    long long end = (long long)real.tv_sec * 1000000000LL + real.tv_nsec + left;
    deadline.tv_sec = end / 1000000000LL;
    deadline.tv_nsec = end % 1000000000LL;
    return next(sem, clock, &deadline);
}

/* A CLOCK_MONOTONIC condition variable (the GIL): libfaketime measures the time left against
   its faked monotonic clock even when it does not fake it, so every wait times out at once.
   With monotonic time real, a deadline near the real monotonic time goes straight to glibc. */
int pthread_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mutex, const struct timespec *abstime) {
    static int (*next)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
    static int (*libc)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
    if (next == NULL) next = dlvsym(RTLD_NEXT, "pthread_cond_timedwait", "GLIBC_2.3.2");
    if (!monotonic_faked()) {
        struct timespec mono;
        syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &mono);
        long long apart = (long long)abstime->tv_sec - mono.tv_sec;
        if (apart < 86400LL * 365 && apart > -86400LL * 365) {
            if (libc == NULL) {
                void *handle = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
                if (handle != NULL) libc = dlvsym(handle, "pthread_cond_timedwait", "GLIBC_2.3.2");
            }
            if (libc != NULL) return libc(cond, mutex, abstime);
        }
    }
    return next(cond, mutex, abstime);
}
"""


class ClockUnavailable(FaultUnavailable):
    """libfaketime or a C compiler is missing, or the clock control was misused."""


def _compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def shim_path() -> Path:
    digest = hashlib.sha256(SHIM_SOURCE.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / "raftmq-chaos" / f"faketime-shim-{digest}.so"


def shim() -> Path:
    """The shim's shared object, built on first use (named by its source's hash)."""
    target = shim_path()
    if target.exists():
        return target
    compiler = _compiler()
    if compiler is None:
        raise ClockUnavailable("the clock nemesis builds a small preload library: it needs a C compiler "
                               "(apt-get install -y gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        source, built = Path(work) / "shim.c", Path(work) / "shim.so"
        source.write_text(SHIM_SOURCE)
        result = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(built), str(source), "-ldl"],
                                capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS)
        if result.returncode != 0:
            raise ClockUnavailable(f"building the libfaketime shim failed: {result.stderr.strip()[-500:]}")
        os.replace(built, target)  # atomic: a concurrent builder's copy is the same bytes
    return target


def available() -> str | None:
    """None when clock faults can be injected here; otherwise why not."""
    if not sys.platform.startswith("linux"):
        return f"libfaketime clock faults need Linux (this is {sys.platform})"
    if not LIBRARY.exists():
        return f"{LIBRARY} is missing (apt-get install -y libfaketime)"
    try:
        shim()
    except (ClockUnavailable, OSError, subprocess.SubprocessError) as e:
        return str(e)
    return None


def process_start(pid: int) -> float:
    """When `pid` started, in seconds since the epoch on the real clock (to within a clock tick,
    10 ms): /proc gives its start in ticks since boot, CLOCK_BOOTTIME the time since boot."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError as e:
        raise ClockUnavailable(f"no process {pid}: {e}") from e
    ticks = int(stat[stat.rfind(")") + 2:].split()[19])
    since_boot = ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot)


def remove_leftovers(pid: int) -> int:
    """Remove the shared memory and semaphore libfaketime made for `pid` (left behind when it
    was killed); how many files went. Refuses while the process lives."""
    if Path(f"/proc/{pid}").exists():
        raise ClockUnavailable(f"process {pid} still runs: its libfaketime state is in use")
    removed = 0
    for name in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"):
        try:
            (SHM_DIR / name).unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed


class ClockControl:
    """The clocks of one process started with `env()` / `environ()`, moved by rewriting its
    control file. The state is ours (offset, rate); the file only mirrors it."""

    def __init__(self, path: Path, *, wall_only: bool = True) -> None:
        self.path = Path(path)
        self.wall_only = wall_only
        self._offset = 0.0  # libfaketime's offset (seconds)
        self._rate = 1.0
        self._start: float | None = None  # the process's start (real epoch seconds), from attach()
        self._write()  # a missing file would fall back to ~/.faketimerc or /etc/faketimerc

    # -- starting the process ------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The variables to add to the process's environment (LD_PRELOAD replaces any other
        preload: use `environ` to keep one)."""
        return {
            "LD_PRELOAD": f"{shim()}:{LIBRARY}",
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1" if self.wall_only else "0",
        }

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """A whole environment: `base` (default ours) without variables that would override the
        control file, plus `env()`, keeping a preload already there after ours."""
        merged = dict(os.environ if base is None else base)
        for name in OVERRIDING_VARIABLES:
            merged.pop(name, None)
        added = self.env()
        if merged.get("LD_PRELOAD"):
            added["LD_PRELOAD"] = f"{added['LD_PRELOAD']}:{merged['LD_PRELOAD']}"
        merged.update(added)
        return merged

    def attach(self, pid: int) -> None:
        """Note when the process started (what `rate`, and `skew` under a rate, compute from)."""
        self._start = process_start(pid)

    # -- faults --------------------------------------------------------------------------------

    @property
    def rate_factor(self) -> float:
        return self._rate

    def deviation(self) -> float:
        """How far the process's wall clock is from the real one now (seconds; + is ahead)."""
        if self._rate == 1.0:
            return self._offset
        return self._offset + (time.time() - self._need_start("deviation")) * (self._rate - 1.0)

    def skew(self, seconds: float) -> None:
        """From now on the process's clock(s) read `seconds` ahead of real time (behind when
        negative), running at the current rate."""
        if self._rate == 1.0:
            self._offset = float(seconds)
        else:
            self._offset = float(seconds) - (time.time() - self._need_start("skew")) * (self._rate - 1.0)
        self._write()

    def jump(self, seconds: float) -> None:
        """A sudden step of `seconds` relative to the current skew."""
        self._offset += float(seconds)
        self._write()

    def rate(self, factor: float) -> None:
        """From now on the clock(s) run `factor` times as fast as real time (2: twice, 0.5: half),
        continuing from their current reading."""
        if not 0.01 <= factor <= 100:
            raise ClockUnavailable(f"a clock rate must lie between 0.01 and 100, not {factor}")
        if factor == self._rate:
            return
        # Keep the reading continuous: libfaketime scales the whole time since the start.
        elapsed = time.time() - self._need_start("rate")
        self._offset += elapsed * (self._rate - factor)
        self._rate = float(factor)
        self._write()

    def reset(self) -> None:
        """Real time again, at real speed (a step for a process that was skewed)."""
        self._offset, self._rate = 0.0, 1.0
        self._write()

    # -- the control file ----------------------------------------------------------------------

    def _need_start(self, what: str) -> float:
        if self._start is None:
            raise ClockUnavailable(f"{what} at a rate other than 1 needs the process: call attach(pid) first")
        return self._start

    def _write(self) -> None:
        # Fixed-point, no exponent and none of libfaketime's unit letters (m, h, d, y); the 'x'
        # is always there because libfaketime keeps the last rate it saw when a line has none.
        line = f"{self._offset:+.6f} x{self._rate:.6f}\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        temporary.write_text(line)
        os.replace(temporary, self.path)  # the process reads it on every call: never half-written
