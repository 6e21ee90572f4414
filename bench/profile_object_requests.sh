#!/usr/bin/env bash
# perf over each way of bench/object_store_request_cpu.py (12,000 timed requests, 6 s sampled): the CPU a request and
# the share of the process's samples by library and by symbol, written to OUT (default bench/results/object_requests).
#   make s3rver && bash bench/profile_object_requests.sh bench/results/NAME
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/object_requests}
mkdir -p "$out"
ready=$(mktemp -u)
for way in obstore_threads obstore_loop range_threads get_many; do
  rm -f "$ready"
  .venv/bin/python bench/object_store_request_cpu.py $way 12000 --ready "$ready" > "$out/$way.txt" 2>&1 &
  while [ ! -s "$ready" ]; do sleep 0.2; done
  perf record -F 999 -g -p "$(cat "$ready")" -o "$out/$way.perf.data" -- sleep 6 > /dev/null 2>&1
  wait
  tail -1 "$out/$way.txt" | tee -a "$out/profile_cpu.txt"
  perf report -i "$out/$way.perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -8 > "$out/profile_$way.dso.txt"
  perf report -i "$out/$way.perf.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -25 > "$out/profile_$way.sym.txt"
  rm -f "$out/$way.perf.data" "$out/$way.txt"
done
