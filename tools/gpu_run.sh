#!/usr/bin/env bash
# Issue 45 on the GPU machine, in three calls of the device tool (each under its 10-minute limit, back to back so the
# machine stays warm and the generated images under out/ are made once). Make the kit first, here: bash tools/gpu_kit.sh
#   run(command="bash tools/gpu_run.sh tests", carry=[".whl"])   # every cuda test and #| cuda cell, nvJPEG parity
#   run(command="bash tools/gpu_run.sh bench", carry=[".whl"])   # bench/bench_gpu.py: 10,000 JPEGs, batch 256, 16 workers
#   run(command="bash tools/gpu_run.sh train", carry=[".whl"])   # timm's train.py, timm's loader against timmdata's
# Logs and results go to $OUT (the device tool brings them back; out/gpu/ elsewhere). PY=python3 by default.
# A rehearsal on a CPU machine with Python 3.12 and torch 2.11 runs the same steps on the CPU (CUDA tests skipped):
#   PY=/path/to/py312/bin/python GPU_RUN_CPU=1 bash tools/gpu_run.sh tests
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-out/gpu}
export PYTHONUNBUFFERED=1
step=${1:?usage: gpu_run.sh tests|bench|train}
# every log and result goes to W; at the end W is packed into $OUT/gpu_STEP.tar.gz and its summaries and picture are
# copied beside it (the device tool brings back at most 8 files a call)
W=out/gpu_$step
rm -rf "$W" && mkdir -p "$W" "$OUT"
pack() {
  tar czf "$OUT/gpu_$step.tar.gz" -C out "gpu_$step"
  cp "$W"/*summary*.txt "$W"/*.png "$W"/bench_gpu.json "$OUT"/ 2>/dev/null
  echo "gpu_run: $step's logs in $OUT/gpu_$step.tar.gz"
}
trap pack EXIT

# the kit's wheels into a folder of their own; timmdata's extension and its libjpeg-turbo into this checkout
ls .whl/timmdata-*cp312*.whl >/dev/null 2>&1 || { echo "gpu_run: no kit in .whl/: run bash tools/gpu_kit.sh here first"; exit 1; }
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  $(ls .whl/*.whl | grep -v '/timmdata-') || exit 1
rm -rf /tmp/tdw && "$PY" -m zipfile -e .whl/timmdata-*cp312*.whl /tmp/tdw && cp /tmp/tdw/timmdata/_native*.so timmdata/ \
  && rm -rf timmdata.libs && cp -r /tmp/tdw/timmdata.libs . || exit 1
export PYTHONPATH=$PWD:/tmp/site
cuda=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))')
[ "$cuda" = 1 ] || [ -n "${GPU_RUN_CPU:-}" ] || { echo "gpu_run: torch sees no CUDA device here (GPU_RUN_CPU=1 to rehearse on a CPU)"; exit 1; }
dev=$([ "$cuda" = 1 ] && echo cuda || echo cpu)
{ date -u; nvidia-smi 2>&1 | head -15; "$PY" -c 'import sys, torch, torchvision, timm; print(sys.version.split()[0], "torch", torch.__version__,
"torchvision", torchvision.__version__, "timm", timm.__version__, "cuda", torch.version.cuda)'; "$PY" -m timmdata.tools.cli info; } \
  > "$W/env.txt" 2>&1
cat "$W/env.txt"

case "$step" in
tests)
  # the cuda-marked tests, printing the nvJPEG parity figures (test_cuda_eval_batches_match_the_cpu_path); then every
  # notebook with a #| cuda cell, those cells run; then the whole suite with CUDA present, as long as time allows
  # the tests and the notebooks run side by side (16 cores there), each test run at most GPU_RUN_PYTEST_S seconds
  timeout "${GPU_RUN_PYTEST_S:-590}" "$PY" -m pytest -q -m cuda -s -rA -p no:cacheprovider tests > "$W/cuda_tests.log" 2>&1 &
  tests_pid=$!
  echo "== notebooks with #| cuda cells"
  nbs=$(grep -lE '("|\\n)#\| cuda' nbs/*.ipynb nbs/*/*.ipynb | tr '\n' ' ')  # a code cell's directive line (after #| hide too)
  flags=$([ "$cuda" = 1 ] && echo cuda)  # a CPU rehearsal runs the notebooks with their cuda cells skipped
  # side by side (8 at a time), each at most GPU_RUN_NB_S seconds
  printf '%s\n' $nbs | xargs -P 8 -I{} bash -c "set -o pipefail; timeout ${GPU_RUN_NB_S:-300} '$PY' tools/nbtest.py --flags '$flags' --path {} 2>&1 | tail -2; echo \"{} exit \$?\"" \
    | tee "$W/cuda_notebooks.log"
  wait "$tests_pid"; echo "== pytest -m cuda: exit $?"
  grep -v '^PASSED\|^SKIPPED' "$W/cuda_tests.log" | tail -40
  echo "== the whole suite with CUDA present, but the docs site's (no MkDocs there), at most ${GPU_RUN_SUITE_S:-240} s (0: skipped)"
  [ "${GPU_RUN_SUITE_S:-240}" = 0 ] || timeout "${GPU_RUN_SUITE_S:-240}" "$PY" -m pytest -q -n 8 --dist loadfile -p no:cacheprovider -rfE --ignore tests/test_docs_browser.py tests \
    > "$W/suite.log" 2>&1
  echo "exit $?"; tail -30 "$W/suite.log"
  { grep -h 'nvJPEG eval' "$W/cuda_tests.log"; tail -1 "$W/cuda_tests.log"; cat "$W/cuda_notebooks.log"; tail -1 "$W/suite.log"; } \
    > "$W/tests_summary.txt"
  ;;
