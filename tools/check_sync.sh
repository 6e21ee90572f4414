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
