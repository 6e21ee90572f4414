"""The CPU batch step with and without timmdata._native: main-process CPU time per image and images/s, in one run.

    python bench/bench_native.py [--root data/sample/train] [--epochs 4]

Two create_loader training loaders (RandomResizedCrop 224, flip, jitter 0.4, batch 64, 2 workers, CPU output) on
the same folder, alternating epoch by epoch; one runs the PrefetchLoader's batch step through the native pass,
the other through the torch ops it replaces (everything else identical). Prints medians over the epochs after
a warm-up."""
import argparse, statistics, time
from timmdata.pixels import decode
from timmdata.tools.bench import LOADERS, time_epoch, bench_root
from timmdata.engine.prefetch import PrefetchLoader

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root', help='image folder with class subfolders (default: the sample dataset, made when missing)')
    p.add_argument('--epochs', type=int, default=4)
    a = p.parse_args(argv)
    root = bench_root(a.root)
    native = decode.native
    if native is None: raise SystemExit(f'the native pass is not active ({decode.NATIVE_STATUS}): nothing to compare')
    def torch_ops(ld):
        "The same loader, its PrefetchLoader made with the extension switched off: its back end runs the step as torch ops."
        with decode.use_native(False):  # only while the back end is chosen: the workers still decode with it, as in the native loader
            return PrefetchLoader(ld.loader, mean=ld.mean, std=ld.std, channels=ld.channels, device=ld.device, color_jitter=ld.jitter)
    loaders = {k: LOADERS['timmdata'](root, True, 64, 2) for k in ('native', 'torch ops')}  # the benchmark's training loader
    loaders['torch ops'] = torch_ops(loaders['torch ops'])
    res = {k: [] for k in loaders}
    for ep in range(a.epochs + 1):
        for k, ld in loaders.items():
            c0 = time.process_time()
            n, dt = time_epoch(ld)
            if ep: res[k].append((n / dt, (time.process_time() - c0) / n * 1e3))
    for k, v in res.items():
        print(f'{k:10s} {statistics.median(r[0] for r in v):6.0f} img/s   main process {statistics.median(r[1] for r in v):.3f} ms CPU per image')

if __name__ == '__main__': main()
