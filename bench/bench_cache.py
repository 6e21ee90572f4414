"""Benchmark for issues 7 and 29: epochs from a timmdata image store against timm's create_loader on the JPEG folder.

    python bench/bench_cache.py [--root data/sample/train] [--store data/sample_store] [--epochs 5] [--modes train,eval]
                                [--old /work/main] [--out out/bench_cache]

Steps: (1) make the sample dataset when missing (1500 train JPEGs, 426x320, q90); (2) build the store from its
train/ folder from scratch, timed (seconds per 1000 images, bytes on disk); (3) time training epochs
(RandomResizedCrop 224, flip 0.5, colour jitter 0.4, float32 normalised NCHW batches on the CPU, batch 64,
2 workers) of timmdata's create_loader on the store, timm's create_loader on the JPEG folder and, for context,
timmdata's create_loader on the same JPEG folder; the loaders alternate epoch by epoch (a noisy neighbour hurts
all alike), one warm-up epoch each starts the persistent workers, the median of the measured epochs counts.
Then the same for evaluation (resize 256, centre crop 224), unless --modes says otherwise. With --old TREE, the store
loader of another source tree (the version before a change) runs in a child process with TREE on its PYTHONPATH and
takes its turn in the same rotation: before/after under the same load, as ratios to timm.
(4) In one process, the per-image cost of each step on the store path (the training loader's own path: each sample's
draws, then the batch's crops made by the collate in one call), and the store loader's own `stats()` table
of the measured epochs, to show where the time goes.
The main process runs max(1, cores - workers) torch threads (--main-threads; 0: torch's default of one per core):
with every core busy in a worker, extra intra-op threads in the main process only spin and steal the workers'
cores. It is one process-wide setting, so timm's and timmdata's loaders get the same.
Writes bench_cache.json and bench_cache.png under --out and prints a table.
"""
from __future__ import annotations
import argparse, json, os, statistics, sys, time
from pathlib import Path
import numpy as np
import torch

# run as `python bench/bench_cache.py` from a checkout: the repository's timmdata, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from timmdata.tools.bench import LOADERS, bench_root
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import epoch_cpu as _epoch, in_turn, write_json

TARGET = 12.0  # issue 29 (issue 7: 8x): the store must feed training at least 12x faster than timm on the JPEG folder


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob('*') if p.is_file())


def _timmdata_loader(root, batch_size, workers, train=True): return LOADERS['timmdata'](root, train, batch_size, workers)
def _timm_loader(root, batch_size, workers, train=True): return LOADERS['timm'](root, train, batch_size, workers)


_CHILD = r"""
import json, os, sys, torch
sys.path.insert(0, sys.argv[6])  # bench/, for _common
from _common import epoch_cpu
from timmdata.tools.bench import LOADERS
store, train, bs, workers, threads = sys.argv[1], sys.argv[2] == 'train', int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if threads: torch.set_num_threads(threads)
ld = LOADERS['timmdata'](store, train, bs, workers)
print('ready', flush=True)
for line in sys.stdin:
    print(json.dumps(epoch_cpu(ld)), flush=True)
os._exit(0)  # its workers see their parent go and stop; an orderly shutdown could wait on them
"""


