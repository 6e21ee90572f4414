"""Issue 41: where a training stream's extra CPU per image goes, against the folder. One loader per variant over the same
images (2 workers, `create_loader`'s training pipeline, `device='cpu'`), alternating epoch by epoch; CPU ms per image of
the process and its workers (load moves it far less than images/s):

- folder: `ImageDataset` over the image folder;
- global: local shards in the global order, as the library reads them (`SpanReader`: a span's `pread`, its tar records parsed);
- global, no parse: the same reads with each sample's image member located beforehand (what an index of member offsets
  would give): the span's `pread` and the member cut out, no tar header read;
- global, mmap: the shards memory-mapped instead of read (the benchmark's 78 MB stay mapped from epoch to epoch: a
  best case that a dataset larger than memory does not see).

    python bench/bench_stream_read.py --n 1500 --shards 12 --epochs 8
"""
import argparse, mmap, os, statistics, tempfile
from pathlib import Path
from timmdata import ImageDataset, create_loader, make_sample_dataset
from timmdata.streams.global_order import SpanReader
from timmdata.streams.streaming import IterableImageDataset
from _common import epoch_cpu
from bench_streaming import _write_shards


class NoParse(SpanReader):
    "Each sample's (key, image offset in its span, image size, target) found once, beforehand; a read cuts the image out."
    def locate(self):
        self.known = {}
        for s in range(len(self.lengths)):
            for m in range(self.lengths[s]):
                a, b = self.spans[s][m].tolist()
                key, img, t = SpanReader.read(self, s, m)
                self.known[s, m] = (key, self._bytes(s, a, b - a).find(img), len(img), t)

    def read(self, s, m):
        a, b = self.spans[s][m].tolist()
        key, i, n, t = self.known[s, m]
        return key, self._bytes(s, a, b - a)[i:i + n], t


class Mapped(SpanReader):
    "The shards memory-mapped (per process), a span sliced out of the map."
    def _bytes(self, s, start, n):
        if getattr(self, '_map_pid', None) != os.getpid():
            self._maps, self._map_pid = {}, os.getpid()
        mm = self._maps.get(s)
        if mm is None:
            fd = os.open(self._paths[s], os.O_RDONLY)
            try: mm = self._maps[s] = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
            finally: os.close(fd)
        return mm[start:start + n]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--n', type=int, default=1500)
    ap.add_argument('--shards', type=int, default=12)
    ap.add_argument('--epochs', type=int, default=8, help='timed epochs (after one warm-up)')
    ap.add_argument('--root', default=None)
    a = ap.parse_args()
    tmp = Path(a.root or tempfile.mkdtemp(prefix='bench_stream_read_'))
    folder = make_sample_dataset(tmp / 'images', n_train=max(1, a.n // 10), n_val=1, size=(500, 375)) / 'train'
    n = len(ImageDataset(folder))
    if not (tmp / 'shards').exists():
        _write_shards(folder, tmp / 'shards', -(-n // a.shards))
    kw = dict(reader='wds/bench', order='global', is_training=True, batch_size=64)
    sets = {'folder': ImageDataset(folder)}
    for name, cls in (('global', None), ('global, no parse', NoParse), ('global, mmap', Mapped)):
        ds = IterableImageDataset(tmp / 'shards', **kw)
        if cls is not None:
            ds._spans.__class__ = cls
        if cls is NoParse:
            ds._spans.locate()
        sets[name] = ds
    loaders = {k: create_loader(d, 224, 64, is_training=True, num_workers=2, persistent_workers=True, device='cpu')
               for k, d in sets.items()}
    cpu = {k: [] for k in loaders}
    for e in range(a.epochs + 1):
        for k, l in loaders.items():
            if hasattr(sets[k], 'set_epoch'): sets[k].set_epoch(e)
            got, t, main_cpu, workers_cpu = epoch_cpu(l)
            if e: cpu[k].append(1000 * (main_cpu + workers_cpu) / got)
    base = statistics.median(cpu['folder'])
    print(f'{n} images, {a.shards} shards, 2 workers, batch 64; CPU ms per image (process and workers), medians of {a.epochs} epochs')
    for k, v in cpu.items():
        print(f'{k:<20}{statistics.median(v):>8.3f}  x folder {statistics.median(v) / base:.3f}')


if __name__ == '__main__':
    main()
