#!/usr/bin/env bash
# A whole Guildhall cluster on this machine, for trying cluster mode:
# real NATS, etcd and PostgreSQL (scripts/services.sh, on free loopback
# ports with temporary data directories), then one `guildhall serve`
# process per entry of the layout. Prints the URLs to point a bot at and
# stops every process it started (by PID) on Ctrl-C or when any exits.
#
#   scripts/cluster.sh up [--layout LAYOUT] [--binary PATH] [--dir DIR]
#
# LAYOUT is space separated groups ROLES[*COUNT], ROLES comma separated;
# the default is "gateway,api*2 guilds*3 users*2 presence":
# two gateway+api processes, three guilds, two users, one presence.
# `cargo xtask cluster up` builds the binary and runs this.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
layout="gateway,api*2 guilds*3 users*2 presence"
binary="$here/../target/debug/guildhall"
dir=""
[[ ${1:-} == up ]] || { sed -n 2,14p "$0" >&2; exit 2; }
shift
while (($#)); do
  case $1 in
    --layout) layout=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[[ -x "$binary" ]] || { echo "no guildhall binary at $binary (cargo build -p guildhall)" >&2; exit 1; }
[[ -n "$dir" ]] || dir=$(mktemp -d -t guildhall-cluster-XXXXXX)
mkdir -p "$dir"
chmod 755 "$dir" # PostgreSQL runs as its own user and must reach its data

pids=()
stop() {
  trap - INT TERM EXIT
  echo "stopping ${#pids[@]} guildhall processes and the services" >&2
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
  done
  bash "$here/services.sh" down "$dir/services"
}
trap 'stop; exit 0' INT TERM
trap stop EXIT

bash "$here/services.sh" up "$dir/services" >/dev/null
# shellcheck disable=SC1091
source "$dir/services/env"

worker=0
fronts=()
for group in $layout; do
  roles=${group%%\**}
  count=1
  [[ $group == *\** ]] && count=${group##*\*}
  for i in $(seq "$count"); do
    worker=$((worker + 1))
    name="${roles//,/-}-$i"
    mkdir -p "$dir/nodes/$name"
    "$binary" serve --listen 127.0.0.1:0 --data-dir "$dir/nodes/$name" \
      --roles "$roles" --node-name "$name" --worker-id "$worker" \
      --nats "$NATS_URL" --etcd "$ETCD_ENDPOINTS" --database-url "$DATABASE_URL" \
      2>"$dir/nodes/$name/log" &
    pids+=($!)
    addr=""
    for _ in $(seq 400); do
      addr=$(grep -o 'addr=[0-9.:]*' "$dir/nodes/$name/log" 2>/dev/null | head -1 | cut -d= -f2 || true)
      [[ -n "$addr" ]] && break
      kill -0 "${pids[-1]}" 2>/dev/null || { echo "$name exited:" >&2; cat "$dir/nodes/$name/log" >&2; exit 1; }
      sleep 0.05
    done
    [[ -n "$addr" ]] || { echo "$name did not start; its log: $dir/nodes/$name/log" >&2; exit 1; }
    echo "$name (pid ${pids[-1]}, roles $roles) on $addr"
    [[ ",$roles," == *,api,* || ",$roles," == *,gateway,* ]] && fronts+=("$name=$addr")
  done
done
echo
echo "services: NATS $NATS_URL, etcd $ETCD_ENDPOINTS, PostgreSQL $DATABASE_URL"
for front in "${fronts[@]}"; do
  echo "point a bot at ${front#*=}: REST http://${front#*=}/api/v10, gateway ws://${front#*=} (${front%%=*})"
done
echo "logs under $dir/nodes; Ctrl-C stops everything"
# Until Ctrl-C, or until any process exits (then everything stops).
wait -n "${pids[@]}" || true
echo "a guildhall process exited; see $dir/nodes/*/log" >&2
