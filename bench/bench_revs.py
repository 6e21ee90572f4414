"""Two versions of timmdata against each other, alternating in one run: did a change make loading slower?

Each round runs `timmdata bench` (train and eval, timmdata against timm) and `bench/bench_timm1031.py` (NaFlex and
scheduled batching) once with the OLD source tree first on `PYTHONPATH` and once with the NEW one, in turn, so both
see the same machine load. It prints, per pipeline, the median images/s of each version, and the median ratio
new/old of the timmdata/timm ratios (timm's loader, run in the same process, is the yardstick that cancels load).

    git worktree add /tmp/old <rev>   # the version to compare against (its compiled extension copied in)
    python bench/bench_revs.py --old /tmp/old --new . [--rounds 3]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile
from pathlib import Path

def run_one(tree: Path, out: Path, which: str, workers: int) -> dict:
    "Runs one benchmark with `tree` first on PYTHONPATH; returns {pipeline: (timmdata img/s, timm img/s)}."
    env = {**os.environ, 'PYTHONPATH': str(tree)}
    if which == 'bench':
        cmd = [sys.executable, '-m', 'timmdata.tools.cli', 'bench', '--quick', '--contenders', 'timmdata,timm', '--no-progress',
               '--workers', str(workers), '--out', str(out)]
    else:
        cmd = [sys.executable, str(tree / 'bench' / 'bench_timm1031.py'), '--epochs', '2', '--workers', str(workers),
               '--out', str(out)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tree)
    res = json.loads((out / 'bench.json' if which == 'bench' else out).read_text())  # bench writes a folder, 1031 a file
    return {k: (v['timmdata'], v['timm']) for k, v in _rates(res, which).items()}

def _rates(res: dict, which: str) -> dict:
    "Median images/s per pipeline and contender from either benchmark's JSON."
    if which == 'bench':  # {'pipelines': {pipeline: {'img_per_s': {contender: median img/s}}}}
        return {f'bench {p}': r['img_per_s'] for p, r in res['pipelines'].items()}
    return {f'1031 {p}': r['median'] for p, r in res['pipelines'].items()}

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--old', required=True, help='source tree of the version to compare against')
    p.add_argument('--new', default='.', help='source tree of the new version')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--workers', type=int, default=2)
    p.add_argument('--benches', default='bench,1031')
    a = p.parse_args(argv)
    trees = {'old': Path(a.old).resolve(), 'new': Path(a.new).resolve()}
    seen = {}  # (pipeline, version) -> list of (timmdata, timm)
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            for which in a.benches.split(','):
                for v in (('old', 'new') if r % 2 == 0 else ('new', 'old')):
                    for k, pair in run_one(trees[v], Path(d) / f'{v}-{which}-{r}', which, a.workers).items():
                        seen.setdefault((k, v), []).append(pair)
            print(f'round {r + 1}/{a.rounds} done', flush=True)
    for k in sorted({k for k, _ in seen}):
        old, new = seen[(k, 'old')], seen[(k, 'new')]
        ratio = statistics.median((n[0] / n[1]) / (o[0] / o[1]) for o, n in zip(old, new, strict=True))
        print(f"{k:16s} old {statistics.median(x[0] for x in old):6.0f} img/s   new {statistics.median(x[0] for x in new):6.0f} img/s"
              f"   new/old (timm-normalised) {ratio:.3f}")

if __name__ == '__main__': main()
