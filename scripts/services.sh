#!/usr/bin/env bash
# The real services cluster mode runs on (NATS, etcd, PostgreSQL), started
# as this script's own children on free loopback ports with temporary data
# directories, so a machine's own services on the default ports (4222, 2379,
# 5432) are never used and never collided with. Tests, CI and
# `cargo xtask cluster up` all start their services through this script.
#
#   scripts/services.sh install                 install what is missing (Debian)
#   scripts/services.sh up DIR [nats] [etcd] [pg]
#        start the named services (all three by default) under DIR; writes
#        DIR/env (NATS_URL, NATS_MONITOR_URL, ETCD_ENDPOINTS, DATABASE_URL)
#        and DIR/pids, prints the env lines, returns once every one is ready
#   scripts/services.sh down DIR               stop exactly what `up` started
#   scripts/services.sh restart-etcd DIR       kill -9 etcd, start it again
#        on the same ports and data (fault tests)
#
# Ports come from the environment (NATS_PORT, NATS_MONITOR_PORT, ETCD_PORT,
# ETCD_PEER_PORT, PG_PORT) or are picked free by the kernel (PostgreSQL: a
# new free port on a failed start, at most PG_START_ATTEMPTS, default 3).
set -euo pipefail

PG_BIN=${PG_BIN:-}
if [[ -z "$PG_BIN" ]]; then
  for v in 17 16 15 14 13; do
    if [[ -x /usr/lib/postgresql/$v/bin/initdb ]]; then PG_BIN=/usr/lib/postgresql/$v/bin; break; fi
  done
fi
NATS_BIN=$(command -v nats-server || echo /usr/sbin/nats-server)