bench)
  timeout "${GPU_RUN_BENCH_S:-590}" "$PY" bench/bench_gpu.py --device "$dev" --workers "$(nproc)" --epochs "${GPU_RUN_BENCH_EPOCHS:-3}" \
    ${GPU_RUN_CPU:+--n 200 --batch-size 32 --epochs 1} \
    --out "$W/bench_gpu.json" 2>&1 | tee "$W/bench_gpu.log"
  grep -A12 "^pipeline" "$W/bench_gpu.log" > "$W/bench_summary.txt"
  ;;
train)
  # timm's train.py as its users run it (ResNet-50, AMP, channels-last, batch 256, 16 workers), 3 epochs on the
  # generated images, with timm's loader, timmdata's CPU path and timmdata's device-decode path; then the timeline
  n=${GPU_RUN_N:-10000}; [ -n "${GPU_RUN_CPU:-}" ] && n=200
  data=out/bench_gpu_data_$n
  "$PY" -c "from timmdata.tools.sample_data import make_sample_dataset as m; m('$data', n_train=max(1, $n // 10), n_val=1, size=(500, 375), quality=90)"
  args=(--model resnet50 --amp --channels-last -b 256 -j "$(nproc)" --epochs "${GPU_RUN_EPOCHS:-3}" --warmup-epochs 0 --val-split val
        --log-interval 5 --output out/train_runs --num-classes 10)
  [ -n "${GPU_RUN_CPU:-}" ] && args=(--device cpu --model resnet18 -b 16 -j 2 --epochs 1 --val-split val --log-interval 2 --output out/train_runs --num-classes 10)
  for data_from in timm timmdata timmdata-device; do
    echo "== train.py, the loader from $data_from"
    timeout "${GPU_RUN_TRAIN_S:-200}" "$PY" tools/timm_script.py --data "$data_from" --report "$W/train_$data_from.json" \
      .whl/timm_scripts/train.py "$data" "${args[@]}" > "$W/train_$data_from.log" 2>&1
    echo "exit $?"; grep -E 'Train: .*\[ *[0-9]+/' "$W/train_$data_from.log" | tail -2; tail -3 "$W/train_$data_from.log"
  done
  "$PY" tools/timm_script.py --summary "$W"/train_*.json | tee "$W/train_summary.txt"
  echo "== the prefetch timeline"
  timeout "${GPU_RUN_TIMELINE_S:-300}" "$PY" bench/gpu_timeline.py --device "$dev" --root "$data/train" --out "$W" \
    ${GPU_RUN_CPU:+--model resnet18 --batch-size 8 --workers 2 --warmup 2 --timed 2 --steps 2} 2>&1 | tail -20
  ;;
*) echo "gpu_run: unknown step $step (tests, bench, train)"; exit 2;;
esac
