#!/bin/bash
# The map-style pass with and without its last batch spread, and processes, rotating the order each round:
#   bash bench/results/thread_streams_2026-11-27c/tail_spread_ab.sh DATA OLDTREE > tail_spread_ab.txt
# OLDTREE: `git archive 9c5b2ee timmdata | tar -x -C OLDTREE` plus the built extensions (timmdata/*.so) copied in.
# Each line: round, tree, source, mode, steady img/s, CPU ms an image, first batch ms, device step ms a batch.
DATA=${1:?DATA folder}; OLD=${2:?OLDTREE}
cd "$(dirname "$0")/../../.."
one() { # label pythonpath src mode
  out=$(env ${2:+PYTHONPATH=$2} .venv/bin/python bench/bench_thread_streams.py --one "$DATA" $3 $4 none --epochs 8 | tail -1)
  echo "$r $1 $3 $4 $out" | python3 -c "import sys,json; r,l,s,m,j=sys.stdin.read().split(' ',4); d=json.loads(j); print(r,l,s,m,round(d['ips']),round(d['cpu_ms'],3),round(d['first']*1e3),round(d['stages']['device'],1))"
}
for r in 1 2 3 4 5 6; do
  case $((r % 3)) in
   1) one new "" map thread; one old "$OLD" map thread; one new "" map process;;
   2) one old "$OLD" map thread; one new "" map process; one new "" map thread;;
   0) one new "" map process; one new "" map thread; one old "$OLD" map thread;;
  esac
done
