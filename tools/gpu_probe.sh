#!/usr/bin/env bash
# A second, shorter call of the GPU kit after tools/gpu_all.sh, for what its results asked next: A/B runs of train.py
# on 4 cores with the device loader (Python's switch interval, the GIL's holder sampled by py-spy), the cuda tests and
# notebook cells that changed, and the resize kernel's blocks. Each step capped, the most wanted first, the results
# packed into $OUT after each (as gpu_all.sh does). Make the kit first (bash tools/gpu_kit.sh), then:
#   run(command="bash tools/gpu_probe.sh", carry=[".whl"], timeout_s=330)
# Steps [expected s on an H200]: setup [~35] data [~30]; train.py cores4 timmdata-device: as it is [~25], with
# sys.setswitchinterval(0.0005) [~25], with py-spy --gil [~30]; the cuda tests and 09b's cuda cells [~40]; the resize
# kernel's blocks, training and eval plans [~30]; train.py on 16 cores, device, switch interval 0.0005 [~25].
# GPU_PROBE_S (default 300) bounds the whole. A rehearsal here: PY=.venv/bin/python GPU_RUN_CPU=1 bash tools/gpu_probe.sh
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
BUDGET=${GPU_PROBE_S:-300}
PY=${PY:-python3}
export OUT=${OUT:-out/gpu/back} PY
card=$({ [ -z "${GPU_RUN_CPU:-}" ] && nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1; } \
  | sed -E 's/^NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z' | grep . || echo cpu)
export GPU_RUN_W=${GPU_RUN_W:-out/gpu/probe_$(date -u +%F)_$card}
export GPU_RUN_NO_PACK=1
rm -rf "$GPU_RUN_W" && mkdir -p "$GPU_RUN_W" "$OUT"
: > "$GPU_RUN_W/steps.tsv"
dev=cuda
[ -n "${GPU_RUN_CPU:-}" ] && dev=cpu

pack() { tar czf "$OUT/probe_logs.tar.gz" -C "$(dirname "$GPU_RUN_W")" "$(basename "$GPU_RUN_W")" 2>/dev/null; }
step() {  # step NAME CAP command...: at most CAP seconds, fewer if less time is left
  local name=$1 cap=$2; shift 2
  local left=$((BUDGET - (SECONDS - t0) - 5))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt 15 ]; then echo "######## $name: skipped, $left s left"; return; fi
  echo "######## $name (at $((SECONDS - t0)) s, at most $cap s)"
  local s0=$SECONDS
  GPU_RUN_CAP=$cap timeout -k 5 "$cap" "$@"
  printf '%s\t%s\t%s\t%s\n' "$name" "$?" "$((SECONDS - s0))" "$cap" >> "$GPU_RUN_W/steps.tsv"
  pack
}
blocks=32x32x4,16x64x4,64x16x4,8x128x4,32x64x8,64x32x8,16x32x4,64x64x8

step setup 60 bash tools/gpu_run.sh setup
step data 60 bash tools/gpu_run.sh data
step cores4_device 45 bash tools/gpu_run.sh train cores4 timmdata-device
step cores4_device_switch 45 env GPU_RUN_TAG=switch GPU_RUN_SWITCH=0.0005 bash tools/gpu_run.sh train cores4 timmdata-device
step cores4_device_gil 50 env GPU_RUN_TAG=gil GPU_RUN_PROFILE_GIL=1 bash tools/gpu_run.sh train cores4 timmdata-device
step tests 50 bash -c "PYTHONPATH=\$PWD:/tmp/site \"$PY\" -m pytest -q -m cuda -p no:cacheprovider tests/test_gpu_decode.py \
  -k 'memory_flat or fallback' > '$GPU_RUN_W/cuda_tests.log' 2>&1; tail -3 '$GPU_RUN_W/cuda_tests.log'; \
  PYTHONPATH=\$PWD:/tmp/site \"$PY\" tools/nbtest.py --flags cuda --path nbs/pixels/09b_batch_resize.ipynb \
  > '$GPU_RUN_W/nb_09b.log' 2>&1; tail -2 '$GPU_RUN_W/nb_09b.log'"
step kernel_train 30 bash -c "PYTHONPATH=\$PWD:/tmp/site \"$PY\" bench/bench_batch_resize.py --device $dev \
  $([ -n "${GPU_RUN_CPU:-}" ] && echo '--batch 16 --repeats 2 --warmup 1 --check 2' || echo "--blocks $blocks --check 16") \
  2>&1 | tee '$GPU_RUN_W/kernel_train.txt'"
step kernel_eval 30 bash -c "PYTHONPATH=\$PWD:/tmp/site \"$PY\" bench/bench_batch_resize.py --device $dev --plans eval \
  $([ -n "${GPU_RUN_CPU:-}" ] && echo '--batch 16 --repeats 2 --warmup 1 --check 2' || echo "--blocks $blocks --check 16") \
  2>&1 | tee '$GPU_RUN_W/kernel_eval.txt'"
step device_switch 45 env GPU_RUN_TAG=switch GPU_RUN_SWITCH=0.0005 bash tools/gpu_run.sh train timmdata-device
pack
echo "######## done in $((SECONDS - t0)) s; back in $OUT: $(cd "$OUT" && find . -type f | sort | tr '\n' ' ')"
