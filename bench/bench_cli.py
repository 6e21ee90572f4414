"""CLI start-up: `timmdata --version` and `timmdata --help` now (lazy imports) against the eager import the CLI once did.

Each command runs in a fresh Python, `--runs` times, alternating; the median wall time is printed with the ratio.
The eager figure imports what the old `timmdata.tools.cli` imported before parsing its arguments (torch and the whole
library: `import timmdata` with every name, and the loader, bench, cache, check and shards modules), then answers.

    python bench/bench_cli.py            # 7 runs each
    python bench/bench_cli.py --runs 15
"""
import argparse, shutil, statistics, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EAGER = ("import timmdata; timmdata.ImageDataset\n"  # every public name, as `import timmdata` did
         "import timmdata.loader, timmdata.tools.bench, timmdata.store.builder, timmdata.tools.check, timmdata.tools.shards\n"
         "from timmdata.tools.cli import main; import sys; sys.exit(main(sys.argv[1:]))")
LAZY = "from timmdata.tools.cli import main; import sys; sys.exit(main(sys.argv[1:]))"  # what the console script runs


def wall(cmd: list) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--runs', type=int, default=7, help='runs of each command (median reported)')
    a = ap.parse_args()
    script = shutil.which('timmdata')
    cases = {'--version': {}, '--help': {}}
    for arg, res in cases.items():
        contenders = {'now (python -c)': [sys.executable, '-c', LAZY, arg],
                      'eager import (python -c)': [sys.executable, '-c', EAGER, arg]}
        if script: contenders['now (console script)'] = [script, arg]
        times = {k: [] for k in contenders}
        wall(contenders['now (python -c)'])  # warm the file cache once
        for _ in range(a.runs):
            for k, c in contenders.items(): times[k].append(wall(c))
        res.update({k: statistics.median(v) for k, v in times.items()})
    print(f'CLI start-up, median of {a.runs} runs, fresh Python each ({sys.platform}, python {sys.version.split()[0]})')
    print('| command | now (lazy) | eager import | eager / now |')
    print('|---|---|---|---|')
    for arg, res in cases.items():
        now, eager = res['now (python -c)'], res['eager import (python -c)']
        print(f'| timmdata {arg} | {now:.2f} s | {eager:.2f} s | {eager / now:.1f}x |')
        if 'now (console script)' in res: print(f"|   (console script `{script} {arg}`) | {res['now (console script)']:.2f} s | | |")


if __name__ == '__main__': main()
