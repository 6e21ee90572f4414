#!/usr/bin/env bash
# The GPU kit's three steps in one call of the device tool, each step capped so the whole fits a lease of 15 minutes
# of device time (the machine's start included). Make the kit here first (bash tools/gpu_kit.sh), then:
#   run(command="bash tools/gpu_all.sh", carry=[".whl"], timeout_s=600)
# Each step's tarball (logs, JSON, the timeline picture) goes to $OUT as it ends, so a step cut short loses only itself.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-out/gpu}
mkdir -p "$FINAL"
export OUT=out/gpu_files GPU_RUN_SUITE_S=${GPU_RUN_SUITE_S:-0} GPU_RUN_EPOCHS=${GPU_RUN_EPOCHS:-2} GPU_RUN_BENCH_EPOCHS=${GPU_RUN_BENCH_EPOCHS:-1}
export GPU_RUN_PYTEST_S=${GPU_RUN_PYTEST_S:-110} GPU_RUN_NB_S=${GPU_RUN_NB_S:-110}
export GPU_RUN_BENCH_S=${GPU_RUN_BENCH_S:-170} GPU_RUN_TRAIN_S=${GPU_RUN_TRAIN_S:-75} GPU_RUN_TIMELINE_S=${GPU_RUN_TIMELINE_S:-50}
t0=$SECONDS
for step in tests bench train; do
  echo "######## $step (at $((SECONDS - t0)) s)"
  bash tools/gpu_run.sh "$step"
  cp "$OUT/gpu_$step.tar.gz" "$FINAL"/ 2>/dev/null
done
cp "$OUT"/*.png "$FINAL"/ 2>/dev/null
echo "######## done in $((SECONDS - t0)) s; back: $(ls "$FINAL" | tr '\n' ' ')"
