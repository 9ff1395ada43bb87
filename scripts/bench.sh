#!/usr/bin/env bash
# Runs the simulate matrix of BENCHMARKS.md in one go and prints one markdown row per run:
# embedded SQLite, PostgreSQL and MariaDB with one and three instances (the latter with an
# instance killed every 5 s). Needs the services of DESIGN.md §9 (start them with .ci/run's
# commands). Usage: scripts/bench.sh [orders] [rate]
set -euo pipefail
cd "$(dirname "$0")/.."
orders=${1:-3000}
rate=${2:-300}
bin=$(mktemp -d)/orderly
go build -o "$bin" ./cmd/orderly
row() { # store instances requested json
  jq -r --arg s "$1" --arg i "$2" --arg r "$3" \
    '"| \($s) | \($i) | \($r)/s | \(.orders_per_s|floor) | \(.lateness_ms.p50) | \(.lateness_ms.p90) | \(.lateness_ms.p99) | \(.lateness_ms.max) | \(.kills // 0) |"' <<<"$4"
}
fresh_pg() { psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null; }
fresh_my() { mariadb -h 127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS $1; CREATE DATABASE $1"; }
run() { "$bin" simulate --orders "$orders" --rate "$rate" --json "$@" 2>/dev/null || true; }

row "SQLite (embedded)" 1 "$rate" "$(run)"
fresh_pg orderly_bench; row PostgreSQL 1 "$rate" "$(run --database-url 'postgres://postgres@127.0.0.1:5432/orderly_bench?sslmode=disable')"
fresh_pg orderly_bench; row PostgreSQL 3 "$rate" "$(run --instances 3 --kill-every 5s --database-url 'postgres://postgres@127.0.0.1:5432/orderly_bench?sslmode=disable')"
fresh_my orderly_bench; row MariaDB 1 "$rate" "$(run --database-url 'mysql://root@127.0.0.1:3306/orderly_bench')"
fresh_my orderly_bench; row MariaDB 3 "$rate" "$(run --instances 3 --kill-every 5s --database-url 'mysql://root@127.0.0.1:3306/orderly_bench')"
psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS orderly_bench" >/dev/null
mariadb -h 127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS orderly_bench"
