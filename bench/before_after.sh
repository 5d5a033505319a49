#!/usr/bin/env bash
# Before/after in one sitting: the same `raftmq bench` cases, each for DURATION seconds, against
# the built-in 3-node group (`raftmq up`) of two checkouts, alternately, then against a 3-node
# RabbitMQ quorum queue ($RAFTMQ_PEERS_DIR/start_rabbitmq.sh). Prints one line per run and writes JSON per run.
#
#   bench/before_after.sh BEFORE_CHECKOUT AFTER_CHECKOUT [DURATION] [OUT_DIR]
#
# Each checkout needs its own .venv (python3 -m venv .venv && .venv/bin/pip install -e .).
# The cluster runs in a fresh temp dir per run; the bench measures the group's leader (found
# with `raftmq status --json`, which both old and new checkouts have).
set -euo pipefail
before=$(cd "$1" && pwd); after=$(cd "$2" && pwd)
duration=${3:-60}; out=${4:-$(mktemp -d /tmp/raftmq-before-after.XXXX)}
peers=${RAFTMQ_PEERS_DIR:-}  # the folder holding start_rabbitmq.sh and stop_rabbitmq.sh
mkdir -p "$out"
cases=("1x1 -p 1 -c 1 --receipt-window 1" "4x4 -p 4 -c 4 --receipt-window 100")

summary() {  # one line from a bench JSON
  python3 - "$1" "$2" <<'EOF'
import json, sys
r = json.load(open(sys.argv[2]))
rl, el = r.get("receipt_latency_ms", {}), r.get("e2e_latency_ms", {})
print(f"{sys.argv[1]:<22} publish {r['publish_rate']:9.0f} msg/s  e2e {r['consume_rate']:9.0f} msg/s  "
      f"receipt p50 {rl.get('p50', float('nan')):7.2f} p99 {rl.get('p99', float('nan')):8.2f} ms  "
      f"e2e p50 {el.get('p50', float('nan')):8.2f} p99 {el.get('p99', float('nan')):8.2f} ms  "
      f"lost {r.get('lost', '?')} dup {r.get('duplicated', '?')} errors {r.get('error_count', r.get('errors', '?'))}")
EOF
}

run_raftmq() {  # checkout label case...
  local checkout=$1 label=$2; shift 2
  local work; work=$(mktemp -d /tmp/raftmq-ba-run.XXXX)
  (cd "$work" && "$checkout/.venv/bin/raftmq" up --detach >/dev/null)
  local leader
  leader=$(cd "$work" && "$checkout/.venv/bin/raftmq" status --json | python3 -c '
import json, sys
s = json.load(sys.stdin); g = s["groups"][0]
print(next(r["client"] for r in g["nodes"] if r["role"] == "leader"))')
  local name=$1; shift
  (cd "$work" && "$checkout/.venv/bin/raftmq" bench --url "stomp://$leader" -s 1024 --persistent --ack client-individual \
     --duration "$duration" -q --json "$out/$label-$name.json" "$@" >/dev/null) || true
  summary "$label $name" "$out/$label-$name.json"
  (cd "$work" && "$checkout/.venv/bin/raftmq" down >/dev/null)
  rm -rf "$work"
}

for spec in "${cases[@]}"; do
  read -r -a words <<<"$spec"
  run_raftmq "$before" before "${words[@]}"
  run_raftmq "$after" after "${words[@]}"
done

if [ -z "$peers" ]; then
  echo "RAFTMQ_PEERS_DIR is not set (the folder holding start_rabbitmq.sh): peer runs skipped"
elif command -v rabbitmq-server >/dev/null; then
  "$peers/start_rabbitmq.sh" cluster >/dev/null
  for spec in "${cases[@]}"; do
    read -r -a words <<<"$spec"
    name=${words[0]}
    "$after/.venv/bin/raftmq" bench --url stomp://127.0.0.1:61641 --vhost / --login guest --passcode guest \
      -H x-queue-type:quorum -s 1024 --persistent --ack client-individual --duration "$duration" -q \
      --json "$out/rabbitmq-$name.json" "${words[@]:1}" >/dev/null || true
    summary "rabbitmq-quorum $name" "$out/rabbitmq-$name.json"
  done
  "$peers/stop_rabbitmq.sh" cluster >/dev/null
else
  echo "RabbitMQ not installed (apt-get install -y --no-install-recommends rabbitmq-server): peer runs skipped"
fi
echo "JSON: $out"
