"""The CPU batch step with and without timmdata._native: main-process CPU time per image and images/s, in one run.

    python bench/bench_native.py [--root data/sample/train] [--epochs 4]

Two create_loader training loaders (RandomResizedCrop 224, flip, jitter 0.4, batch 64, 2 workers, CPU output) on
the same folder, alternating epoch by epoch; one runs the PrefetchLoader's batch step through the native pass,
the other through the torch ops it replaces (everything else identical). Prints medians over the epochs after
a warm-up."""
import argparse, statistics, time
import timmdata.loader as L
from timmdata.bench import LOADERS, _epoch, bench_root

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root', help='image folder with class subfolders (default: the sample dataset, made when missing)')
    p.add_argument('--epochs', type=int, default=4)
    a = p.parse_args(argv)
    root = bench_root(a.root)
    native = L._native
    if native is None: raise SystemExit('timmdata._native is not built: nothing to compare (install libjpeg-turbo headers, reinstall)')
    loaders = {k: LOADERS['timmdata'](root, True, 64, 2) for k in ('native', 'torch ops')}  # the benchmark's training loader
    res = {k: [] for k in loaders}
    for ep in range(a.epochs + 1):
        for k, ld in loaders.items():
            L._native = native if k == 'native' else None  # read by PrefetchLoader at each batch
            c0 = time.process_time()
            n, dt = _epoch(ld)
            if ep: res[k].append((n / dt, (time.process_time() - c0) / n * 1e3))
    L._native = native
    for k, v in res.items():
        print(f'{k:10s} {statistics.median(r[0] for r in v):6.0f} img/s   main process {statistics.median(r[1] for r in v):.3f} ms CPU per image')

if __name__ == '__main__': main()
