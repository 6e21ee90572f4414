#!/bin/bash
# Threads against processes without a step, GIL build, ROUNDS rounds (default 12), the order of the two alternating each round:
#   ROUNDS=10 bash bench/results/thread_streams_2026-11-27c/ab_rounds.sh DATA > ab_10_rounds.txt
# DATA: a folder with folder/ and shards/ as bench/bench_thread_streams.py writes them (it prints its scratch folder).
# Each line: round, source, mode, steady img/s, CPU ms an image, first batch ms, device step ms a batch.
DATA=${1:?DATA folder}
cd "$(dirname "$0")/../../.."
for r in $(seq 1 ${ROUNDS:-12}); do
  for src in map stream; do
    if [ $((r % 2)) = 1 ]; then order="thread process"; else order="process thread"; fi
    for m in $order; do
      out=$(.venv/bin/python bench/bench_thread_streams.py --one "$DATA" $src $m none --epochs 8 | tail -1)
      echo "$r $src $m $out" | python3 -c "import sys,json; r,s,m,j=sys.stdin.read().split(' ',3); d=json.loads(j); print(r,s,m,round(d['ips']),round(d['cpu_ms'],3),round(d['first']*1e3),round(d['stages']['device'],1))"
    done
  done
done
