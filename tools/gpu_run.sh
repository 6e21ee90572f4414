#!/usr/bin/env bash
# The GPU kit's steps on the GPU machine; tools/gpu_all.sh runs them all in one call of the device tool, in this order:
#   setup               the kit's wheels into /tmp/site, timmdata's extension into the checkout; env.txt
#   model [cores4]      bench/model_alone.py: ResNet-50's training step alone, a batch already on the GPU (cores4: the
#                       process confined to 4 cores with taskset, shorter rounds)
#   data                the photographic set (timmdata.tools.photos): GPU_RUN_N images made once under out/gpu_data
#   train [cores4|randaug] [LOADER...]
#                       timm's train.py (tools/timm_script.py), LOADER timmdata, timmdata-device, timm or same-batch
#                       (default the first three), on GPU_RUN_TRAIN_N of the images (out/gpu_data_train: hard links),
#                       GPU_RUN_EPOCHS epochs; cores4: train.py and its workers confined to 4 cores (taskset -c 0-3,
#                       -j 4); randaug: timm's RandAugment recipe (--aa rand-m9-mstd0.5-inc1 --reprob 0.25 --mixup 0.2
#                       --cutmix 1.0) on every core
#   bench               bench/bench_gpu.py, the loaders alone, on GPU_RUN_BENCH_N of the same images
#   profile             bench/profile_device_step.py: the device-decode step's GPU operations, by their GPU time
#   hostprofile         py-spy's samples of the device-decode loader's threads and workers (not in gpu_all.sh)
#   tests               the cuda-marked tests and the notebooks' #| cuda cells, side by side
#   summary             tools/gpu_summary.py: summary.json from what the steps wrote
# and, outside gpu_all.sh, `timeline` (bench/gpu_timeline.py's picture of the prefetcher).
# One step at a time, each its own call (setup runs first where it has not):
#   run(command="bash tools/gpu_run.sh train timmdata", carry=[".whl"])
# Every log and result goes to W (GPU_RUN_W; default out/gpu/gpu_DATE_CARD, named as bench/results/ names a run); a
# step alone packs W into $OUT when it ends (gpu_all.sh packs after each step). Each Python command is capped at
# GPU_RUN_CAP seconds (gpu_all.sh sets it from the time left) or its step's own default. PY=python3 by default.
# A rehearsal on this CPU machine, with the venv (Python 3.11: the kit's cp312 wheels are not installed; the checkout's
# own extension, built by `make install`, is used) and tiny sizes:
#   PY=.venv/bin/python GPU_RUN_CPU=1 bash tools/gpu_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
step=${1:?usage: gpu_run.sh setup|model|data|train [LOADER...]|bench|profile|tests|summary|timeline}
shift
CPU=${GPU_RUN_CPU:-}
card() {  # the results folder's card name: h200, h100, ... (cpu in a rehearsal)
  { [ -z "$CPU" ] && nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1; } \
    | sed -E 's/^NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z' | grep . || echo cpu
}
W=${GPU_RUN_W:-out/gpu/gpu_$(date -u +%F)_$(card)}
mkdir -p "$W"
DATA=out/gpu_data
TRAIN_DATA=out/gpu_data_train  # the train.py runs' share of it (train_set)
TIMM_SCRIPTS=${TIMM_SCRIPTS:-.whl/timm_scripts}
nproc=$(nproc)
cap() { echo "${GPU_RUN_CAP:-$1}"; }  # this step's limit: gpu_all.sh's (from the time left), else the step's default
capped() { local s=$1; shift; timeout -k 5 "$s" "$@"; }

