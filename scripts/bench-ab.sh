#!/usr/bin/env bash
# Kept with docs/benchmarks-history.md "Acceptance runs and an A/B": compares two orderly binaries run by turns.
# A/B: for each config, run binary A then binary B (same orders/rate), print one row each.
# usage: ab.sh A B orders rate reps configs...   configs: sqlite pg1 pg3 my1 my3
set -uo pipefail
A=$1 B=$2 orders=$3 rate=$4 reps=$5; shift 5
fresh_pg() { psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS ab" -c "CREATE DATABASE ab" >/dev/null; }
fresh_my() { mariadb -h 127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS ab; CREATE DATABASE ab"; }
one() { # bin cfg
  local bin=$1 cfg=$2 args=()
  case $cfg in
    sqlite) ;;
    pg1) fresh_pg; args=(--database-url 'postgres://postgres@127.0.0.1:5432/ab?sslmode=disable');;
    pg3) fresh_pg; args=(--instances 3 --kill-every 5s --database-url 'postgres://postgres@127.0.0.1:5432/ab?sslmode=disable');;
    my1) fresh_my; args=(--database-url 'mysql://root@127.0.0.1:3306/ab');;
    my3) fresh_my; args=(--instances 3 --kill-every 5s --database-url 'mysql://root@127.0.0.1:3306/ab');;
  esac
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  "$bin" simulate --orders "$orders" --rate "$rate" --json "${args[@]}" 2>/dev/null | jq -r --arg b "$(basename "$bin")" --arg c "$cfg" --arg l "$load" \
    '"| \($c) | \($b) | \(.orders_per_s|floor) | \(.lateness_ms.p50) | \(.lateness_ms.p90) | \(.lateness_ms.p99) | \(.lateness_ms.max) | \(.violations|length) | \(.early_closes) | \($l) |"'
}
echo "| config | binary | orders/s | p50 | p90 | p99 | max | violations | early | load |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for cfg in "$@"; do for r in $(seq "$reps"); do one "$A" "$cfg"; one "$B" "$cfg"; done; done
