"""The operating-system packages `raftmq chaos` needs, installed when it can be (root on Debian),
otherwise named: `python3 -m chaos.system_packages` (standard library only, so it runs before
the virtual environment exists; the README's test command starts with it).

What each part needs (Debian package names):
- partitions and packet faults (chaos.netns, chaos.packet_queue): iproute2,
  iptables, libnetfilter-queue1, and root;
- power loss (chaos.lazyfs): fuse3 (fusermount3, libfuse3) and /dev/fuse, and root;
- clock faults (chaos.clock_fault): libfaketime, and gcc for the small preload built beside it;
- disk-full (chaos.disk): root (a tmpfs is mounted);
- and, not for chaos but for the Spark audit beside it (spark_audit): a Java 17 runtime,
  openjdk-17-jre-headless, for pyspark's JVM;
- and, for the install that compiles raftmq's hot modules (setup.py, raftmq/compiled.py): gcc
  and the running interpreter's headers (python3-dev; without them raftmq installs pure Python);
- and, for the web console's browser test, chromium and chromium-driver
  (tests/server/test_console_browser.py, through selenium; it fails, not skips, without them);
- and, for the stompjs tests (tests/server/test_stompjs.py: stompjs over WebSocket in Node and
  in chromium), nodejs and npm (`npm ci` installs the pinned JavaScript packages).

Where a part cannot run, its tests skip and print why (each module's `available()`); nothing
here fails the command: it exits 0 and says what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

PACKAGES = {  # Debian package -> a file that shows it is installed
    "iproute2": "/usr/sbin/ip",
    "iptables": "/usr/sbin/iptables",
    "fuse3": "/usr/bin/fusermount3",
    "libnetfilter-queue1": "/usr/lib/x86_64-linux-gnu/libnetfilter_queue.so.1",
    "libfaketime": "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "gcc": "/usr/bin/gcc",
    "openjdk-17-jre-headless": "/usr/bin/java",
    "chromium": "/usr/bin/chromium",
    "chromium-driver": "/usr/bin/chromedriver",
    "nodejs": "/usr/bin/node",
    "npm": "/usr/bin/npm",
    "python3-dev": str(Path(sysconfig.get_paths()["include"], "Python.h")),
}


def missing() -> list[str]:
    arch = _multiarch()
    return [name for name, path in PACKAGES.items() if not Path(path.replace("x86_64-linux-gnu", arch)).exists()]


def _multiarch() -> str:
    try:
        out = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or "x86_64-linux-gnu"


def main() -> int:
    wanted = missing()
    if not wanted:
        print("chaos: every system package is here")
        return 0
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"chaos: installing {' '.join(wanted)}", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        update = subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
        install = subprocess.run(["apt-get", "install", "-y", "-qq", *wanted], env=env, check=False,
                                 stdout=subprocess.DEVNULL)
        if update.returncode == 0 and install.returncode == 0:
            return 0
        print("chaos: apt-get failed; the chaos tests that need these packages will skip and say why", file=sys.stderr)
        return 0
    why = "not root" if os.geteuid() != 0 else "no apt-get"
    print(f"chaos: {why}, so not installing {' '.join(wanted)}; the chaos tests that need them skip and say why "
          f"(as root on Debian: apt-get install -y {' '.join(wanted)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