setup() {
  local v
  v=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ -e /tmp/site/.kit_installed ]; then
    :
  elif [ -n "$CPU" ] && [ "$v" != 3.12 ]; then
    # a rehearsal on Python $v: the kit's wheels are for 3.12; the checkout's own extension (make install) serves
    [ -e "$W/env.txt" ] || echo "gpu_run: rehearsal on Python $v: the kit is not installed; this checkout's timmdata and its extension are used"
    ls timmdata/_native*.so >/dev/null 2>&1 || echo "gpu_run: no timmdata/_native*.so here: make install builds it"
  else
    ls .whl/timmdata-*cp312*.whl >/dev/null 2>&1 || { echo "gpu_run: no kit in .whl/: run bash tools/gpu_kit.sh here first"; return 1; }
    capped "$(cap 120)" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      $(ls .whl/*.whl | grep -v '/timmdata-') || return 1
    rm -rf /tmp/tdw && "$PY" -m zipfile -e .whl/timmdata-*cp312*.whl /tmp/tdw && cp /tmp/tdw/timmdata/_native*.so timmdata/ \
      && rm -rf timmdata.libs && cp -r /tmp/tdw/timmdata.libs . || return 1
    chmod +x /tmp/site/bin/* 2>/dev/null
    touch /tmp/site/.kit_installed
  fi
  export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH
  [ -e "$W/env.txt" ] && return 0
  local cuda
  cuda=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))')
  [ "$cuda" = 1 ] || [ -n "$CPU" ] || { echo "gpu_run: torch sees no CUDA device here (GPU_RUN_CPU=1 to rehearse on a CPU)"; return 1; }
  {
    echo "== date"; date -u
    echo "== nvidia-smi"; nvidia-smi 2>&1 | head -20
    echo "== versions"
    "$PY" -c 'import sys, torch, torchvision, timm; print("python", sys.version.split()[0], "| torch", torch.__version__,
"| torchvision", torchvision.__version__, "| timm", timm.__version__, "| cuda", torch.version.cuda, "| cudnn", torch.backends.cudnn.version())'
    "$PY" -c 'import nvidia.nvimgcodec as n; print("nvImageCodec", n.__version__, "(CUDA", n.__cuda_version__, ")")' 2>&1 | tail -1
    "$PY" -c 'import pynvml; pynvml.nvmlInit(); print("NVML driver", pynvml.nvmlSystemGetDriverVersion())' 2>&1 | tail -1
    command -v py-spy >/dev/null && py-spy --version || echo "py-spy: not installed"
    ls /usr/local/cuda/lib64/libnvjpeg.so* /tmp/site/nvidia/cu13/lib/libnvjpeg.so* 2>/dev/null | sed 's/^/libnvjpeg: /'
    [ -f "$TIMM_SCRIPTS/FROM" ] && echo "train.py: $(cat "$TIMM_SCRIPTS/FROM")"
    echo "== timmdata"; "$PY" -m timmdata.tools.cli info 2>&1
    echo "== the device resize"  # Triton's kernels (Pillow's pixels exactly) or the matrix products, and why
    "$PY" - <<'PY' 2>&1 | tail -3
import time, torch
from timmdata.pixels.batch_resize import crop_resize_flip, resize_path
try:
    import triton; print('triton', triton.__version__)
except ImportError as e:
    print('triton: not installed', e)
dev = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
imgs = [torch.randint(0, 256, (3, 375, 500), dtype=torch.uint8, device=dev) for _ in range(2)]
t0 = time.perf_counter()
crop_resize_flip(imgs, [(0, 0, 375, 500, 224, 224, 0, 0, 0, 0, 0)] * 2, torch.empty(2, 3, 224, 224, dtype=torch.uint8, device=dev))
print(f'resize on {dev}: {resize_path(dev)} (first batch {time.perf_counter() - t0:.1f} s, its compile included)')
PY
    echo "== lscpu"; lscpu 2>&1 | grep -E '^(Architecture|CPU\(s\)|On-line|Model name|Thread|Core|Socket|NUMA node\(s\)|L2|L3|Flags)' \
      | sed -E 's/^(Flags:\s+).*/\1(avx512f: '"$(grep -c avx512f /proc/cpuinfo | sed 's/^0$/no/;s/^[1-9].*/yes/')"')/'
    echo "nproc: $(nproc); memory: $(free -g | awk '/Mem:/ {print $2 " GiB"}'); /dev/shm: $(df -h /dev/shm | awk 'NR==2 {print $2}')"
  } > "$W/env.txt" 2>&1
  cat "$W/env.txt"
}

