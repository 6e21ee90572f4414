"""Issue 41: where a training stream's CPU per image goes, against the folder. One loader per variant over the same
images (2 workers, `create_loader`'s training pipeline, `device='cpu'`), alternating epoch by epoch; CPU ms per image of
the process and its workers (load moves it far less than images/s), and images/s:

- folder: `ImageDataset` over the image folder;
- global: local shards in the global order, as the library reads them (`SpanReader`: a span's `pread`, its image and
  target cut out where the dataset index says their headers are, `spans.cut_sample`);
- global, parsed: the same reads with every span parsed (what the library did before the index said where the headers
  are, and still does for an index of version 1 or a source with other keys);
- global, the folder's files: the same stream (global order, its samples made as a stream makes them, the loader's
  iterable-dataset path) reading each sample's image from the folder's file of the same key (`timmdata shards` keys a
  sample by its index in the folder): what the stream machinery costs apart from reading shards.

Then, in this process (best of 5 passes over every sample): a sample's read alone (the stream's `SpanReader.read` cut
and parsed, the folder's `open` and `read` of the same file); and a stream's samples made as a worker makes them (read,
header, the transform's draws; the decode left to the collate), its reads `span_reader.READ_GROUP` (16) at a time
ahead of their transforms against one by one, beside the folder's samples made as its workers make them (the loader's
`SeededDataset.__getitems__` over a shuffled epoch's batches of 64, the per-sample stage times for `stats()` included).

    python bench/bench_stream_read.py --n 1500 --shards 12 --epochs 8
"""
import argparse, atexit, os, shutil, statistics, tempfile, time
from pathlib import Path
import torch
from timmdata import ImageDataset, create_loader, make_sample_dataset
from timmdata.pixels.decode import read_source
from timmdata.index import span_reader
from timmdata.streams.streaming import IterableImageDataset
from _common import alternate_epochs
from bench_streaming import _write_shards


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--n', type=int, default=1500)
    ap.add_argument('--shards', type=int, default=12)
    ap.add_argument('--epochs', type=int, default=8, help='timed epochs (after one warm-up)')
    ap.add_argument('--root', default=None)
    a = ap.parse_args()
    tmp = Path(a.root or tempfile.mkdtemp(prefix='bench_stream_read_'))
    if not a.root: atexit.register(shutil.rmtree, tmp, True)  # a temporary work folder goes when the run ends
    folder = make_sample_dataset(tmp / 'images', n_train=max(1, a.n // 10), n_val=1, size=(500, 375)) / 'train'
    n = len(ImageDataset(folder))
    if not (tmp / 'shards').exists():
        _write_shards(folder, tmp / 'shards', -(-n // a.shards))
    kw = dict(reader='wds/bench', order='global', is_training=True, batch_size=64)
    sets = {'folder': ImageDataset(folder)}
    files = [sets['folder'].filename(i, absolute=True) for i in range(n)]
    for name, cuts in (('global', True), ('global, parsed', False), ("global, the folder's files", True)):
        ds = IterableImageDataset(tmp / 'shards', **kw)
        assert ds._spans is not None and ds._spans.cuts, 'the shards are read by their spans, cut by the layout'
        ds._spans.cuts = cuts
        if name.endswith("files"):  # the key and target from the shard (once, here), the image from the folder's file
            got = {(s, m): ds._spans.read(s, m) for s, k in enumerate(ds._spans.lengths) for m in range(k)}
            assert all(img == read_source(files[int(key)]) for key, img, _ in got.values()), 'a key is not its file'
            got = {sm: (key, t) for sm, (key, _, t) in got.items()}
            ds._spans.read = lambda s, m, got=got: (got[s, m][0], read_source(files[int(got[s, m][0])]), got[s, m][1])
        sets[name] = ds
    loaders = {k: create_loader(d, 224, 64, is_training=True, num_workers=2, persistent_workers=True, device='cpu')
               for k, d in sets.items()}
    cpu = {}
    rate = alternate_epochs({k: (sets[k], l) for k, l in loaders.items()}, a.epochs, cpu)  # who goes first rotates
    base, rbase = statistics.median(cpu['folder']), statistics.median(rate['folder'])
    print(f'{n} images, {a.shards} shards, 2 workers, batch 64; CPU ms per image (process and workers) and images/s, '
          f'medians of {a.epochs} epochs')
    for k, v in ((k, cpu[k]) for k in loaders):
        r = statistics.median(rate[k])
        print(f'{k:<28}{statistics.median(v):>8.3f}  x folder {statistics.median(v) / base:.3f}'
              f'{r:>8.0f} img/s  x folder {r / rbase:.3f}')
    rd, pairs = sets['global']._spans, [(s, m) for s, k in enumerate(sets['global']._spans.lengths) for m in range(k)]

    def best(fn):
        out = []
        for _ in range(5):
            t0 = time.perf_counter(); fn(); out.append(time.perf_counter() - t0)
        return 1e6 * min(out)

    def each(fn, xs):  # each result dropped at once: a list of them all would time page faults, not reads
        for x in xs:
            fn(*x)

    rd.cuts = True
    cut = best(lambda: each(rd.read, pairs)) / len(pairs)
    rd.cuts = False
    parsed = best(lambda: each(rd.read, pairs)) / len(pairs)
    rd.cuts = True
    folder_read = best(lambda: each(read_source, [(f,) for f in files])) / len(files)
    print(f'a sample read alone, this process (us): stream cut {cut:.1f}, stream parsed {parsed:.1f}, '
          f'folder (open and read) {folder_read:.1f}')
    one = IterableImageDataset(tmp / 'shards', **kw)  # its samples made here, as the one worker of one rank makes them
    create_loader(one, 224, 64, is_training=True, num_workers=0, device='cpu')  # its transform set, crops deferred
    grouped, made = span_reader.READ_GROUP, {}
    for name, g in (('grouped', grouped), ('one by one', 1)):
        span_reader.READ_GROUP = g
        made[name] = best(lambda: each(lambda x: x, ((x,) for x in one))) / len(one)
    span_reader.READ_GROUP = grouped
    fd = create_loader(ImageDataset(folder), 224, 64, is_training=True, num_workers=0, device='cpu').loader.fetch_dataset
    order = [(int(i), int(i)) for i in torch.randperm(n, generator=torch.Generator().manual_seed(0))]  # (index, key)
    batches = [(order[k : k + 64],) for k in range(0, n, 64)]  # a shuffled epoch's batches, as a worker fetches them
    made['folder'] = best(lambda: each(fd.__getitems__, batches)) / n
    print(f'a sample made, this process (us; read, header, draws): stream, reads grouped by {grouped} '
          f'{made["grouped"]:.1f}, one by one {made["one by one"]:.1f}; folder {made["folder"]:.1f}')


if __name__ == '__main__':
    main()
