#!/usr/bin/env bash
# Runs a command with TMPDIR set to a fresh folder of its own, and removes that folder when the command ends, however
# it ends: `make test` leaves /tmp as it found it. Without it, one run left about 300 folders and 1.3 GB there (the
# notebooks' examples make temporary datasets, worker processes killed on purpose leave their pymp- folders, pytest keeps
# its last three runs), and repeated runs filled a disk. It says how much the command left behind, so a leak shows.
#   bash tools/scratch_tmp.sh python -m pytest tests
set -u
scratch=$(mktemp -d "${TMPDIR:-/tmp}/timmdata-test.XXXXXX") || exit 1
cleanup() {
  local n mb
  # processes the command left (a server, a worker on its way out) may remove their folders while these count: an
  # entry gone between the listing and its stat is not counted, and not printed as find's or du's error
  n=$(find "$scratch" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  mb=$(du -sm "$scratch" 2>/dev/null | cut -f1)
  [ "$n" -gt 0 ] && echo "scratch_tmp: removed what the run left in its temporary folder ($n entries, $mb MB)"
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
TMPDIR="$scratch" "$@"
