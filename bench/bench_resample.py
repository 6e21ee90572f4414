"""The native resampler alone (`resample_window`, Pillow's algorithm, AVX2 where the CPU has it): µs per call, best of
--reps runs of --calls calls, on random pixels: eval's 224x224 window of a 500x375 photo resized to 341x256 (bilinear and
bicubic) and a training crop (280x300 resized to 224x224). With --old TREE the same calls run with TREE first on
PYTHONPATH (a subprocess per tree, alternating --rounds times) and old/new is printed.

    python bench/bench_resample.py [--old TREE] [--rounds 3]
"""
import argparse, json, os, statistics, subprocess, sys, time
from pathlib import Path

CASES = {  # name: (source h, w), resample_window's arguments after the source
    'eval window 500x375 bilinear': ((375, 500), (0, 0, 375, 500, 256, 341, 16, 58, 224, 224, 0, False)),
    'eval window 500x375 bicubic': ((375, 500), (0, 0, 375, 500, 256, 341, 16, 58, 224, 224, 1, False)),
    'train crop 280x300 bilinear': ((280, 300), (0, 0, 280, 300, 224, 224, 0, 0, 224, 224, 0, False)),
}

def measure(calls: int, reps: int) -> dict:
    import numpy as np
    from timmdata.pixels import decode
    nat = decode.NATIVE.module
    if nat is None: raise SystemExit(f'the native extension is not active ({decode.NATIVE_STATUS})')
    out = {}
    for name, ((h, w), args) in CASES.items():
        src = np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)
        nat.resample_window(src, *args)
        best = float('inf')
        for _ in range(reps):
            t = time.perf_counter()
            for _ in range(calls): nat.resample_window(src, *args)
            best = min(best, (time.perf_counter() - t) / calls * 1e6)
        out[name] = best
    return out

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--calls', type=int, default=200); p.add_argument('--reps', type=int, default=5)
    p.add_argument('--old', help='source tree to compare with (its extension built)'); p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child or not a.old:
        res = measure(a.calls, a.reps)
        if a.child: return print(json.dumps(res))
        for k, v in res.items(): print(f'{k:32s} {v:7.1f} µs')
        return
    trees = {'old': Path(a.old).resolve(), 'new': Path(__file__).resolve().parents[1]}
    seen = {'old': [], 'new': []}
    for r in range(a.rounds):
        for v in ('old', 'new') if r % 2 == 0 else ('new', 'old'):
            cmd = [sys.executable, __file__, '--child', '--calls', str(a.calls), '--reps', str(a.reps)]
            out = subprocess.run(cmd, env={**os.environ, 'PYTHONPATH': str(trees[v])}, check=True, capture_output=True, text=True, cwd=trees[v])
            seen[v].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for k in CASES:
        o, n = (statistics.median(x[k] for x in seen[v]) for v in ('old', 'new'))
        print(f'{k:32s} old {o:7.1f} µs  new {n:7.1f} µs  old/new {o / n:.2f}')

if __name__ == '__main__': main()
