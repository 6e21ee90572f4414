"""Reading over a server that ignores HTTP Range requests (`python -m http.server`, in a process of its own): one run
compares, for Parquet files with their index and for WebDataset shards with their dataset index, a local read of the
files with the same files over that server, read whole (`timmdata.sources.whole_files`): without a node cache (each
worker process holds the files it reads in memory) and with one (`cache_dir`: each file downloaded once for the
machine, read from the copy).

Each epoch is `--n` generated 500x375 JPEGs (`timmdata.make_sample_dataset`, quality 90, 53 KB on average) through
create_loader's training pipeline at 224 (random resized crop, flip; decode included), `--workers` persistent
workers, batch 32, CPU output; the sources alternate within each epoch, who goes first rotating. The first epoch
includes the downloads (the whole files, into each worker's memory or into the cache) and, for every source alike, the
workers' start; the next `--epochs` read from those copies (the files fit in the 1 GiB a process holds: nothing is fetched again). Prints, per source, the first
epoch's images/s, the median of the others, and each one's ratio to the local read of the same format.

    python bench/bench_no_range.py --n 500 --epochs 3 --workers 2
"""
from __future__ import annotations
import argparse, atexit, shutil, statistics, sys, tempfile, warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from timmdata import create_dataset, make_sample_dataset, write_shards
from timmdata.parquet.source import write_parquet_index, write_sample_parquet
from _common import epoch_cpu, http_server, train_loaders


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--n', type=int, default=500, help='images (10 classes)')
    ap.add_argument('--epochs', type=int, default=3, help='epochs timed after the first')
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--batch-size', type=int, default=32)
    a = ap.parse_args()
    a.input_size = (3, 224, 224)
    tmp = Path(tempfile.mkdtemp(prefix='bench_no_range_'))
    atexit.register(shutil.rmtree, tmp, True)
    photos = make_sample_dataset(tmp / 'photos', n_train=a.n // 10, n_val=0, size=(500, 375))
    files = sorted((photos / 'train').rglob('*.JPEG'))
    classes = sorted({f.parent.name for f in files})
    write_sample_parquet(tmp / 'pq', [(f.read_bytes(), classes.index(f.parent.name)) for f in files], classes, files=4)
    write_parquet_index(tmp / 'pq')
    write_shards(photos, tmp / 'wds', shard_size=max(1, len(files) // 4), split='train', progress=False)
    n_bytes = sum(f.stat().st_size for f in files)
    print(f'{len(files)} images, {n_bytes / len(files) / 1e3:.0f} KB on average; 4 Parquet files with their index, '
          f'4 shards with their dataset index')
    common = dict(split='train', is_training=True, batch_size=a.batch_size)
    with http_server(tmp) as url, warnings.catch_warnings():
        warnings.simplefilter('ignore')  # the server's warning, once per source: what this measures is said above
        sources = {}
        for fmt, name in (('parquet', 'parquet/x'), ('wds', 'wds/x')):
            sources[f'{fmt} local'] = lambda n=name, f=fmt: create_dataset(n, root=str(tmp / ('pq' if f == 'parquet' else 'wds')), **common)
            sources[f'{fmt} http.server'] = lambda n=name, f=fmt: create_dataset(n, root=f'{url}/{"pq" if f == "parquet" else "wds"}', **common)
            sources[f'{fmt} http.server+cache'] = lambda n=name, f=fmt: create_dataset(
                n, root=f'{url}/{"pq" if f == "parquet" else "wds"}', cache_dir=str(tmp / f'cache-{f}'), **common
            )
        loaders = train_loaders(sources, a)
        rates, names = {k: [] for k in loaders}, list(loaders)
        for e in range(a.epochs + 1):
            for name in names[e % len(names):] + names[: e % len(names)]:
                ds, loader = loaders[name]
                ds.set_epoch(e)
                got, dt, _, _ = epoch_cpu(loader)
                rates[name].append(got / dt)
    print(f'\n{"source":<24}{"first epoch":>12}{"x local":>9}{"then (median)":>15}{"x local":>9}   every epoch (images/s)')
    for name, r in rates.items():
        local = rates[name.split()[0] + ' local']
        later, local_later = statistics.median(r[1:]), statistics.median(local[1:])
        print(f'{name:<24}{r[0]:>12.0f}{r[0] / local[0]:>9.2f}{later:>15.0f}{later / local_later:>9.2f}   '
              + ' '.join(f'{x:.0f}' for x in r))
    for _, loader in loaders.values():
        getattr(loader, 'shutdown', lambda: None)()


if __name__ == '__main__':
    main()
