"""Benchmark for issue 30 (random access into shards): what the offset index costs and what it buys.

    python bench/bench_shard_index.py [--n 3000] [--shard-size 500] [--reps 3] [--out out/bench_shard_index]

Writes a sample dataset (`make_sample_dataset`, 96x72 JPEGs) as WebDataset shards, then, in one process and
alternating, times: building the index from scratch (tar headers only), opening a `ShardReader` with the index
cached, reading every sample's bytes through the streaming source (`WdsSource.iter_shard`, front to back), and reading
every sample's bytes by `reader[i]` in order and in a random order. Medians of --reps; ratios printed against the
stream. Reads come from the page cache (the files are small and were just written): this is the CPU cost, not disk.
"""
from __future__ import annotations
import argparse, json, os, shutil, statistics, sys, tempfile, time
from pathlib import Path
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from timmdata.tools.sample_data import make_sample_dataset
from timmdata.tools.shards import write_shards
from timmdata.streams.shard_index import INDEX_FILE, ShardReader
from timmdata.streams.shard_io import WdsSource


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--n', type=int, default=3000, help='samples (the validation split)')
    ap.add_argument('--shard-size', type=int, default=500)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--out', default='out/bench_shard_index')
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    try:
        per_class = a.n // 10
        src = make_sample_dataset(tmp / 'src', n_train=1, n_val=per_class, classes=[f'c{i}' for i in range(10)], size=(96, 72))
        write_shards(src, tmp / 'shards', shard_size=a.shard_size, split='val', progress=False)
        root = str(tmp / 'shards')
        def build():
            (tmp / 'shards' / INDEX_FILE).unlink(missing_ok=True)
            r = ShardReader(root, 'validation'); assert r.scanned > 0
        def cached():
            r = ShardReader(root, 'validation'); assert r.scanned == 0
        reader = ShardReader(root, 'validation')
        ws = WdsSource(root, 'validation')
        def stream(): return sum(len(img) for s in ws.shards for _, img, _ in ws.iter_shard(s))
        def in_order(): return sum(len(reader[i][0]) for i in range(len(reader)))
        perm = np.random.default_rng(0).permutation(len(reader))
        def random(): return sum(len(reader[int(i)][0]) for i in perm)
        assert stream() == in_order() == random()
        steps = {'index build': build, 'open, index cached': cached, 'stream all bytes': stream,
                 'reader[i] in order': in_order, 'reader[i] random order': random}
        times = {k: [] for k in steps}
        for _ in range(a.reps):
            for k, f in steps.items():
                t0 = time.perf_counter(); f(); times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        n = len(reader)
        print(f'{n} samples in {len(ws.shards)} shards, median of {a.reps}:')
        for k, t in med.items():
            print(f'  {k:24s} {t * 1e3:8.1f} ms  {t / n * 1e6:7.1f} us/sample  {t / med["stream all bytes"]:5.2f}x the stream')
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, 'bench_shard_index.json'), 'w') as f:
            json.dump({'samples': n, 'shards': len(ws.shards), 'median_s': med}, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
