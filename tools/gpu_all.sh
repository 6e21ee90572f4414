#!/usr/bin/env bash
# The GPU kit in one call of the device tool: every step of tools/gpu_run.sh, the most important results first, each
# capped by the time left so that a slow step loses only itself. Make the kit here first (bash tools/gpu_kit.sh), then:
#   run(command="bash tools/gpu_all.sh", carry=[".whl"], timeout_s=560)
# Steps, most wanted first, each's cap in seconds (its expected time on an H200 in brackets, from the runs in
# bench/results/gpu_2026-11-26d_h200: a train.py process costs ~25 s beyond its steps, imports, cudnn's first step,
# workers and teardown):
#   setup 60 [~35]   data 60 [~30]   model 60 [~40]   model cores4 40 [~25]
#   train.py, 2 epochs of 7,680 images (30 steps of 256; 20 measured), each 60 [~30; timm ~35]:
#     timmdata, timmdata-device, timm (16 cores); cores4 timmdata, timmdata-device [~30], timmdata-device-matmul (its
#     resize and warp without Triton's kernels: their A/B) [~25], timm 75 [~45: its workers
#     ~1,000 images/s on 4 cores]; randaug timmdata, timmdata-device, timmdata-device-matmul, timm [~35]
#   bench 70 [~40: timm's loader left out]   tests 60 [~40]   profile 30 [~15]   same-batch 45 [~30]
#   ~535 s expected on an H200 (same-batch last: the first to go), GPU_ALL_S=535 at most in all
# The train.py runs were 3 epochs of 25,600 images (100 steps, 90 measured) when the kit had 4 of them; it has 10 now:
#   GPU_RUN_TRAIN_N=25600 GPU_RUN_EPOCHS=3 gives the longer runs back (about 12 s more each).
# After each step, summary.json is rewritten and the results folder packed into $OUT/gpu_DATE_CARD/ (summary.json,
# env.txt, logs.tar.gz): a call cut short still brings back what the steps before had measured. Copy that folder into
# bench/results/ (tar xzf logs.tar.gz there for the logs).
# GPU_ALL_ONLY=REGEX runs only the steps whose names match (setup and data always): a second call for what the first
# left out, or longer runs of some, e.g. the 4-core and RandAugment runs on 100-step epochs (a 30-step epoch is shorter
# than 16 workers' lookahead of 32 batches, so the workers' figures there are their best case):
#   GPU_ALL_ONLY='cores4|randaug' GPU_RUN_TRAIN_N=25600 GPU_ALL_S=540 bash tools/gpu_all.sh
# A rehearsal on a CPU machine (tiny sizes, the venv's Python, the checkout's own extension):
#   PY=.venv/bin/python GPU_RUN_CPU=1 bash tools/gpu_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
BUDGET=${GPU_ALL_S:-535}
export OUT=${OUT:-out/gpu/back}
card=$({ [ -z "${GPU_RUN_CPU:-}" ] && nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1; } \
  | sed -E 's/^NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z' | grep . || echo cpu)
export GPU_RUN_W=${GPU_RUN_W:-out/gpu/gpu_$(date -u +%F)_$card}
export GPU_RUN_NO_PACK=1 GPU_RUN_SUITE_S=0  # the whole test suite: only in `gpu_run.sh tests` alone
rm -rf "$GPU_RUN_W" && mkdir -p "$GPU_RUN_W" "$OUT"
: > "$GPU_RUN_W/steps.tsv"

step() {  # step NAME CAP gpu_run.sh's arguments...: run it with at most CAP seconds, fewer if less time is left
  local name=$1 cap=$2; shift 2
  if [ -n "${GPU_ALL_ONLY:-}" ] && ! [[ $name =~ ^(setup|data)$ ]] && ! [[ $name =~ $GPU_ALL_ONLY ]]; then
    return  # not among the steps asked for (setup and data always run: the others need them)
  fi
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

export GPU_RUN_BENCH_CONTENDERS=${GPU_RUN_BENCH_CONTENDERS:-timmdata_cpu,timmdata_device,timmdata_device_matmul,timmdata_store}
step setup 60 setup || true
step data 60 data
step model_alone 60 model
step model_alone_cores4 40 model cores4
step train_timmdata 60 train timmdata
step train_timmdata_device 60 train timmdata-device
step train_timm 60 train timm
step train_cores4_timmdata 60 train cores4 timmdata
step train_cores4_timmdata_device 60 train cores4 timmdata-device
step train_cores4_timmdata_device_matmul 60 train cores4 timmdata-device-matmul
step train_cores4_timm 75 train cores4 timm
step train_randaug_timmdata 60 train randaug timmdata
step train_randaug_timmdata_device 60 train randaug timmdata-device
step train_randaug_timmdata_device_matmul 60 train randaug timmdata-device-matmul
step train_randaug_timm 60 train randaug timm
step bench 70 bench
step tests 60 tests
step profile 30 profile
step train_same_batch 45 train same-batch
bash tools/gpu_run.sh summary
bash tools/gpu_run.sh pack
echo "######## done in $((SECONDS - t0)) s; back in $OUT: $(cd "$OUT" && find . -type f | sort | tr '\n' ' ')"
