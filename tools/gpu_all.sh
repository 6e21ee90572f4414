#!/usr/bin/env bash
# The GPU kit in one call of the device tool: every step of tools/gpu_run.sh, the most important results first, each
# capped by the time left so that a slow step loses only itself. Make the kit here first (bash tools/gpu_kit.sh), then:
#   run(command="bash tools/gpu_all.sh", carry=[".whl"], timeout_s=540)
# Steps, each's cap in seconds (its expected time on an H200 in brackets):
#   setup 90 [~20]   model 75 [~25]   data 90 [~20]   train same-batch 80 [~30] (train.py's own ceiling: one batch
#   already on the GPU every step)   train timmdata 110 [~40]   train timmdata-device 110 [~40]   train timm 120 [~45]
#   tests 90 [~35]   bench 110 [~50]   profile 60 [~25]   ~370 s expected on an H200, GPU_ALL_S=530 at most in all
# After each step, summary.json is rewritten and the results folder packed into $OUT/gpu_DATE_CARD/ (summary.json,
# env.txt, logs.tar.gz): a call cut short still brings back what the steps before had measured. Copy that folder into
# bench/results/ (tar xzf logs.tar.gz there for the logs).
# A rehearsal on a CPU machine (tiny sizes, the venv's Python, the checkout's own extension):
#   PY=.venv/bin/python GPU_RUN_CPU=1 bash tools/gpu_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
BUDGET=${GPU_ALL_S:-530}
export OUT=${OUT:-out/gpu/back}
card=$({ [ -z "${GPU_RUN_CPU:-}" ] && nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1; } \
  | sed -E 's/^NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z' | grep . || echo cpu)
export GPU_RUN_W=${GPU_RUN_W:-out/gpu/gpu_$(date -u +%F)_$card}
export GPU_RUN_NO_PACK=1 GPU_RUN_SUITE_S=0  # the whole test suite: only in `gpu_run.sh tests` alone
rm -rf "$GPU_RUN_W" && mkdir -p "$GPU_RUN_W" "$OUT"
: > "$GPU_RUN_W/steps.tsv"

step() {  # step NAME CAP gpu_run.sh's arguments...: run it with at most CAP seconds, fewer if less time is left
  local name=$1 cap=$2; shift 2
  local left=$((BUDGET - (SECONDS - t0) - 15))  # 15 s kept for the last summary and pack
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt 20 ]; then
    echo "######## $name: skipped, $left s left"; printf '%s\t%s\t%s\t%s\n' "$name" 124 0 0 >> "$GPU_RUN_W/steps.tsv"; return
  fi
  echo "######## $name (at $((SECONDS - t0)) s, at most $cap s)"
  local s0=$SECONDS
  GPU_RUN_CAP=$cap bash tools/gpu_run.sh "$@"
  local rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - s0))" "$cap" >> "$GPU_RUN_W/steps.tsv"
  bash tools/gpu_run.sh summary > /dev/null 2>&1
  bash tools/gpu_run.sh pack
}

step setup 90 setup || true
step model_alone 75 model
step data 90 data
step train_same_batch 80 train same-batch
step train_timmdata 110 train timmdata
step train_timmdata_device 110 train timmdata-device
step train_timm 120 train timm
step tests 90 tests
step bench 110 bench
step profile 60 profile
bash tools/gpu_run.sh summary
bash tools/gpu_run.sh pack
echo "######## done in $((SECONDS - t0)) s; back in $OUT: $(cd "$OUT" && find . -type f | sort | tr '\n' ' ')"
