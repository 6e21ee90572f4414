#!/usr/bin/env bash
# Fails when nbdev_export or nbdev_clean would change any file: notebooks are the source of timmdata/.
set -euo pipefail
snap() { find nbs timmdata -type f \( -name '*.ipynb' -o -name '*.py' \) -not -path '*/.ipynb_checkpoints/*' -not -path '*/__pycache__/*' | sort | xargs sha1sum; }
before=$(snap)
nbdev_clean >/dev/null
nbdev_export
after=$(snap)
if [ "$before" != "$after" ]; then
  echo "nbdev_clean/nbdev_export changed these files; run them and commit notebooks and timmdata/ together:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi
echo "notebooks and library in sync"

# The house style is the formatter's (ruff.toml): the notebooks' code cells as `ruff format` writes them (apply with
# tools/format_nbs.sh). TIMMDATA_FORMAT_CHECK=0 skips this part (e.g. on a branch made before the formatting was applied).
if [ "${TIMMDATA_FORMAT_CHECK:-1}" != 0 ]; then
  if ! command -v ruff >/dev/null; then echo "ruff not found: pip install -e '.[dev]' (settings.ini dev_requirements)" >&2; exit 1; fi
  if ! ruff format --check --output-format concise nbs/; then
    echo "code cells above are not as ruff format writes them: run bash tools/format_nbs.sh and commit" >&2
    exit 1
  fi
  echo "notebooks formatted (ruff format)"
fi
