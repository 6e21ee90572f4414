#!/usr/bin/env bash
# The demo's torch (make demo): pip's default torch for Linux brings about 3 GB of CUDA libraries, of no use on a
# machine without an NVIDIA GPU. Two steps, both called by the Makefile:
#   bash tools/demo_torch.sh choose [NVIDIA_SMI] [NVIDIA_PROC]   prints cpu (Linux, no NVIDIA GPU) or default
#   bash tools/demo_torch.sh install PY INDEX_URL                torch and torchvision from INDEX_URL into PY's environment
# A GPU is there when `nvidia-smi -L` lists one or the driver lists one under /proc/driver/nvidia/gpus: either is
# enough, so a driver whose nvidia-smi fails (a mismatch after an update) still counts. NVIDIA_SMI and NVIDIA_PROC
# say where to look (the tests point them at fakes). `install` does nothing where torch is installed already, tries
# the index first (a few seconds at most), and says in a line which torch it takes; where the index does not answer
# or the install fails, pip's default torch comes with `pip install -e .` after it.
set -uo pipefail

gpu_listed() {  # gpu_listed NVIDIA_SMI NVIDIA_PROC: does either list an NVIDIA GPU?
  local smi=$1 proc=$2
  if command -v "$smi" >/dev/null 2>&1 && timeout 10 "$smi" -L 2>/dev/null | grep -q '^GPU [0-9]'; then return 0; fi
  [ -d "$proc/gpus" ] && [ -n "$(ls -A "$proc/gpus" 2>/dev/null)" ]
}

case "${1:-}" in
  choose)
    # macOS's and Windows' default wheels carry no CUDA libraries: only Linux's need the CPU index
    if [ "$(uname -s)" = Linux ] && ! gpu_listed "${2:-nvidia-smi}" "${3:-/proc/driver/nvidia}"; then echo cpu; else echo default; fi
    ;;
  install)
    py=$2 index=$3
    if "$py" -c 'import importlib.metadata as m; m.version("torch")' >/dev/null 2>&1; then exit 0; fi
    # the index's page for torch answers within 5 s (its headers: the page itself is not read); the proxy variables
    # that pip honours, urllib honours too
    if ! "$py" - "$index" <<'EOF' >/dev/null 2>&1; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip('/') + '/torch/', timeout=5).close()
EOF
      echo "demo: no NVIDIA GPU, but $index did not answer: pip's default torch (with about 3 GB of CUDA libraries)"
      exit 0
    fi
    echo "demo: no NVIDIA GPU: the CPU-only torch and torchvision from $index (about 3 GB less than pip's default)"
    if ! "$py" -m pip install -q torch torchvision --index-url "$index"; then
      echo "demo: the install from $index failed (above): pip's default torch instead"
    fi
    exit 0
    ;;
  *)
    echo "usage: bash tools/demo_torch.sh choose [NVIDIA_SMI] [NVIDIA_PROC] | install PY INDEX_URL" >&2
    exit 2
    ;;
esac