class _OldTree:
    "The store loader of another source tree, in a child process with that tree on its PYTHONPATH; `epoch()` is `_epoch` there."

    def __init__(self, tree, store, train, batch_size, workers):
        import subprocess
        env = {**os.environ, 'PYTHONPATH': str(Path(tree).resolve())}
        self.p = subprocess.Popen([sys.executable, '-c', _CHILD, str(store), 'train' if train else 'eval', str(batch_size),
                                   str(workers), str(torch.get_num_threads()), str(Path(__file__).resolve().parent)], env=env, cwd=str(tree),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.p.stdout.readline().strip() != 'ready':
            raise RuntimeError(f'the store loader of {str(tree)!r} did not start (see its error above)')

    def epoch(self):
        self.p.stdin.write('epoch\n'); self.p.stdin.flush()
        return tuple(json.loads(self.p.stdout.readline()))

    def close(self):
        import subprocess
        self.p.stdin.close()
        try: self.p.wait(timeout=60)
        except subprocess.TimeoutExpired: self.p.kill(); self.p.wait()


def _per_image_costs(loader, train: bool = True, n: int = 512, reps: int = 3) -> dict:
    """CPU milliseconds per image of each step of the store path, in this process on one thread, in the steady state
    of a worker: each result is dropped before the next is made (a worker's collate copies the image and frees it),
    batches are collated into one reused buffer (a worker's ring slot) and the float batches are dropped as a training
    step would. Best of `reps` passes after a warm-up pass."""
    from timmdata.dataset import ImageDataset
    ds = loader.dataset
    while not isinstance(ds, ImageDataset): ds = ds.dataset  # under the loader's per-sample seeding wrapper
    reader = ds.reader
    idx = np.random.default_rng(0).permutation(len(reader))[:n].tolist()
    threads = torch.get_num_threads(); torch.set_num_threads(1)
    from timmdata.batch.collate import fast_collate
    from timmdata.pixels.resample import PendingResize
    deferred = False
    out = {}
    def timed(name, fn, count):
        best = float('inf')
        for r in range(reps + 1):
            t = time.process_time(); fn(); dt = time.process_time() - t
            if r: best = min(best, dt)
        out[name] = best / count * 1e3
    try:
        timed('reader[i] (memory-mapped view)', lambda: [reader[i] for i in idx], n)
        def samples():
            for i in idx: ds[i]
        timed('dataset[i] (+ crop, resize, flip)' if train else 'dataset[i] (+ resize, centre crop)', samples, n)
        # of which, each step of the transform in turn (its input made beforehand): the rest of dataset[i] is Python
        # around them (reading, seeding, dispatch)
        imgs = [ds.decode_sample(reader[i][0]) for i in idx]
        steps = list(getattr(ds.transform, 'transforms', [ds.transform]))
        def each(fn, xs):  # the results dropped one by one, as in a worker
            for x in xs: fn(x)
        for k, t in enumerate(steps):
            xs = imgs
            for u in steps[:k]: xs = [u(x) for x in xs]
            timed(f'  of which {type(t).__name__}', lambda t=t, xs=xs: each(t, xs), n)
            del xs
        batch = [ds[i] for i in idx[:64]]
        buf = torch.empty((64, 3, 224, 224), dtype=torch.uint8)
        timed('fast_collate (into a reused buffer)', lambda: [fast_collate(batch, alloc=lambda shape: buf[:shape[0]]) for _ in range(8)], 8 * 64)
        deferred = train and isinstance(ds.sample(idx[0], defer=True)[0], PendingResize)
        if deferred:  # what the loader's workers do instead (`SeededDataset.defer_pixels`): draws now, pixels in the collate
            timed('dataset.sample(i, defer=True) (read, draws)', lambda: [ds.sample(i, defer=True) for i in idx], n)
            pend = [ds.sample(i, defer=True) for i in idx[:64]]
            timed('fast_collate of them (64 crops, one call)', lambda: [fast_collate(pend, alloc=lambda shape: buf[:shape[0]]) for _ in range(8)], 8 * 64)
        process = getattr(loader, '_process', None)  # PrefetchLoader's batch step: float, (jitter), normalise
        if process is not None:
            x, _ = fast_collate(batch, alloc=lambda shape: buf[:shape[0]])
            def steps():
                for _ in range(8): process(x)
            timed('prefetcher batch step (1 thread)', steps, 8 * 64)
    finally: torch.set_num_threads(threads)
    path = (('dataset.sample', 'fast_collate of them') if deferred else ('dataset[i]', 'fast_collate (into')) + ('prefetcher',)
    out['total (the loader\'s path: ' + ', '.join(path) + ')'] = sum(v for k, v in out.items() if k.startswith(path))
    return out


def _plot(res: dict, path: Path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    modes = list(res['modes'])
    colours = {'timm, JPEG folder': '#ff7f0e', 'timmdata, JPEG folder': '#9ecae1', 'timmdata, store': '#1f77b4',
               'timmdata (old tree), store': '#aaaaaa'}
    fig, axes = plt.subplots(1, len(modes), figsize=(5.5 * len(modes), 3.6), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        r = res['modes'][mode]
        names = list(r['img_per_s'])
        rates = [r['img_per_s'][n] for n in names]
        bars = ax.bar(range(len(names)), rates, color=[colours.get(n) for n in names])
        ax.bar_label(bars, labels=[f"{v:.0f} img/s\n{v / r['img_per_s']['timm, JPEG folder']:.1f}x timm" for v in rates], fontsize=7)
        ax.set_xticks(range(len(names)), [n.replace(', ', '\n') for n in names], fontsize=8)
        ax.set_ylabel('images/s (median epoch)'); ax.set_ylim(0, max(rates) * 1.3)
        ax.set_title(f"{mode}: store / timm {r['ratio_store_vs_timm']:.1f}x" + (f' (target {TARGET:.0f}x)' if mode == 'train' else ''))
    fig.suptitle(f"{res['images']} images/epoch, batch {res['batch_size']}, {res['workers']} workers, {res['cpu_count']} cores", fontsize=9)
    fig.tight_layout(); fig.savefig(path, dpi=110); plt.close(fig)


def _measure(mode: str, root: Path, store: Path, epochs: int, batch_size: int, workers: int, folder_timmdata: bool,
             old=None) -> dict:
    "Alternating epochs of the contenders for `mode` ('train' or 'eval'): images/s, CPU per image, the store's stats."
    train = mode == 'train'
    makers = {'timm, JPEG folder': lambda: _timm_loader(root, batch_size, workers, train),
              'timmdata, store': lambda: _timmdata_loader(store, batch_size, workers, train)}
    if old: makers['timmdata (old tree), store'] = lambda: _OldTree(old, store, train, batch_size, workers)
    if folder_timmdata: makers['timmdata, JPEG folder'] = lambda: _timmdata_loader(root, batch_size, workers, train)
    loaders = {k: f() for k, f in makers.items()}
    secs, cpu, seen = {k: [] for k in loaders}, {k: [] for k in loaders}, {}
    try:
        for ep in range(epochs + 1):
            if ep == 1 and hasattr(loaders['timmdata, store'], 'stats'):
                loaders['timmdata, store'].stats().reset()  # the table below: the measured epochs only
            for k in in_turn(list(loaders), ep):  # who goes first rotates: no seat favoured
                ld = loaders[k]
                n, dt, c_main, c_workers = ld.epoch() if isinstance(ld, _OldTree) else _epoch(ld)
                secs[k].append(dt); seen[k] = n
                if ep: cpu[k].append((c_main / n * 1e3, c_workers / n * 1e3))
                print(f'{mode} epoch {ep} {k:>26}: {dt:6.2f} s  {n / dt:7.0f} img/s  CPU ms/img: main {c_main / n * 1e3:.3f} '
                      f'workers {c_workers / n * 1e3:.3f}' + ('  (warm-up)' if ep == 0 else ''), flush=True)
        store_ld = loaders['timmdata, store']
        stats = str(store_ld.stats()) if hasattr(store_ld, 'stats') else ''
        r = {'epoch_seconds': secs, 'images_per_epoch': seen['timmdata, store'],
             'median_epoch_seconds': {k: statistics.median(v[1:]) for k, v in secs.items()}}
        r['img_per_s'] = {k: seen[k] / r['median_epoch_seconds'][k] for k in secs}
        r['cpu_ms_per_image'] = {k: {'main': statistics.median(a for a, _ in v), 'workers': statistics.median(b for _, b in v)}
                                 for k, v in cpu.items()}
        timm = r['img_per_s']['timm, JPEG folder']
        r['ratio_store_vs_timm'] = r['img_per_s']['timmdata, store'] / timm
        # per measured epoch, the store's and the old tree's rate over timm's of the same round: load hits them alike
        r['round_ratios'] = {k: [secs['timm, JPEG folder'][e] / secs[k][e] for e in range(1, epochs + 1)]
                             for k in secs if k != 'timm, JPEG folder'}
        if old:
            r['ratio_new_vs_old_tree'] = r['img_per_s']['timmdata, store'] / r['img_per_s']['timmdata (old tree), store']
        if folder_timmdata:
            r['ratio_store_vs_timmdata_folder'] = r['img_per_s']['timmdata, store'] / r['img_per_s']['timmdata, JPEG folder']
        r['per_image_ms'] = _per_image_costs(store_ld, train)
        r['store_stats'] = stats
        return r
    finally:
        for ld in loaders.values():
            if isinstance(ld, _OldTree): ld.close()


def run(root=None, store=None, epochs: int = 5, batch_size: int = 64, workers: int = 2, max_size: int = 256,
        fmt: str = 'raw', out='out/bench_cache', folder_timmdata: bool = True, main_threads: int | None = None,
        modes=('train', 'eval'), old=None) -> dict:
    from timmdata.store.builder import build_cache
    if main_threads: torch.set_num_threads(main_threads)  # the main process only: workers run one thread each anyway
    root = bench_root(root)  # default: the generated sample dataset's train/ folder, made when missing
    store = Path(store) if store else root.parent.parent / f'{root.parent.name}_store'
    n_src, src_mb = sum(1 for p in root.rglob('*') if p.is_file()), _du(root) / 2**20
    print(f'source {root}: {n_src} files, {src_mb:.1f} MB')
    # (2) build from scratch
    t = time.perf_counter()
    m = build_cache(root, store, max_size=max_size, format=fmt, num_workers=workers, overwrite=True)
    build_s = time.perf_counter() - t
    res = {'source': str(root), 'store': str(store), 'format': fmt, 'max_size': max_size, 'images': m['num_samples'],
           'source_mb': src_mb, 'store_mb': _du(store) / 2**20, 'build_seconds': build_s,
           'build_seconds_per_1000': build_s / m['num_samples'] * 1000, 'build_workers': workers,
           'batch_size': batch_size, 'workers': workers, 'epochs': epochs, 'cpu_count': os.cpu_count(),
           'torch': torch.__version__, 'main_threads': torch.get_num_threads(), 'old_tree': str(old) if old else None,
           'load_average_before': os.getloadavg(), 'modes': {}}
    # (3) alternating epochs, (4) where the time goes: per mode
    for mode in modes:
        res['modes'][mode] = _measure(mode, root, store, epochs, batch_size, workers, folder_timmdata, old)
    res['load_average_after'] = os.getloadavg()
    res['ratio_store_vs_timm'] = res['modes'].get('train', next(iter(res['modes'].values())))['ratio_store_vs_timm']
    out = Path(out); out.mkdir(parents=True, exist_ok=True)
    write_json(out / 'bench_cache.json', res)  # with the command that made it
    _plot(res, out / 'bench_cache.png')
    print(table(res))
    print(f'wrote {out / "bench_cache.json"} and {out / "bench_cache.png"}')
    return res


def table(res: dict) -> str:
    lines = [f"store: {res['images']} images, {res['format']}, shorter side <= {res['max_size']}: "
             f"{res['store_mb']:.0f} MB on disk (source JPEGs {res['source_mb']:.0f} MB); "
             f"built in {res['build_seconds']:.1f} s with {res['build_workers']} workers = "
             f"{res['build_seconds_per_1000']:.2f} s per 1000 images",
             f"{res['workers']} workers, batch {res['batch_size']}, main process with {res['main_threads']} torch threads, "
             f"{res['cpu_count']} cores; load average before/after {res['load_average_before'][0]:.1f}/{res['load_average_after'][0]:.1f}"
             + (f"; old tree {res['old_tree']}" if res.get('old_tree') else '')]
    for mode, r in res['modes'].items():
        lines += ['', f'{mode}:', '| loader | median s/epoch | images/s | x timm | median of per-round x timm | CPU ms/img main | CPU ms/img workers |',
                  '|---|---|---|---|---|---|---|']
        timm = r['img_per_s']['timm, JPEG folder']
        for k, v in r['img_per_s'].items():
            c = r['cpu_ms_per_image'][k]
            rr = statistics.median(r['round_ratios'][k]) if k in r['round_ratios'] else 1.0
            lines.append(f"| {k} | {r['median_epoch_seconds'][k]:.3f} | {v:.0f} | {v / timm:.2f} | {rr:.2f} | {c['main']:.3f} | {c['workers']:.3f} |")
        lines += ['', f"{mode}: store vs timm {r['ratio_store_vs_timm']:.2f}x"
                  + (f" (target >= {TARGET:.0f}x: {'met' if r['ratio_store_vs_timm'] >= TARGET else 'MISSED'})" if mode == 'train' else '')
                  + (f"; store new tree vs old tree {r['ratio_new_vs_old_tree']:.2f}x" if 'ratio_new_vs_old_tree' in r else ''),
                  'per image, CPU ms in one process on one thread (where the time goes):',
                  *[f'    {k:<48} {v:7.3f}' for k, v in r['per_image_ms'].items()]]
        if r.get('store_stats'):
            lines += [f'the store loader\'s stats() over the measured {mode} epochs (wall time: on a loaded machine, '
                      'waits count in every stage):', r['store_stats']]
    return '\n'.join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root', help='image folder with class subfolders (default: the sample dataset\'s train/ folder, made when missing)')
    p.add_argument('--store', help='where to build the store (default: next to the dataset, <name>_store)')
    p.add_argument('--epochs', type=int, default=5, help='measured epochs per loader, after one warm-up epoch')
    p.add_argument('--batch-size', type=int, default=64)
    p.add_argument('--workers', type=int, default=2)
    p.add_argument('--max-size', type=int, default=256)
    p.add_argument('--format', default='raw', choices=('raw', 'jpeg'))
    p.add_argument('--no-folder-timmdata', action='store_true', help='skip timmdata on the JPEG folder (context only)')
    p.add_argument('--main-threads', type=int, default=None,
                   help="torch threads of the main process (default: the cores the workers leave free, at least 1; "
                        "0: torch's own choice, one per core)")
    p.add_argument('--modes', default='train,eval', help="comma-separated, of: train, eval")
    p.add_argument('--old', help='another source tree (e.g. the version before a change): its store loader takes its turn '
                                 'in each round, in a child process with that tree on PYTHONPATH')
    p.add_argument('--out', default='out/bench_cache', help='folder for bench_cache.json and bench_cache.png')
    a = p.parse_args(argv)
    # The main process turns uint8 batches into normalised float (both loaders' prefetchers do). With every core
    # busy in a worker, more intra-op threads there only spin and steal the workers' cores: on this 2-core machine
    # torch's default (2 threads) cost the main process several times the CPU per image of 1 thread. The setting is per process, so it applies to timm and timmdata alike.
    threads = max(1, (os.cpu_count() or 1) - a.workers) if a.main_threads is None else a.main_threads
    modes = tuple(m.strip() for m in a.modes.split(',') if m.strip())
    if not modes or set(modes) - {'train', 'eval'}:
        p.error(f"--modes must name train and/or eval; got {a.modes!r}")
    run(a.root, a.store, a.epochs, a.batch_size, a.workers, a.max_size, a.format, a.out, not a.no_folder_timmdata,
        threads or None, modes, a.old)


if __name__ == '__main__':
    main()
