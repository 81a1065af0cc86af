#!/usr/bin/env bash
# Upload throughput: one 8 MiB file per request through
# POST /channels/{id}/messages (multipart: payload_json and files[0]) at
# concurrency 1 and 16, against copying the same bytes to the same disk
# (cp, same concurrency) in the same run; and the server's peak RSS.
#
#   scripts/bench_uploads.sh [BINARY] [REQUESTS]
#
# BINARY defaults to target/release/guildhall (cargo build --release -p
# guildhall), REQUESTS to 32 per concurrency. The server runs in embedded
# mode on a free loopback port with its data in a temp dir, and is stopped
# by its PID at the end whatever happens.
set -euo pipefail
bin=${1:-target/release/guildhall}
requests=${2:-32}
file_mib=8
dir=$(mktemp -d)
pid=
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port/api/v10"
# The REST buckets would pace a benchmark's requests; lift them.
GUILDHALL_REST_RATE_LIMIT_PER_WINDOW=1000000 \
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" >"$dir/server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.1
done
json() { python3 -c "import json, sys; print(json.load(sys.stdin)$1)"; }
token=$(curl -sf -X POST "$base/auth/register" -H 'content-type: application/json' \
  -d '{"username": "bench", "password": "bench-password"}' | json '["token"]')
channel=$(curl -sf -X POST "$base/guilds" -H 'content-type: application/json' \
  -H "authorization: $token" -d '{"name": "bench"}' | json '["channels"][0]["id"]')
head -c $((file_mib * 1024 * 1024)) /dev/urandom >"$dir/file.bin"
export token channel base dir

upload() {
  curl -s -o /dev/null -w '%{http_code}\n' -H "authorization: $token" \
    -F 'payload_json={"content": "bench"}' -F "files[0]=@$dir/file.bin;filename=file.bin" \
    "$base/channels/$channel/messages"
}
copy() {
  cp "$dir/file.bin" "$dir/copy-$1"
}
export -f upload copy

# MiB/s of REQUESTS runs of FUNCTION at concurrency C.
rate() {
  local function=$1 c=$2 start end
  start=$(date +%s.%N)
  seq "$requests" | xargs -P "$c" -I{} bash -c "$function {}" >"$dir/out"
  end=$(date +%s.%N)
  if [[ $function == upload ]]; then
    local ok
    ok=$(grep -c '^200$' "$dir/out" || true)
    [[ "$ok" == "$requests" ]] || { echo "only $ok of $requests uploads answered 200" >&2; exit 1; }
  fi
  rm -f "$dir"/copy-*
  python3 -c "print(f'{$requests * $file_mib / ($end - $start):.1f}')"
}

printf '%-6s %14s %14s %8s\n' c upload_MiB/s copy_MiB/s ratio
for c in 1 16; do
  up=$(rate upload "$c")
  cp_rate=$(rate copy "$c")
  printf '%-6s %14s %14s %8s\n' "$c" "$up" "$cp_rate" \
    "$(python3 -c "print(f'{$up / $cp_rate:.3f}')")"
done
echo "server peak RSS: $(awk '/VmHWM/ {print $2, $3}' "/proc/$pid/status")"
