#!/usr/bin/env bash
# Builds the docs site from nbs/*.ipynb into OUTDIR (default: docs/): nbdev's docs processing, then
# MkDocs Material in strict mode, then a check that no page fetches anything from the network.
# Fails, naming the notebook and cell, when a page would show a saved error, any stderr output (warnings,
# progress bars) or an absolute path of the build machine (/tmp/..., /work/..., /home/...): see build.py.
# Quarto (and so nbdev_docs) is not available here; see tools/docs/build.py for the details.
#   bash tools/build_docs.sh docs            # the committed site, served by GitHub Pages from /docs
#   bash tools/build_docs.sh /tmp/site       # a throwaway build (what `make test` does)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python}"
if ! "$PY" -c 'import mkdocs, material, nbdev' 2>/dev/null; then
  echo "build_docs.sh: $PY lacks mkdocs, mkdocs-material or nbdev; put the venv first on PATH" \
       "(export PATH=\$PWD/.venv/bin:\$PATH) and run: pip install -e '.[dev]'" >&2
  exit 2
fi
exec "$PY" tools/docs/build.py "${1:-docs}" "${@:2}"
