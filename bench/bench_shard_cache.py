"""Issue 30's shard-cache benchmark: training epochs of the same shards through create_loader, read (1) from local
shards, (2) over HTTP from a local server (`python -m http.server`, started here) with the cache on (`cache_dir`,
a limit that holds the dataset), and (3) over HTTP without the cache. Epoch 1 is the warm-up (it fills the cache);
the timed epochs (2, 3, ...) alternate the sources epoch by epoch. Prints samples/s, the ratio of HTTP-with-cache to
local shards (goal >= 0.95x) and the shard bytes in the cache folder. Then the same sources read raw (WdsSource,
no decode, one process), which shows the I/O alone where the loader's decode hides it.

    python bench/bench_shard_cache.py --n 1000 --epochs 3 --workers 2
"""
import argparse, atexit, os, shutil, statistics, tempfile, time, warnings
from pathlib import Path
from timmdata import ImageDataset, make_sample_dataset
from timmdata.streams.shard_io import WdsSource
from timmdata.tools.shards import write_shards
from timmdata.streams.streaming import IterableImageDataset
from _common import alternate_epochs, http_server, print_rates, train_loaders


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--n', type=int, default=1000, help='training images (about 500x375 JPEGs)')
    ap.add_argument('--epochs', type=int, default=3, help='timed epochs per source (after the warm-up epoch)')
    ap.add_argument('--workers', type=int, default=min(8, os.cpu_count() or 1), help='loader workers')
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--input-size', type=int, default=224)
    ap.add_argument('--root', default=None, help='work folder (default: a temporary one)')
    ap.add_argument('--raw-passes', type=int, default=10, help='passes over the shards per timed raw read')
    a = ap.parse_args()
    tmp = Path(a.root or tempfile.mkdtemp(prefix='bench_shard_cache_'))
    if not a.root: atexit.register(shutil.rmtree, tmp, True)  # a temporary work folder goes when the run ends
    folder = make_sample_dataset(tmp / 'images', n_train=max(1, a.n // 10), n_val=1, size=(500, 375)) / 'train'
    n = len(ImageDataset(folder))
    shard_size = max(1, n // (4 * max(1, a.workers)))
    write_shards(folder, tmp / 'shards', shard_size=shard_size, split='train', progress=False)
    size = sum(p.stat().st_size for p in (tmp / 'shards').glob('*.tar'))
    print(f'{n} images, {a.workers} workers, batch {a.batch_size}, input {a.input_size}, shards of {shard_size}: {size / 2**20:.0f} MB')
    print('load average (1, 5, 15 min) at the start: ' + ' '.join(f'{x:.2f}' for x in os.getloadavg()))
    for d in ('cache', 'cache_raw'): shutil.rmtree(tmp / d, ignore_errors=True)  # a reused --root: copies of another port's URLs
    kw = dict(is_training=True, batch_size=a.batch_size)
    with http_server(tmp / 'shards') as url:
        sources = {'local shards': lambda: IterableImageDataset(tmp / 'shards', reader='wds/bench', **kw),
                   'http + cache': lambda: IterableImageDataset(url, reader='wds/bench', cache_dir=tmp / 'cache', cache_limit=2 * size, **kw),
                   'http, no cache': lambda: IterableImageDataset(url, reader='wds/bench', **kw)}
        print_rates(alternate_epochs(train_loaders(sources, a), a.epochs), 'local shards', 'x local', 'epochs 2.. (images/s)')
        cached = sum(p.stat().st_size for p in (tmp / 'cache').glob('*.shard'))
        print(f'cache folder: {cached / 2**20:.1f} MB of shards ({cached / size:.2f}x the dataset)')
        raw = {'local shards': WdsSource(tmp / 'shards', 'train'),
               'http + cache': WdsSource(url, 'train', cache_dir=tmp / 'cache_raw', cache_limit=2 * size),
               'http, no cache': WdsSource(url, 'train')}
        secs = {k: [] for k in raw}
        for e in range(a.epochs + 1):  # epoch 0 fills the cache
            for name, src in raw.items():
                t0 = time.perf_counter()
                got = sum(1 for _p in range(a.raw_passes) for sh in src.shards for _ in src.iter_shard(sh))  # long enough to time
                if e: secs[name].append(got / (time.perf_counter() - t0))
            raw['http + cache'].cache.wait()
        base = statistics.median(secs['local shards'])
        print(f'raw read (no decode): ' + ', '.join(f'{k} {statistics.median(v):.0f}/s ({statistics.median(v) / base:.2f}x local)' for k, v in secs.items()))
        ratios = [c / l for l, c in zip(secs['local shards'], secs['http + cache'], strict=True)]
        print('raw read, http + cache / local shards, epoch by epoch: ' + ' '.join(f'{r:.2f}' for r in ratios) +
              f' (median {statistics.median(ratios):.2f})')
        print('load average (1, 5, 15 min) at the end: ' + ' '.join(f'{x:.2f}' for x in os.getloadavg()))


if __name__ == '__main__':
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', UserWarning)
        main()
