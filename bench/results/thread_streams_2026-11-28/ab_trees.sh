#!/bin/bash
# Threads against processes, no step, GIL build, this tree and OLDTREE (a copy of an earlier commit with the built
# extension) in one run: ROUNDS rounds (default 10), each contender a fresh process, the order rotating each round:
#   ROUNDS=10 bash bench/results/thread_streams_2026-11-28/ab_trees.sh DATA OLDTREE > ab_trees_runs.txt
# SOURCES="stream" (default "map stream") runs only those sources; STEP (default none) the model step: none,
# sleep:MS or cpu (bench/bench_thread_streams.py --one).
# DATA: a folder with folder/ and shards/ as bench/bench_thread_streams.py writes them (it prints its scratch folder).
# OLDTREE: e.g. `git worktree add /tmp/old COMMIT && cp timmdata/*.so /tmp/old/timmdata/`.
# Each line: round, source, tree, mode, steady img/s, CPU ms an image, first batch ms, device step ms a batch.
DATA=${1:?DATA folder}; OLD=${2:?OLDTREE}
cd "$(dirname "$0")/../../.."
for r in $(seq 1 ${ROUNDS:-10}); do
  for src in ${SOURCES:-map stream}; do
    runs=("new thread" "new process" "old thread" "old process")
    k=$((r % 4)); runs=("${runs[@]:$k}" "${runs[@]:0:$k}")
    for run in "${runs[@]}"; do
      set -- $run
      if [ "$1" = old ]; then pp=$OLD; else pp=; fi
      out=$(PYTHONPATH=$pp .venv/bin/python bench/bench_thread_streams.py --one "$DATA" $src $2 ${STEP:-none} --epochs 8 | tail -1)
      echo "$r $src $1 $2 $out" | python3 -c "import sys,json; r,s,t,m,j=sys.stdin.read().split(' ',4); d=json.loads(j); print(r,s,t,m,round(d['ips']),round(d['cpu_ms'],3),round(d['first']*1e3),round(d['stages']['device'],1))"
    done
  done
done