data() {
  # N images: U unique ones cut from the kit's photographs (GPU_RUN_PHOTOS, else timmdata's own download), in the
  # generator's mix of sizes and encodings, the rest hard links to them; and a val/ split of V more
  local n=${GPU_RUN_N:-25600} u=${GPU_RUN_UNIQUE:-12800} v=${GPU_RUN_VAL:-500}
  [ -n "$CPU" ] && n=${GPU_RUN_N:-200} u=${GPU_RUN_UNIQUE:-100} v=${GPU_RUN_VAL:-20}
  local photos=${GPU_RUN_PHOTOS:-.whl/photos}
  capped "$(cap 120)" "$PY" - "$DATA" "$n" "$u" "$v" "$photos" "$W/data.json" <<'PY'
import json, multiprocessing, os, shutil, sys, time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from timmdata.tools.photos import PHOTO_MIX, cut_photo, encode_photo, fetch_photo_sources, photo_plan

root, n, u, v, photos, report = Path(sys.argv[1]), *map(int, sys.argv[2:5]), Path(sys.argv[5]), Path(sys.argv[6])
u, seed, classes = min(u, n), 0, 10


def cut(job):
    "Worker: one source photograph decoded once, its planned images cut and written."
    src, items = job
    with Image.open(src) as im:
        img = im.convert('RGB')
    size = 0
    for i, wh, kind, q, path in items:
        b = encode_photo(cut_photo(img, wh, np.random.default_rng([seed, i, 61])), kind, q)
        Path(path).write_bytes(b)
        size += len(b)
    return size


def exif_check(src):
    "(True, '') where timmdata's device-decode eval loader takes an EXIF-rotated JPEG among three of its size, else (False, why)."
    import tempfile

    import torch

    import timmdata

    with Image.open(src) as im:
        img = im.convert('RGB')
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / 'c0').mkdir()
        for i, kind in enumerate(['baseline'] * 3 + ['exif_rotated']):
            b = encode_photo(cut_photo(img, (500, 375), np.random.default_rng([seed, i, 62])), kind, 90)
            (Path(d) / 'c0' / f'{i}.JPEG').write_bytes(b)
        where = 'cuda' if torch.cuda.is_available() else 'cpu'
        try:
            ld = timmdata.create_loader(timmdata.ImageDataset(d), (3, 224, 224), 4, num_workers=0, decode_device=where)
            for _ in ld:
                pass
            return True, f'decode_device={where!r}: read'
        except Exception as e:  # noqa: BLE001 (whatever it raises, the answer is no)
            return False, f'decode_device={where!r}: {type(e).__name__}: {str(e)[:300]}'


t0 = time.perf_counter()
exif = os.environ.get('GPU_RUN_EXIF', 'auto')
sources = sorted(photos.glob('*.jpg')) if photos.is_dir() else fetch_photo_sources(Path.home() / '.cache/timmdata/photo_packages')
spec = dict(n=n, unique=u, val=v, seed=seed, sources=[s.name for s in sources], mix=PHOTO_MIX, exif=exif)
marker = root / 'gpu_data.json'
if marker.is_file() and json.loads(marker.read_text()).get('spec') == spec:
    info = json.loads(marker.read_text())
    info['made_now'] = False
