#!/usr/bin/env bash
# A short GPU check of the device-decode path (about 3 minutes), for a lease with little device time left: the cuda
# tests of the device path, the loader alone (device decode against the workers, train and eval), the model alone, and
# timm's train.py with the device path and with the workers, on 5,120 generated JPEGs of 500x375 (20 steps an epoch).
# The full measurement is tools/gpu_all.sh. Make the kit first (bash tools/gpu_kit.sh), then:
#   run(command="bash tools/gpu_quick.sh", carry=[".whl"], timeout_s=230)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY=${PY:-python3}; OUT=${OUT:-out/gpu}; W=out/gpu_quick
rm -rf "$W" && mkdir -p "$W" "$OUT"
t0=$SECONDS
pack() { cp "$W"/*.txt "$W"/*.json "$OUT"/ 2>/dev/null; tar czf "$OUT/gpu_quick.tar.gz" -C out gpu_quick; echo "gpu_quick: done at $((SECONDS - t0)) s"; }
trap pack EXIT
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  $(ls .whl/*.whl | grep -v '/timmdata-') || exit 1
rm -rf /tmp/tdw && "$PY" -m zipfile -e .whl/timmdata-*cp312*.whl /tmp/tdw && cp /tmp/tdw/timmdata/_native*.so timmdata/ \
  && rm -rf timmdata.libs && cp -r /tmp/tdw/timmdata.libs . || exit 1
export PYTHONPATH=$PWD:/tmp/site
{ nvidia-smi 2>&1 | head -15; nproc; "$PY" -c 'import sys, torch, torchvision, timm, torchcodec; print(sys.version.split()[0], torch.__version__, torchvision.__version__, timm.__version__, torchcodec.__version__)'; } > "$W/env.txt" 2>&1
echo "== install $((SECONDS - t0)) s"
data=out/q_data
"$PY" -c "from timmdata.tools.sample_data import make_sample_dataset as m; m('$data', n_train=512, n_val=52, size=(500, 375), quality=90)"
echo "== data $((SECONDS - t0)) s"
timeout 35 "$PY" -m pytest -q -m cuda -p no:cacheprovider tests/test_gpu_decode.py > "$W/cuda_tests.txt" 2>&1
echo "== cuda tests exit $? at $((SECONDS - t0)) s"; tail -5 "$W/cuda_tests.txt"
timeout 45 "$PY" bench/bench_gpu.py --device cuda --workers "$(nproc)" --epochs 1 --data "$data/train" \
  --contenders timmdata_cpu,timmdata_device --out "$W/bench_gpu.json" > "$W/bench_gpu.txt" 2>&1
echo "== loader alone exit $? at $((SECONDS - t0)) s"; grep -A9 "^pipeline" "$W/bench_gpu.txt"
timeout 25 "$PY" bench/model_alone.py --out "$W/model_alone.json" > "$W/model_alone.txt" 2>&1
echo "== model alone exit $? at $((SECONDS - t0)) s"; tail -3 "$W/model_alone.txt"
args=(--model resnet50 --amp --channels-last -b 256 -j "$(nproc)" --epochs 2 --warmup-epochs 0 --val-split val
      --log-interval 1 --output out/train_runs --num-classes 10)
for d in timmdata-device timmdata; do
  timeout 40 "$PY" tools/timm_script.py --data "$d" --report "$W/train_$d.json" --skip-steps 5 \
    .whl/timm_scripts/train.py "$data" "${args[@]}" > "$W/train_$d.txt" 2>&1
  echo "== train.py $d exit $? at $((SECONDS - t0)) s"; grep -E 'Train: .*\[ *[0-9]+/' "$W/train_$d.txt" | tail -2
  grep -iE "timmdata|decode|stats|step_rate|img_s" "$W/train_$d.txt" | tail -6
done