install_missing() {
  local need=()
  command -v etcd >/dev/null || need+=(etcd-server)
  command -v etcdctl >/dev/null || need+=(etcd-client)
  [[ -x "$NATS_BIN" ]] || need+=(nats-server)
  [[ -n "$PG_BIN" ]] || need+=(postgresql)
  command -v curl >/dev/null || need+=(curl)
  # The voice conformance stage and the SFU's TLS test make a throwaway
  # certificate with it.
  command -v openssl >/dev/null || need+=(openssl)
  command -v python3 >/dev/null || need+=(python3)
  if ((${#need[@]})); then
    echo "installing: ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_http() { # url, name, log
  for _ in $(seq 200); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "$2 did not become ready; its log:" >&2
  cat "$3" >&2 || true
  return 1
}

as_pg() { # initdb refuses root: run PostgreSQL as its own user then
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_etcd() { # dir, client port, peer port
  etcd --name guildhall --data-dir "$1/etcd" \
    --listen-client-urls "http://127.0.0.1:$2" --advertise-client-urls "http://127.0.0.1:$2" \
    --listen-peer-urls "http://127.0.0.1:$3" --initial-advertise-peer-urls "http://127.0.0.1:$3" \
    --initial-cluster "guildhall=http://127.0.0.1:$3" --log-level warn >>"$1/etcd.log" 2>&1 &
  echo "etcd $!" >>"$1/pids"
  wait_http "http://127.0.0.1:$2/health" etcd "$1/etcd.log"
}

# kill -9 etcd and start it again on the same ports and data: every client
# connection and watch breaks (fault tests: reconnect and re-list).
restart_etcd() {
  local dir=$1 pid
  pid=$(awk '$1 == "etcd" { p = $2 } END { print p }' "$dir/pids")
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  grep -v "^etcd $pid\$" "$dir/pids" >"$dir/pids.new" || true
  mv "$dir/pids.new" "$dir/pids"
  read -r port peer <"$dir/etcd.ports"
  start_etcd "$dir" "$port" "$peer"
}

up() {
  local dir=$1; shift
  local want=("$@")
  ((${#want[@]})) || want=(nats etcd pg)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  chmod 755 "$dir"
  : >"$dir/env"
  : >"$dir/pids"
  for s in "${want[@]}"; do
    case $s in
      nats)
        local port=${NATS_PORT:-$(free_port)} mon=${NATS_MONITOR_PORT:-$(free_port)}
        mkdir -p "$dir/nats"
        "$NATS_BIN" -a 127.0.0.1 -p "$port" -m "$mon" -sd "$dir/nats" >"$dir/nats.log" 2>&1 &
        echo "nats $!" >>"$dir/pids"
        wait_http "http://127.0.0.1:$mon/healthz" nats "$dir/nats.log"
        echo "NATS_URL=nats://127.0.0.1:$port" >>"$dir/env"
        echo "NATS_MONITOR_URL=http://127.0.0.1:$mon" >>"$dir/env"
        ;;
      etcd)
        local port=${ETCD_PORT:-$(free_port)} peer=${ETCD_PEER_PORT:-$(free_port)}
        echo "$port $peer" >"$dir/etcd.ports"
        start_etcd "$dir" "$port" "$peer"
        echo "ETCD_ENDPOINTS=http://127.0.0.1:$port" >>"$dir/env"
        ;;
      pg)
        local port
        [[ -n "$PG_BIN" ]] || { echo "PostgreSQL not installed: run '$0 install'" >&2; return 1; }
        mkdir -p "$dir/pg" "$dir/pgsock"
        [[ $(id -u) == 0 ]] && chown postgres:postgres "$dir/pg" "$dir/pgsock"
        # (The postgres user must be able to reach DIR: every parent
        # directory needs o+x.)
        as_pg "$PG_BIN/initdb" -D "$dir/pg/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 \
          || { echo "initdb failed (can the postgres user reach $dir?):" >&2; cat "$dir/initdb.log" >&2; return 1; }
        # fsync off: these databases are thrown away with the directory.
        # A kernel-picked port can be taken by another process starting at
        # the same moment (parallel tests) before PostgreSQL binds it:
        # then a new port is picked, at most PG_START_ATTEMPTS times.
        local attempt started=""
        for ((attempt = 1; attempt <= ${PG_START_ATTEMPTS:-3}; attempt++)); do
          port=${PG_PORT:-$(free_port)}
          if as_pg "$PG_BIN/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w -t 30 \
            -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/pgsock -c fsync=off -c max_connections=200" \
            start >/dev/null; then
            started=1
            break
          fi
          [[ -z "${PG_PORT:-}" ]] || break
        done
        [[ -n "$started" ]] || { echo "PostgreSQL did not start; its log:" >&2; cat "$dir/pg/log" >&2; return 1; }
        echo "pg $PG_BIN/pg_ctl $dir/pg/data" >>"$dir/pids"
        as_pg "$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres guildhall
        echo "DATABASE_URL=postgres://postgres@127.0.0.1:$port/guildhall" >>"$dir/env"
        ;;
      *) echo "unknown service: $s (nats, etcd, pg)" >&2; return 2 ;;
    esac
  done
  cat "$dir/env"
}

down() {
  local dir=$1
  [[ -f "$dir/pids" ]] || return 0
  while read -r name pid rest; do
    case $name in
      pg) read -r ctl data <<<"$pid $rest"; as_pg "$ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true ;;
      *) kill "$pid" 2>/dev/null || true
         # SIGSTOPped by a fault test? It must still be able to die.
         kill -CONT "$pid" 2>/dev/null || true ;;
    esac
  done <"$dir/pids"
  while read -r name pid _; do
    [[ $name == pg ]] && continue
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
  done <"$dir/pids"
  rm -f "$dir/pids"
}

case ${1:-} in
  install) install_missing ;;
  up) shift; [[ $# -ge 1 ]] || { echo "usage: $0 up DIR [nats] [etcd] [pg]" >&2; exit 2; }
      # A service that fails to start takes the ones already started down.
      trap 'down "$1"' ERR
      up "$@" ;;
  down) [[ $# -eq 2 ]] || { echo "usage: $0 down DIR" >&2; exit 2; }; down "$2" ;;
  restart-etcd) [[ $# -eq 2 ]] || { echo "usage: $0 restart-etcd DIR" >&2; exit 2; }; restart_etcd "$2" ;;
  *) sed -n 2,16p "$0" >&2; exit 2 ;;
esac