else:
    shutil.rmtree(root, ignore_errors=True)
    plan = photo_plan(u + v, seed)  # the first u train, the next v val; image i from source i % S, its class S's
    jobs = {}
    for i, (wh, kind, q) in enumerate(plan):
        si = i % len(sources)
        d = root / ('train' if i < u else 'val') / f'c{si % classes:03d}'
        d.mkdir(parents=True, exist_ok=True)
        jobs.setdefault(si, []).append((i, wh, kind, q, str(d / f'photo_{i:06d}.JPEG')))
    work = [(sources[si], items[k : k + 64]) for si, items in jobs.items() for k in range(0, len(items), 64)]
    work.sort(key=lambda w: -len(w[1]))
    with ProcessPoolExecutor(os.cpu_count(), mp_context=multiprocessing.get_context('fork')) as ex:  # `cut` is __main__'s
        nbytes = sum(ex.map(cut, work))
    t_cut = time.perf_counter() - t0
    made = sorted((root / 'train').rglob('*.JPEG'))
    k = 0
    while len(made) + k < n:  # copies: hard links, the same bytes under another name (another sample to the loader)
        f = made[k % len(made)]
        os.link(f, f.with_name(f'{f.stem}_r{k // len(made) + 1}.JPEG'))
        k += 1
    counts = {}
    for wh, kind, q in plan[:u]:
        counts[kind] = counts.get(kind, 0) + 1
    info = dict(spec=spec, train=n, unique=u, val=v, links=k, counts_unique=counts, bytes_unique=nbytes,
                mean_kb=nbytes / (u + v) / 1024, seconds_cut=t_cut, processes=os.cpu_count(), made_now=True)  # fmt: skip
    # An EXIF-rotated JPEG among same-size ones in a batch of timmdata's device-decode loader: where that loader fails
    # on it (TorchCodec turns the pixels by the EXIF tag, the crop plan reads the size as stored), the set's EXIF-rotated
    # images are written as baseline ones, said in data.json, so that the runs measure rather than fail
    # (GPU_RUN_EXIF=1 keeps them regardless, 0 drops them unchecked). After the pool: the check may start CUDA.
    keep, why = exif_check(sources[0]) if exif == 'auto' else (exif == '1', f'GPU_RUN_EXIF={exif}')
    info['exif_check'] = dict(device_path_reads_exif_rotated=keep, detail=why)
    if not keep:
        for i, (wh, kind, q) in enumerate(plan):
            if kind == 'exif_rotated':
                si = i % len(sources)
                with Image.open(sources[si]) as im:
                    img = im.convert('RGB')
                path = root / ('train' if i < u else 'val') / f'c{si % classes:03d}' / f'photo_{i:06d}.JPEG'
                path.write_bytes(encode_photo(cut_photo(img, wh, np.random.default_rng([seed, i, 61])), 'baseline', q))
                counts['exif_rotated'] -= 1
                counts['baseline'] = counts.get('baseline', 0) + 1
        info['exif_check']['exif_rotated'] = 'written as baseline JPEGs (links too: the same files)'
    info['seconds'] = time.perf_counter() - t0
    marker.write_text(json.dumps(info, indent=1))
report.write_text(json.dumps(info, indent=1))
print(f"data: {info['train']} train images ({info['unique']} unique, {info['links']} links), {info['val']} val, "
      f"{info['mean_kb']:.0f} KB a file, encodings {info['counts_unique']}; made in {info['seconds']:.1f} s "
      f"({info['seconds_cut']:.1f} s cutting) on {info['processes']} processes" + ('' if info['made_now'] else ' (earlier: reused)'))
print(f"data: EXIF-rotated JPEGs through timmdata's device path: {info['exif_check']}")
PY
}

model() {
  # cores4: the same step in a process confined to 4 cores (the train.py runs' `cores4` ceiling), in shorter rounds
  local a=(--device cuda) pre=() name=model_alone
  if [ "${1:-}" = cores4 ]; then
    pre=(taskset -c "$(cores4)") name=model_alone_cores4 a+=(--warmup 10 --steps 20 --rounds 2)
  fi
  [ -n "$CPU" ] && a=(--device cpu --model resnet18 --batch-size 8 --size 64 --warmup 1 --steps 2 --rounds 1)
  capped "$(cap 90)" "${pre[@]}" "$PY" bench/model_alone.py "${a[@]}" --out "$W/$name.json" 2>&1 | tee "$W/$name.log"
}

cores4() {  # the cpus of the 4-core runs: 0-3 (fewer where the machine has fewer, a rehearsal)
  local k=$((nproc < 4 ? nproc : 4))
  echo "0-$((k - 1))"
}

train_set() {
  # the train.py runs' images: the first GPU_RUN_TRAIN_N unique photographs of the data step's set (30 steps of 256 an
  # epoch by default), and its val/ split, as hard links in a folder of their own (made again when N changes)
  local n=${GPU_RUN_TRAIN_N:-7680}
  [ -n "$CPU" ] && n=${GPU_RUN_TRAIN_N:-128}
  "$PY" - "$DATA" "$TRAIN_DATA" "$n" <<'PY'
import os, shutil, sys
from pathlib import Path
src, dst, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
marker = dst / 'gpu_train_set.txt'
stamp = f'{n} of {(src / "gpu_data.json").stat().st_mtime_ns}'  # remade when the data step made its set again
if marker.is_file() and marker.read_text() == stamp:
    sys.exit(0)
shutil.rmtree(dst, ignore_errors=True)
files = sorted(f for f in (src / 'train').rglob('*.JPEG') if '_r' not in f.stem)  # the unique images first
files += sorted(f for f in (src / 'train').rglob('*.JPEG') if '_r' in f.stem)
for f in files[:n]:
    (dst / 'train' / f.parent.name).mkdir(parents=True, exist_ok=True)
    os.link(f, dst / 'train' / f.parent.name / f.name)
for f in sorted((src / 'val').rglob('*.JPEG')):
    (dst / 'val' / f.parent.name).mkdir(parents=True, exist_ok=True)
    os.link(f, dst / 'val' / f.parent.name / f.name)
marker.write_text(stamp)
print(f'train: {min(n, len(files))} training images in {dst}')
PY
}

