#!/usr/bin/env bash
# The nodes' CPU while idle (the ticker, heartbeats, housekeeping). For each LABEL=CHECKOUT given
# (in that order; alternate them): a fresh 3-member group from that checkout's configs/group.toml
# (free loopback ports, data in a temp dir) under `raftmq up --detach` with PYTHONPATH=CHECKOUT,
# 5 s to settle, then the three nodes' CPU seconds (utime + stime from /proc) over DURATION s
# with no client, then `raftmq down`.
#
#   git worktree add /tmp/ab-before OLD_COMMIT; git worktree add /tmp/ab-after NEW_COMMIT
#   bench/idle_cpu.sh 30 before=/tmp/ab-before after=/tmp/ab-after before=/tmp/ab-before after=/tmp/ab-after
#
# Prints one line per run: label, commit, 1-minute load average at the start, CPU seconds.
# PY (default: this repository's .venv/bin/python, else python3) is the interpreter.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z ${PY:-} ]]; then
  if [[ -x $repo/.venv/bin/python ]]; then PY=$repo/.venv/bin/python; else PY=python3; fi
fi
if (($# < 2)); then
  echo "usage: $0 DURATION LABEL=CHECKOUT [LABEL=CHECKOUT ...]" >&2
  exit 2
fi
duration=$1; shift

# Writes g1.toml in the cwd: CHECKOUT's configs/group.toml with data_dir and every address
# replaced (free loopback ports). Uses this repository's bench/node_group.py for the TOML writer.
group_file() {
  PYTHONPATH="$repo" "$PY" "$repo/bench/node_group.py" "$1" > /dev/null
}

# The group's nodes' CPU seconds so far, by the pids in its state file.
nodes_cpu() {
  PYTHONPATH="$1" "$PY" -c '
import os
from pathlib import Path
from raftmq.ops.launcher import read_state
s = read_state(Path("g1")); tick = os.sysconf("SC_CLK_TCK")
print(sum(sum(map(int, open(f"/proc/{n.pid}/stat").read().rsplit(")", 1)[1].split()[11:13])) for n in s.nodes) / tick)'
}

for spec in "$@"; do
  label=${spec%%=*}; tree=$(cd "${spec#*=}" && pwd)
  work=$(mktemp -d /tmp/idle-cpu.XXXX)
  cd "$work"
  imported=$(PYTHONPATH="$tree" "$PY" -c 'import raftmq; print(raftmq.__file__)')
  if [[ $imported != "$tree/raftmq/__init__.py" ]]; then
    echo "$label: PYTHONPATH=$tree imports $imported, not the checkout" >&2; exit 1
  fi
  group_file "$tree"
  PYTHONPATH="$tree" timeout 120 "$PY" -m raftmq up --detach --config g1.toml --timeout 60 >up.log 2>&1 \
    || { cat up.log >&2; exit 1; }
  sleep 5
  load=$(cut -d' ' -f1 /proc/loadavg)
  c0=$(nodes_cpu "$tree"); sleep "$duration"; c1=$(nodes_cpu "$tree")
  PYTHONPATH="$tree" timeout 120 "$PY" -m raftmq down --config g1.toml >/dev/null 2>&1 || true
  used=$("$PY" -c "print(f'{$c1 - $c0:.2f}')")
  echo "$label $(git -C "$tree" rev-parse --short HEAD) load $load idle nodes' CPU over ${duration} s: $used s"
  cd /; rm -rf "$work"
done
