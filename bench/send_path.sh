#!/usr/bin/env bash
# Send-path cost, before/after in one sitting. For each LABEL=CHECKOUT given (in that order; give
# them alternately, e.g. before after before after ...): a fresh 3-member group from that
# checkout's own configs/group.toml (free loopback ports, data in a temp dir) under `raftmq up
# --detach`, then `raftmq bench` 1P x 1C, 1 KiB persistent, one receipt in flight,
# client-individual acks, for DURATION s against the group's failover URL, then `raftmq down`.
# Both run with PYTHONPATH=CHECKOUT from the temp dir as cwd, so `python -m raftmq` cannot pick
# up another checkout (the script checks that it does not).
#
#   git worktree add /tmp/ab-before OLD_COMMIT; git worktree add /tmp/ab-after NEW_COMMIT
#   bench/send_path.sh OUT_DIR 60 before=/tmp/ab-before after=/tmp/ab-after before=/tmp/ab-before ...
#
# Prints one line per run (load average before -> after, msg/s, receipt and end-to-end latency,
# the three nodes' CPU seconds) and, at the end, each label's mean and median and the ratios of
# the second label to the first. Keeps OUT_DIR/NN-LABEL.json (the bench's JSON plus a "sitting"
# entry) and the up/bench/down logs. PY (default: this repository's .venv/bin/python, else
# python3) is the interpreter; it needs the checkouts' dependencies installed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z ${PY:-} ]]; then
  if [[ -x $repo/.venv/bin/python ]]; then PY=$repo/.venv/bin/python; else PY=python3; fi
fi
if (($# < 3)); then
  echo "usage: $0 OUT_DIR DURATION LABEL=CHECKOUT [LABEL=CHECKOUT ...]" >&2
  exit 2
fi
out=$1; duration=$2; shift 2
mkdir -p "$out"; out=$(cd "$out" && pwd)

# Writes g1.toml in the cwd: CHECKOUT's configs/group.toml with data_dir and every address
# replaced (free loopback ports); prints the group's failover URL. Uses this repository's
# bench/node_group.py for the TOML writer, so the checkout needs no bench/ of its own.
group_file() {
  PYTHONPATH="$repo" "$PY" "$repo/bench/node_group.py" "$1"
}

# The group's nodes' CPU seconds so far (utime + stime from /proc), by the pids in its state file.
nodes_cpu() {
  PYTHONPATH="$1" "$PY" -c '
import os
from pathlib import Path
from raftmq.ops.launcher import read_state
s = read_state(Path("g1")); tick = os.sysconf("SC_CLK_TCK")
print(sum(sum(map(int, open(f"/proc/{n.pid}/stat").read().rsplit(")", 1)[1].split()[11:13])) for n in s.nodes) / tick)'
}

n=0
for spec in "$@"; do
  n=$((n + 1)); label=${spec%%=*}; tree=$(cd "${spec#*=}" && pwd)
  name=$(printf '%02d-%s' "$n" "$label")
  work=$(mktemp -d /tmp/send-path.XXXX)
  cd "$work"
  imported=$(PYTHONPATH="$tree" "$PY" -c 'import raftmq; print(raftmq.__file__)')
  if [[ $imported != "$tree/raftmq/__init__.py" ]]; then
    echo "$name: PYTHONPATH=$tree imports $imported, not the checkout" >&2; exit 1
  fi
  url=$(group_file "$tree")
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  PYTHONPATH="$tree" timeout 120 "$PY" -m raftmq up --detach --config g1.toml --timeout 60 >"$out/$name.up.log" 2>&1
  cpu0=$(nodes_cpu "$tree")
  rc=0
  PYTHONPATH="$tree" timeout $((duration * 3 + 120)) "$PY" -m raftmq bench --url "$url" -p 1 -c 1 -s 1024 \
    --persistent --receipt-window 1 --ack client-individual --duration "$duration" -q --json "$out/$name.json" \
    >"$out/$name.bench.log" 2>&1 || rc=$?
  cpu1=$(nodes_cpu "$tree")
  load_after=$(cut -d' ' -f1-3 /proc/loadavg)
  PYTHONPATH="$tree" timeout 120 "$PY" -m raftmq down --config g1.toml >"$out/$name.down.log" 2>&1 || true
  "$PY" - "$out/$name.json" "$name" "$rc" "$load_before" "$load_after" "$cpu0" "$cpu1" "$tree" <<'EOF'
import json, subprocess, sys
path, name, rc, lb, la, cpu0, cpu1, tree = sys.argv[1:]
r = json.load(open(path))
commit = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
r["sitting"] = {"name": name, "commit": commit, "exit": int(rc), "load_before": lb, "load_after": la,
                "node_cpu_s": round(float(cpu1) - float(cpu0), 2)}
json.dump(r, open(path, "w"), indent=2)
rl, el = r.get("receipt_latency_ms", {}), r.get("e2e_latency_ms", {})
print(f"{name:<10} {commit} exit {rc} load {lb} -> {la}  publish {r['publish_rate']:7.0f} msg/s e2e {r['consume_rate']:7.0f} msg/s  "
      f"receipt p50 {rl.get('p50', float('nan')):6.2f} p99 {rl.get('p99', float('nan')):6.2f} ms  "
      f"e2e p50 {el.get('p50', float('nan')):6.2f} p99 {el.get('p99', float('nan')):6.2f} ms  "
      f"lost {r.get('lost')} dup {r.get('duplicated')} nodes' CPU {float(cpu1) - float(cpu0):.1f} s", flush=True)
EOF
  cd /; rm -rf "$work"
done

# Per label: mean and median of each figure; then second label / first label.
"$PY" - "$out" "$@" <<'EOF'
import json, statistics, sys
from pathlib import Path
out, specs = Path(sys.argv[1]), sys.argv[2:]
labels = list(dict.fromkeys(spec.split("=", 1)[0] for spec in specs))
figures = {"msg/s": lambda r: r["publish_rate"], "receipt p50": lambda r: r["receipt_latency_ms"]["p50"],
           "receipt p99": lambda r: r["receipt_latency_ms"]["p99"], "e2e p50": lambda r: r["e2e_latency_ms"]["p50"],
           "e2e p99": lambda r: r["e2e_latency_ms"]["p99"],
           "node CPU ms/msg": lambda r: r["sitting"]["node_cpu_s"] * 1000 / max(r["consumed"], 1)}
runs: dict[str, list[dict]] = {label: [] for label in labels}
for n, spec in enumerate(specs, 1):
    label = spec.split("=", 1)[0]
    runs[label].append(json.loads((out / f"{n:02d}-{label}.json").read_text()))
stats = {label: {name: [f(r) for r in rs] for name, f in figures.items()} for label, rs in runs.items()}
for name in figures:
    parts = [f"{label} mean {statistics.fmean(stats[label][name]):.2f} median {statistics.median(stats[label][name]):.2f}"
             for label in labels]
    line = f"{name:<16} " + "; ".join(parts)
    if len(labels) == 2:
        a, b = (stats[label][name] for label in labels)
        line += (f"; {labels[1]}/{labels[0]} means x{statistics.fmean(b) / statistics.fmean(a):.3f}"
                 f" medians x{statistics.median(b) / statistics.median(a):.3f}")
    print(line)
EOF
