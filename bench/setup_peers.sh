#!/usr/bin/env bash
# Issue 46: a separate venv with the loaders users pick instead of timmdata (FFCV, DALI, Grain, SPDL), plus torch,
# torchvision, timm and timmdata itself (editable), for `bench/bench_peers.py`. Idempotent: run it again and it only
# fills in what is missing. A peer whose system packages or wheel cannot be installed is skipped, and the script says
# which and why (bench_peers.py then reports it as skipped too).
#
#   bash bench/setup_peers.sh                  # makes .peers-venv/ at the repo root
#   PEERS_VENV=/tmp/pv bash bench/setup_peers.sh
#   PEERS_TORCH=pth bash bench/setup_peers.sh  # reuse torch/torchvision from the python on PATH (a .pth file) instead of
#                                              # installing them (saves ~5.5 GB and minutes; see below)
#
# torch: by default `pip install torch==2.14.1 torchvision==0.29.1` (pip takes both from this machine's disk).
# With PEERS_TORCH=pth the venv gets a `.pth` file naming the site-packages of the python on PATH that already has torch
# (the project's venv): that folder goes at the END of sys.path, so the peers venv's own packages (numpy, timm, timmdata)
# still win and only what it lacks (torch, torchvision and their CUDA libraries) comes from there.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${PEERS_VENV:-$ROOT/.peers-venv}"
TORCH_MODE="${PEERS_TORCH:-pip}"
PY="$VENV/bin/python"
SKIPPED="$VENV/skipped.txt"   # one line per skipped peer: "name: reason" (bench_peers.py reads it)
say() { echo "[setup_peers] $*"; }
skip() { say "SKIPPING $1: $2"; grep -v "^$1:" "$SKIPPED" > "$SKIPPED.tmp" 2>/dev/null; echo "$1: $2" >> "$SKIPPED.tmp"; mv "$SKIPPED.tmp" "$SKIPPED"; }
unskip() { [ -f "$SKIPPED" ] && { grep -v "^$1:" "$SKIPPED" > "$SKIPPED.tmp"; mv "$SKIPPED.tmp" "$SKIPPED"; }; true; }
has() { env -u PYTHONPATH "$PY" -P -c "import $1" >/dev/null 2>&1; }  # -P: not the cwd's packages
pipi() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }

APT_UPDATED=0
apt_install() {  # apt_install PKG...: 0 when all are (now) installed
    local missing=()
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! command -v apt-get >/dev/null; then say "no apt-get here: cannot install ${missing[*]}"; return 1; fi
    local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
    if [ $APT_UPDATED -eq 0 ]; then say "apt-get update"; $sudo apt-get update -qq >/dev/null 2>&1; APT_UPDATED=1; fi
    say "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1
}

# 1. the venv
if [ ! -x "$PY" ]; then say "creating venv $VENV"; python3 -m venv "$VENV" || { say "cannot create a venv"; exit 1; }
else say "venv $VENV exists"; fi
touch "$SKIPPED"
pipi -U pip wheel setuptools

# 2. torch + torchvision
if has torchvision; then say "torch/torchvision: present ($("$PY" -c 'import torch;print(torch.__version__)'))"
elif [ "$TORCH_MODE" = pth ]; then
    SITE="$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null)"
    [ -n "$SITE" ] || { say "PEERS_TORCH=pth but the python3 on PATH has no torch"; exit 1; }
    VSITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    say "torch/torchvision: reusing $SITE via $VSITE/zz_project_torch.pth"
    echo "$SITE" > "$VSITE/zz_project_torch.pth"
else say "torch/torchvision: pip install torch==2.14.1 torchvision==0.29.1 (from this machine's disk; minutes)"
    pipi torch==2.14.1 torchvision==0.29.1 || { say "torch install failed"; exit 1; }
fi

# 3. timmdata (editable, with its C extension when a compiler is there) and timm, psutil, matplotlib for the bench
if env -u PYTHONPATH "$PY" -P -c "import timmdata, os, sys; sys.exit(os.path.dirname(timmdata.__file__) != '$ROOT/timmdata')" 2>/dev/null; then
    say "timmdata: editable install from $ROOT present"
