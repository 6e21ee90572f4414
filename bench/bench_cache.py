"""Benchmark for issue 7: training epochs from a timmdata image store against timm's create_loader on the JPEG folder.

    python bench/bench_cache.py [--root data/sample/train] [--store data/sample_store] [--epochs 5] [--out out/bench_cache]

Steps: (1) make the sample dataset when missing (1500 train JPEGs, 426x320, q90); (2) build the store from its
train/ folder from scratch, timed (seconds per 1000 images, bytes on disk); (3) time training epochs
(RandomResizedCrop 224, flip 0.5, colour jitter 0.4, float32 normalised NCHW batches on the CPU, batch 64,
2 workers) of timmdata's create_loader on the store, timm's create_loader on the JPEG folder and, for context,
timmdata's create_loader on the same JPEG folder; the loaders alternate epoch by epoch (a noisy neighbour hurts
all alike), one warm-up epoch each starts the persistent workers, the median of the measured epochs counts.
(4) In one process, the per-image cost of each step on the store path, to show where the time goes.
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
from timmdata.bench import LOADERS, time_epoch as bench_epoch, worker_pids, bench_root

TARGET = 8.0  # issue 7: the store must feed training at least 8x faster than timm on the JPEG folder


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob('*') if p.is_file())


def _timmdata_loader(root, batch_size, workers): return LOADERS['timmdata'](root, True, batch_size, workers)
def _timm_loader(root, batch_size, workers): return LOADERS['timm'](root, True, batch_size, workers)


def _cpu_seconds(pid: int) -> float:
    "User + system CPU seconds a process has used so far (0 when it is gone)."
    try: f = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    except OSError: return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')


def _epoch(loader) -> tuple[int, float, float, float]:
    "One pass (timmdata.bench's): (images, wall seconds, CPU seconds of this process, CPU seconds of its workers)."
    me, workers = os.getpid(), worker_pids(loader)  # persistent workers: the same processes before and after
    before = {p: _cpu_seconds(p) for p in workers + [me]}
    n, dt = bench_epoch(loader)
    after = {p: _cpu_seconds(p) for p in before}
    return n, dt, after[me] - before[me], sum(after[p] - before[p] for p in workers)


def _per_image_costs(loader, n: int = 512, reps: int = 3) -> dict:
    """CPU milliseconds per image of each step of the store path, in this process on one thread, in the steady state
    of a worker: each result is dropped before the next is made (a worker's collate copies the image and frees it),
    batches are collated into one reused buffer (a worker's ring slot) and the float batches are dropped as a training
    step would. Best of `reps` passes after a warm-up pass."""
    ds, reader = loader.dataset, loader.dataset.reader
    idx = np.random.default_rng(0).permutation(len(reader))[:n].tolist()
    threads = torch.get_num_threads(); torch.set_num_threads(1)
    from timmdata.collate import fast_collate
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
        timed('dataset[i] (+ crop, resize, flip)', samples, n)
        batch = [ds[i] for i in idx[:64]]
        buf = torch.empty((64, 3, 224, 224), dtype=torch.uint8)
        timed('fast_collate (into a reused buffer)', lambda: [fast_collate(batch, alloc=lambda shape: buf[:shape[0]]) for _ in range(8)], 8 * 64)
        process = getattr(loader, '_process', None)  # PrefetchLoader's batch step: float, jitter, normalise
        if process is not None:
            x, _ = fast_collate(batch, alloc=lambda shape: buf[:shape[0]])
            def steps():
                for _ in range(8): process(x)
            timed('prefetcher batch step (1 thread)', steps, 8 * 64)
    finally: torch.set_num_threads(threads)
    out['total (dataset[i] + collate + batch step)'] = sum(v for k, v in out.items() if not k.startswith('reader'))
    return out


def _plot(res: dict, path: Path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    names = list(res['epoch_seconds'])
    colours = {'timm, JPEG folder': '#ff7f0e', 'timmdata, JPEG folder': '#9ecae1', 'timmdata, store': '#1f77b4'}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={'width_ratios': [1.2, 1]})
    for n in names:
        ep = res['epoch_seconds'][n]
        a1.plot(range(len(ep)), ep, 'o-', label=n, color=colours.get(n))
    a1.set_xlabel('epoch (0: warm-up, workers start)'); a1.set_ylabel('seconds per epoch'); a1.set_yscale('log')
    a1.set_title(f"{res['images_per_epoch']} images/epoch, batch {res['batch_size']}, {res['workers']} workers")
    a1.legend(fontsize=8)
    med = [res['median_epoch_seconds'][n] for n in names]
    bars = a2.bar(range(len(names)), med, color=[colours.get(n) for n in names])
    a2.bar_label(bars, labels=[f"{m:.2f} s\n{res['img_per_s'][n]:.0f} img/s" for n, m in zip(names, med)], fontsize=7)
    a2.set_xticks(range(len(names)), [n.replace(', ', '\n') for n in names], fontsize=8)
    a2.set_ylabel('median seconds per epoch'); a2.set_ylim(0, max(med) * 1.3)
    a2.set_title(f"store / timm: {res['ratio_store_vs_timm']:.1f}x (target {TARGET:.0f}x)")
    fig.tight_layout(); fig.savefig(path, dpi=110); plt.close(fig)


def run(root=None, store=None, epochs: int = 5, batch_size: int = 64, workers: int = 2, max_size: int = 256,
        fmt: str = 'raw', out='out/bench_cache', folder_timmdata: bool = True, main_threads: int | None = None) -> dict:
    from timmdata.cache import build_cache
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
           'torch': torch.__version__, 'main_threads': torch.get_num_threads(),
           'load_average_before': os.getloadavg()}
    # (3) alternating epochs
    makers = {'timm, JPEG folder': lambda: _timm_loader(root, batch_size, workers),
              'timmdata, store': lambda: _timmdata_loader(store, batch_size, workers)}
    if folder_timmdata: makers['timmdata, JPEG folder'] = lambda: _timmdata_loader(root, batch_size, workers)
    loaders = {k: f() for k, f in makers.items()}
    secs, cpu = {k: [] for k in loaders}, {k: [] for k in loaders}
    seen = {}
    for ep in range(epochs + 1):
        for k, ld in loaders.items():
            n, dt, c_main, c_workers = _epoch(ld)
            secs[k].append(dt); seen[k] = n
            if ep: cpu[k].append((c_main / n * 1e3, c_workers / n * 1e3))
            print(f'epoch {ep} {k:>22}: {dt:6.2f} s  {n / dt:7.0f} img/s  CPU ms/img: main {c_main / n * 1e3:.3f} '
                  f'workers {c_workers / n * 1e3:.3f}' + ('  (warm-up)' if ep == 0 else ''), flush=True)
    res['load_average_after'] = os.getloadavg()
    res['images_per_epoch'] = seen['timmdata, store']
    res['epoch_seconds'] = secs
    res['median_epoch_seconds'] = {k: statistics.median(v[1:]) for k, v in secs.items()}
    res['img_per_s'] = {k: seen[k] / res['median_epoch_seconds'][k] for k in secs}
    res['cpu_ms_per_image'] = {k: {'main': statistics.median(a for a, _ in v), 'workers': statistics.median(b for _, b in v)}
                               for k, v in cpu.items()}
    res['ratio_store_vs_timm'] = res['img_per_s']['timmdata, store'] / res['img_per_s']['timm, JPEG folder']
    if folder_timmdata:
        res['ratio_store_vs_timmdata_folder'] = res['img_per_s']['timmdata, store'] / res['img_per_s']['timmdata, JPEG folder']
    # (4) where the time goes
    res['per_image_ms'] = _per_image_costs(loaders['timmdata, store'])
    del loaders
    out = Path(out); out.mkdir(parents=True, exist_ok=True)
    (out / 'bench_cache.json').write_text(json.dumps(res, indent=1))
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
             f"{res['cpu_count']} cores; load average before/after {res['load_average_before'][0]:.1f}/{res['load_average_after'][0]:.1f}",
             '', '| loader | median s/epoch | images/s | x timm | CPU ms/img main | CPU ms/img workers |', '|---|---|---|---|---|---|']
    timm = res['img_per_s']['timm, JPEG folder']
    for k, v in res['img_per_s'].items():
        c = res['cpu_ms_per_image'][k]
        lines.append(f"| {k} | {res['median_epoch_seconds'][k]:.3f} | {v:.0f} | {v / timm:.2f} | {c['main']:.3f} | {c['workers']:.3f} |")
    ok = res['ratio_store_vs_timm'] >= TARGET
    lines += ['', f"store vs timm: {res['ratio_store_vs_timm']:.2f}x (target >= {TARGET:.0f}x: {'met' if ok else 'MISSED'})",
              'per image, one thread: ' + ', '.join(f'{k} {v:.3f} ms' for k, v in res['per_image_ms'].items())]
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
    p.add_argument('--out', default='out/bench_cache', help='folder for bench_cache.json and bench_cache.png')
    a = p.parse_args(argv)
    # The main process turns uint8 batches into normalised float (both loaders' prefetchers do). With every core
    # busy in a worker, more intra-op threads there only spin and steal the workers' cores: on this 2-core machine
    # torch's default (2 threads) cost the main process several times the CPU per image of 1 thread. The setting is per process, so it applies to timm and timmdata alike.
    threads = max(1, (os.cpu_count() or 1) - a.workers) if a.main_threads is None else a.main_threads
    run(a.root, a.store, a.epochs, a.batch_size, a.workers, a.max_size, a.format, a.out, not a.no_folder_timmdata, threads or None)


if __name__ == '__main__':
    main()
