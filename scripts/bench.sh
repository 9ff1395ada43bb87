#!/usr/bin/env bash
# Runs the simulate matrix of BENCHMARKS.md in one go and prints one markdown row per run:
# embedded SQLite, PostgreSQL and MariaDB with one and three instances (the latter with an
# instance killed every 5 s). Needs the services of docs/development.md (start them with .ci/run's
# commands). Usage: scripts/bench.sh [orders] [rate]
#
# Every row carries the run's violation count. A run that reports a violation or an early
# close, or gives no result, is named on stderr with its first violations, the other runs
# still go on, and the script exits 1 at the end: a figure from a run that broke an
# invariant is not a benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
orders=${1:-3000}
rate=${2:-300}
bin=$(mktemp -d)/orderly
go build -o "$bin" ./cmd/orderly
failed=0
row() { # store instances requested json
  jq -r --arg s "$1" --arg i "$2" --arg r "$3" \
    '"| \($s) | \($i) | \($r)/s | \(.orders_per_s|floor) | \(.lateness_ms.p50) | \(.lateness_ms.p90) | \(.lateness_ms.p99) | \(.lateness_ms.max) | \(.kills // 0) | \(.violations|length) |"' <<<"$4"
}
fresh_pg() { psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null; }
fresh_my() { mariadb -h 127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS $1; CREATE DATABASE $1"; }
run() { # store instances [simulate flags…]: one run, its row, and its verdict
  local store=$1 instances=$2 json status=0 violations
  shift 2
  json=$("$bin" simulate --orders "$orders" --rate "$rate" --json "$@") || status=$?
  if [ -z "$json" ] || ! jq -e 'has("violations")' >/dev/null 2>&1 <<<"$json"; then
    echo "bench: $store × $instances: simulate gave no result (exit status $status)" >&2
    failed=1
    return
  fi
  row "$store" "$instances" "$rate" "$json"
  violations=$(jq '(.violations|length) + .early_closes' <<<"$json")
  if [ "$status" -ne 0 ] || [ "$violations" -ne 0 ]; then
    echo "bench: $store × $instances: $violations violations (exit status $status):" >&2
    jq -r '.violations[:10][] | "  - " + .' <<<"$json" >&2
    failed=1
  fi
}

run "SQLite (embedded)" 1
fresh_pg orderly_bench; run PostgreSQL 1 --database-url 'postgres://postgres@127.0.0.1:5432/orderly_bench?sslmode=disable'
fresh_pg orderly_bench; run PostgreSQL 3 --instances 3 --kill-every 5s --database-url 'postgres://postgres@127.0.0.1:5432/orderly_bench?sslmode=disable'
fresh_my orderly_bench; run MariaDB 1 --database-url 'mysql://root@127.0.0.1:3306/orderly_bench'
fresh_my orderly_bench; run MariaDB 3 --instances 3 --kill-every 5s --database-url 'mysql://root@127.0.0.1:3306/orderly_bench'
psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS orderly_bench" >/dev/null
mariadb -h 127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS orderly_bench"
if [ "$failed" -ne 0 ]; then
  echo "bench: some runs broke an invariant or gave no result: their figures do not count" >&2
fi
exit "$failed"