else say "timmdata: pip install -e $ROOT"; pipi -e "$ROOT" || { say "timmdata install failed"; exit 1; }; fi
has timm || { say "timm: pip install timm"; pipi timm; }
has psutil || pipi psutil
has matplotlib || pipi matplotlib
ls "$ROOT"/timmdata/_native*.so >/dev/null 2>&1 || say "note: no timmdata/_native*.so in $ROOT (build it: see README); timmdata decodes slower without it"

# 4. FFCV 1.0.2 from its sdist: needs pkg-config, libturbojpeg and OpenCV's headers to compile libffcv.
#    --no-deps: its requirements pull opencv-python (the GUI build); its real runtime deps are installed by hand.
if has ffcv.loader; then say "ffcv: present"; unskip ffcv
elif ! apt_install pkg-config libturbojpeg0-dev libopencv-dev; then
    skip ffcv "apt packages pkg-config libturbojpeg0-dev libopencv-dev could not be installed (ffcv compiles against them)"
else
    say "ffcv: installing its runtime deps, then the sdist (compiles libffcv)"
    pipi numba opencv-python-headless assertpy tqdm psutil fastargs terminaltables pytorch_pfn_extras pkgconfig &&
    pipi --no-deps --no-build-isolation ffcv==1.0.2 && has ffcv.loader && unskip ffcv ||
        skip ffcv "pip install ffcv==1.0.2 failed (see the output above)"
fi

# 5. DALI 2.4.0 (CUDA 12 wheel; the benchmark runs its pipelines on the CPU with device_id=None)
if has nvidia.dali; then say "dali: present"; unskip dali
else say "dali: pip install nvidia-dali-cuda120"
    pipi nvidia-dali-cuda120 && has nvidia.dali && unskip dali || skip dali "pip install nvidia-dali-cuda120 failed"
fi

# 6. Grain
if has grain; then say "grain: present"; unskip grain
else say "grain: pip install grain"; pipi grain && has grain && unskip grain || skip grain "pip install grain failed"; fi

# 7. SPDL: its decoders load FFmpeg's shared libraries (libavcodec, libavformat, libavutil, libavfilter, libavdevice,
#    libswscale, libswresample) at import time.
if has spdl.io; then say "spdl: present"; unskip spdl
elif ! apt_install libavcodec-dev libavformat-dev libavutil-dev libavfilter-dev libavdevice-dev libswscale-dev libswresample-dev; then
    skip spdl "apt packages for FFmpeg's libraries (libavcodec-dev ...) could not be installed (spdl.io loads them)"
else say "spdl: pip install spdl"
    pipi spdl && has spdl.io && unskip spdl || skip spdl "pip install spdl failed, or spdl.io does not import (FFmpeg libraries?)"
fi

say "done. venv: $VENV"
(cd / && env -u PYTHONPATH "$PY" - <<'EOF'
import importlib
from importlib.metadata import version  # the installed distribution's version (ffcv 1.0.2's __version__ says 0.0.3rc1)
for name, mod, dist in [('torch', 'torch', 'torch'), ('torchvision', 'torchvision', 'torchvision'), ('timm', 'timm', 'timm'),
                        ('timmdata', 'timmdata', 'timmdata'), ('ffcv', 'ffcv', 'ffcv'), ('dali', 'nvidia.dali', 'nvidia-dali-cuda120'),
                        ('grain', 'grain', 'grain'), ('spdl', 'spdl.io', 'spdl')]:
    try: importlib.import_module(mod); print(f'  {name:12} {version(dist)}')
    except Exception as e: print(f'  {name:12} MISSING ({type(e).__name__}: {str(e)[:80]})')
EOF
)
[ -s "$SKIPPED" ] && { say "skipped peers:"; sed 's/^/  /' "$SKIPPED"; }
say "run: $VENV/bin/python bench/bench_peers.py --quick"
exit 0