train_script() {  # timm's train.py: the kit's copy, else from a mirror of timm's repository
  [ -f "$TIMM_SCRIPTS/train.py" ] && return 0
  local repo=${TIMM_REPO:-/work/.mirror/huggingface+pytorch-image-models/repo}
  git -C "$repo" rev-parse HEAD >/dev/null 2>&1 || return 1
  mkdir -p "$TIMM_SCRIPTS" && git -C "$repo" show HEAD:train.py > "$TIMM_SCRIPTS/train.py"
}

train() {
  # timm's train.py as its users run it, GPU_RUN_EPOCHS epochs (2: one to warm up, one measured), persistent workers
  # (timm's default), a step logged a line; measured: the last epoch after its first 10 steps (tools/timm_script.py);
  # py-spy's profile of the timmdata (workers) run. A variant first: cores4 or randaug (see the head of this file);
  # its reports are train_VARIANT_LOADER.json
  local variant='' pre=() extra=() jobs=$nproc
  case "${1:-}" in
  cores4) variant=cores4_ pre=(taskset -c "$(cores4)") jobs=$(($(cores4 | cut -d- -f2) + 1)); shift ;;
  randaug) variant=randaug_ extra=(--aa rand-m9-mstd0.5-inc1 --reprob 0.25 --mixup 0.2 --cutmix 1.0); shift ;;
  esac
  local loaders=("$@")
  [ ${#loaders[@]} = 0 ] && loaders=(timmdata timmdata-device timm)
  train_script || { echo "gpu_run: no train.py in $TIMM_SCRIPTS and no timm repository (TIMM_REPO): the train step is skipped"; return 1; }
  [ -d "$DATA/train" ] || { echo "gpu_run: no $DATA/train: run the data step first"; return 1; }
  train_set || return 1
  local epochs=${GPU_RUN_EPOCHS:-2}
  local args=(--model resnet50 --amp --channels-last -b 256 -j "$jobs" --epochs "$epochs" --warmup-epochs 0
              --val-split val --log-interval 1 --output out/train_runs --num-classes 10 --checkpoint-hist 1)
  local skip=10
  [ -n "$CPU" ] && args=(--device cpu --model resnet18 --input-size 3 64 64 -b 16 -j "$((jobs < 2 ? jobs : 2))" --epochs "$epochs"
                         --warmup-epochs 0 --val-split val --log-interval 1 --output out/train_runs --num-classes 10
                         --checkpoint-hist 1) skip=4
  local d
  for d in "${loaders[@]}"; do
    echo "== train.py${variant:+ (${variant%_})}, the loader from $d"
    local prof=() name="train_$variant$d${GPU_RUN_TAG:+_$GPU_RUN_TAG}" data=$d envs=() opts=()
    # GPU_RUN_TAG: a suffix of the report's name (a variant of a run: GPU_RUN_SWITCH, GPU_RUN_PROFILE_GIL)
    [ -n "${GPU_RUN_SWITCH:-}" ] && opts+=(--switch-interval "$GPU_RUN_SWITCH")
    [ -n "${GPU_RUN_PROFILE_GIL:-}" ] && opts+=(--profile-gil --profile "$W/profile_$variant${d//-/_}${GPU_RUN_TAG:+_$GPU_RUN_TAG}")
    # timmdata-device-matmul: the device loader with its resize in matrix products, not Triton's kernel (the A/B)
    [ "$d" = timmdata-device-matmul ] && data=timmdata-device envs=(env TIMMDATA_RESIZE_KERNEL=0)
    [ "$d" = timmdata ] && [ -z "$variant" ] && prof=(--profile "$W/profile")
    [ -n "${GPU_RUN_PROFILE:-}" ] && prof=(--profile "$W/profile_$variant${d//-/_}")  # every run's, each its own folder
    capped "$(cap 120)" "${envs[@]}" "${pre[@]}" "$PY" tools/timm_script.py --data "$data" --report "$W/$name.json" --skip-steps "$skip" \
      "${prof[@]}" "${opts[@]}" "$TIMM_SCRIPTS/train.py" "$TRAIN_DATA" "${args[@]}" "${extra[@]}" > "$W/$name.log" 2>&1
    echo "exit $?"; grep -E 'Train: .*\[ *[0-9]+/' "$W/$name.log" | tail -2; grep -vE '^(Train|Test):' "$W/$name.log" | tail -3
  done
  local f reports=()
  for f in "$W"/train_"$variant"*.json; do  # this variant's reports (the 16-core runs': no variant in the name)
    [ -e "$f" ] && { [ -n "$variant" ] || ! [[ $(basename "$f") =~ ^train_(cores4|randaug)_ ]]; } && reports+=("$f")
  done
  [ ${#reports[@]} = 0 ] || "$PY" tools/timm_script.py --summary "${reports[@]}" | tee "$W/train_${variant}summary.txt"
}

bench() {
  # the loaders alone on B of the images (hard links into a folder of their own: its store is built beside it), batch
  # 256, a worker per core; one warm-up epoch then one measured epoch per loader, train and eval, and the decode limit
  # (the device's JPEG decoder alone); GPU_RUN_BENCH_CONTENDERS: which loaders (gpu_all.sh leaves timm's out)
  local b=${GPU_RUN_BENCH_N:-7680} a=(--device cuda --batch-size 256 --workers "$nproc")
  [ -n "$CPU" ] && b=${GPU_RUN_BENCH_N:-96} a=(--device cpu --batch-size 16 --workers 2)
  "$PY" - "$DATA/train" out/gpu_bench_data/train "$b" <<'PY' || return 1
import os, shutil, sys
from pathlib import Path
src, dst, b = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
files = sorted(f for f in src.rglob('*.JPEG') if '_r' not in f.stem)[:b]  # the unique images first
shutil.rmtree(dst.parent, ignore_errors=True)  # made again each time (links: a second), its store with it
for f in files:
    (dst / f.parent.name).mkdir(parents=True, exist_ok=True)
    os.link(f, dst / f.parent.name / f.name)
print(f'bench: {len(files)} images in {dst}')
PY
  capped "$(cap 120)" "$PY" bench/bench_gpu.py "${a[@]}" --epochs 1 --data out/gpu_bench_data/train \
    --contenders "${GPU_RUN_BENCH_CONTENDERS:-timm,timmdata_cpu,timmdata_device,timmdata_store}" --out "$W/bench_gpu.json" 2>&1 | tee "$W/bench_gpu.log"
}

tests() {
  # the cuda-marked tests (nvJPEG parity figures printed) and every notebook with a #| cuda cell, those cells run,
  # side by side; each at most the step's cap
  local c
  c=$(cap 90)
  capped "$c" "$PY" -m pytest -q -m cuda -s -rA -p no:cacheprovider tests > "$W/cuda_tests.log" 2>&1 &
  local tests_pid=$! flags=cuda par=8
  [ -n "$CPU" ] && flags='' par=2  # a rehearsal runs the notebooks with their cuda cells skipped
  local nbs
  nbs=$(grep -lE '("|\\n)#\| cuda' nbs/*.ipynb nbs/*/*.ipynb | tr '\n' ' ')  # a code cell's directive line (after #| hide too)
  mkdir -p "$W/notebooks"  # each notebook's whole output (a failure's traceback), its last lines in cuda_notebooks.log
  printf '%s\n' $nbs | xargs -P "$par" -I{} bash -c "set -o pipefail; f=\"$W/notebooks/\$(basename {} .ipynb).log\"; timeout -k 5 $c '$PY' tools/nbtest.py --flags '$flags' --path {} > \"\$f\" 2>&1; r=\$?; tail -2 \"\$f\"; echo \"{} exit \$r\"" \
    > "$W/cuda_notebooks.log" 2>&1
  wait "$tests_pid"; echo "== pytest -m cuda: exit $?"
  grep -v '^PASSED\|^SKIPPED' "$W/cuda_tests.log" | tail -30
  cat "$W/cuda_notebooks.log"
  grep -l 'failed' "$W"/notebooks/*.log 2>/dev/null | while read -r f; do echo "== $f"; grep -v '^\[' "$f" | tail -40; done
  { grep -h 'nvJPEG eval' "$W/cuda_tests.log"; tail -1 "$W/cuda_tests.log"; grep ' exit ' "$W/cuda_notebooks.log"; } > "$W/tests_summary.txt"
  # then the whole suite with CUDA present, but the docs site's (no MkDocs there): GPU_RUN_SUITE_S seconds (gpu_all.sh: 0, skipped)
  local suite=${GPU_RUN_SUITE_S:-240}
  [ "$suite" = 0 ] && return 0
  echo "== the whole suite, at most $suite s"
  capped "$suite" "$PY" -m pytest -q -n 8 --dist loadfile -p no:cacheprovider -rfE --ignore tests/test_docs_browser.py tests \
    > "$W/suite.log" 2>&1
  echo "exit $?"; tail -30 "$W/suite.log"; tail -1 "$W/suite.log" >> "$W/tests_summary.txt"
}

profile() {
  # where the device-decode step's GPU time goes: torch.profiler over a few batches of its loader alone
  local a=(--data out/gpu_bench_data/train)
  [ -d out/gpu_bench_data/train ] || a=(--data "$DATA/train")
  [ -n "$CPU" ] && a+=(--device cpu --batch-size 8 --workers 2 --warmup 1 --batches 2)
  capped "$(cap 60)" "$PY" bench/profile_device_step.py "${a[@]}" 2>&1 | tee "$W/profile_device_step.txt" | tail -40
}

hostprofile() {
  # where the device-decode loader's host time goes: py-spy's samples of every thread and worker process (raw stacks,
  # idle waits left out) over bench/bench_gpu.py's device loader alone, train then eval, on the data step's images;
  # tools/pyspy_top.py reads them
  local a=(--device cuda --batch-size 256 --workers "$nproc" --epochs 1) p
  [ -n "$CPU" ] && a=(--device cpu --batch-size 16 --workers 2 --epochs 1)
  command -v py-spy >/dev/null || { echo "gpu_run: no py-spy on PATH (the kit carries it)"; return 1; }
  for p in train eval; do
    capped "$(cap 60)" py-spy record --rate 250 --threads --subprocesses --format raw --output "$W/hostprofile_$p.txt" -- \
      "$PY" bench/bench_gpu.py "${a[@]}" --data "$DATA/train" --contenders timmdata_device --pipelines "$p" 2>&1 | tail -4
  done
}

timeline() {
  [ -d "$DATA/train" ] || data
  capped "$(cap 300)" "$PY" bench/gpu_timeline.py --device "$([ -n "$CPU" ] && echo cpu || echo cuda)" --root "$DATA/train" --out "$W" \
    ${CPU:+--model resnet18 --batch-size 8 --workers 2 --warmup 2 --timed 2 --steps 2} 2>&1 | tail -20
}

summary() {
  "$PY" tools/gpu_summary.py "$W" --out "$W/summary.json"
}

pack() {  # W into $OUT: summary.json and env.txt beside a tarball of the rest (the device tool brings back 8 files)
  local out=${OUT:-out/gpu/back} name
  name=$(basename "$W")
  mkdir -p "$out/$name"
  tar czf "$out/$name/logs.tar.gz" -C "$(dirname "$W")" "$name" 2>/dev/null
  cp "$W/summary.json" "$W/env.txt" "$out/$name/" 2>/dev/null
  return 0
}

case "$step" in
setup) setup ;;
model | data | train | bench | profile | hostprofile | tests | timeline)
  setup || exit 1
  "$step" "$@"; rc=$?
  [ -n "${GPU_RUN_NO_PACK:-}" ] || { summary >/dev/null; pack; }
  exit $rc ;;
summary) summary ;;  # plain Python: no kit needed
pack) pack ;;
*) echo "gpu_run: unknown step $step (setup, model, data, train, bench, profile, tests, summary, timeline)"; exit 2 ;;
esac
