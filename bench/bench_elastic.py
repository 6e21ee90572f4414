"""Issue 30's elastic-order benchmark: one training epoch of local WebDataset shards through create_loader in the stream order
of before (`order='shards'`: shards dealt to workers, buffer shuffle) and in the global order, the training default (`order=
'global'`: each sample read by position through the member-offset index), alternating epoch by epoch; medians after a warm-up
epoch, the ratio (goal: global >= 0.97x shards), and the bytes each order reads per epoch (goal: about one pass).

    python bench/bench_elastic.py --n 2000 --epochs 3 --workers 2
"""
import argparse, atexit, os, shutil, statistics, sys, tempfile, warnings
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
from _common import epoch as _epoch
from bench_streaming import _write_shards
from timmdata import ImageDataset, create_loader, make_sample_dataset
from timmdata.streams.streaming import IterableImageDataset


def _children_stats() -> tuple:
    "(bytes read through read/pread calls, CPU seconds) of the loader workers (this process's children) so far; Linux /proc, else zeros."
    rchar, cpu, me, tick = 0, 0.0, str(os.getpid()), os.sysconf('SC_CLK_TCK') if hasattr(os, 'sysconf') else 100
    for pid in (os.listdir('/proc') if os.path.isdir('/proc') else []):
        try:
            if not pid.isdigit(): continue
            f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
            if f[1] != me: continue
            cpu += (int(f[11]) + int(f[12])) / tick  # utime + stime
            rchar += int(next(l for l in open(f'/proc/{pid}/io') if l.startswith('rchar:')).split()[1])
        except (OSError, StopIteration, IndexError, ValueError): pass
    return rchar, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--n', type=int, default=2000, help='training images (about 500x375 JPEGs)')
    ap.add_argument('--epochs', type=int, default=3, help='timed epochs per order (after one warm-up epoch)')
    ap.add_argument('--workers', type=int, default=min(8, os.cpu_count() or 1), help='loader workers')
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--input-size', type=int, default=224)
    ap.add_argument('--block-shards', type=int, default=8)
    ap.add_argument('--root', default=None, help='work folder (default: a temporary one)')
    a = ap.parse_args()
    tmp = Path(a.root or tempfile.mkdtemp(prefix='bench_elastic_'))
    if not a.root: atexit.register(shutil.rmtree, tmp, True)  # a temporary work folder goes when the run ends
    folder = make_sample_dataset(tmp / 'images', n_train=max(1, a.n // 10), n_val=1, size=(500, 375)) / 'train'
    n = len(ImageDataset(folder))
    shard_size = max(1, n // (4 * max(1, a.workers)))
    _write_shards(folder, tmp / 'shards', shard_size)
    print(f'{n} images, {a.workers} workers, batch {a.batch_size}, input {a.input_size}, shards of {shard_size}, blocks of {a.block_shards} shards')
    loaders = {}
    for order in ('shards', 'global'):
        ds = IterableImageDataset(tmp / 'shards', reader='wds/bench', is_training=True, batch_size=a.batch_size, order=order,
                                  block_shards=a.block_shards)
        loaders[order] = (ds, create_loader(ds, a.input_size, a.batch_size, is_training=True, num_workers=a.workers,
                                            persistent_workers=True, device='cpu'))
    rates, reads, cpus = {k: [] for k in loaders}, {k: [] for k in loaders}, {k: [] for k in loaders}
    data_mb = sum(p.stat().st_size for p in (tmp / 'shards').glob('*.tar')) / 2**20
    for e in range(a.epochs + 1):  # epoch 0 warms up; the orders alternate within each epoch
        for order, (ds, loader) in loaders.items():
            ds.set_epoch(e)
            r0, c0 = _children_stats()
            got, t = _epoch(loader)
            r1, c1 = _children_stats()
            if e: rates[order].append(got / t); reads[order].append((r1 - r0) / 2**20); cpus[order].append((c1 - c0) / got * 1e3)
    base = statistics.median(rates['shards'])
    cbase = statistics.median(cpus['shards'])
    print(f'{"order":<10}{"images/s (median)":>20}{"x shards":>10}{"worker CPU ms/image":>21}{"x shards":>10}{"MB read/epoch":>15}{"x data":>8}   epochs (images/s)')
    for order, r in rates.items():
        m, mb, c = statistics.median(r), statistics.median(reads[order]), statistics.median(cpus[order])
        print(f'{order:<10}{m:>20.0f}{m / base:>10.2f}{c:>21.2f}{c / cbase:>10.2f}{mb:>15.1f}{mb / data_mb:>8.2f}   ' + ' '.join(f'{x:.0f}' for x in r))
    print(f'shards: {data_mb:.1f} MB')


if __name__ == '__main__':
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', UserWarning)
        main()
