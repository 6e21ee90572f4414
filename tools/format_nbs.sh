#!/usr/bin/env bash
# Formats the code cells of nbs/*.ipynb with ruff (ruff.toml: line length 120, quotes kept), then cleans and exports, so
# timmdata/ follows. Cell directives (`#| export`, `#| hide`, ...) are comments on their own lines: ruff keeps them.
# Magic lines (`%time`, `!pip`) are understood by ruff's notebook parser. Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff format nbs/ "$@"
nbdev_clean >/dev/null
nbdev_export
echo "formatted nbs/ (ruff format), cleaned and exported"
