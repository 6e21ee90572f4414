"""Mixing many sources (issue 59): a training loader over 100 sources against one source over the same images, in one
run (the loaders alternate epoch by epoch): images/s and the ratio (paired: per round), the workers' memory (PSS) and
the threads and open files of the loader's processes.

The 100 sources are 100 disjoint slices of the one source's reader, weighted by their sizes, the epoch as long as the
one source's: the same images, decoded and transformed alike; what differs is the mix (its order, its reader).
Run: python bench/bench_mixing.py [--images 2000 --epochs 6 --workers 2 --batch-size 64]"""
import argparse, os, statistics, sys, tempfile
import numpy as np
from timmdata.dataset import ImageDataset
from timmdata.readers.core import Reader
from timmdata.streams.mixing import mix_datasets
from timmdata.tools.bench import worker_pids
from timmdata.tools.sample_data import make_sample_dataset
from _common import alternate_epochs, print_rates, pss, train_loaders


class Slice(Reader):
    "Samples `idx` of reader `r`: one of the 100 sources."

    def __init__(self, r: Reader, idx):
        self.r, self.idx, self.root, self.class_to_idx = r, np.asarray(idx), r.root, r.class_to_idx

    def __len__(self):
        return len(self.idx)

    def __getitem__(self, i):
        return self.r[int(self.idx[i])]

    def _filename(self, i):
        return self.r._filename(int(self.idx[i]))


def counts(pids) -> tuple:
    "(threads, open files) of processes `pids`."
    return (sum(len(os.listdir(f'/proc/{p}/task')) for p in pids), sum(len(os.listdir(f'/proc/{p}/fd')) for p in pids))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--images', type=int, default=2000)
    ap.add_argument('--sources', type=int, default=100)
    ap.add_argument('--epochs', type=int, default=6, help='timed epochs (after one to warm up)')
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--input-size', type=int, default=224)
    ap.add_argument('--root', default=None, help='the sample data (default: a temporary folder, removed after)')
    a = ap.parse_args(argv)
    tmp = None if a.root else tempfile.TemporaryDirectory()
    root = make_sample_dataset(a.root or os.path.join(tmp.name, 'data'), n_train=a.images // 10, n_val=1, size=(320, 240))
    one = ImageDataset(str(root), split='train')
    n = len(one)
    parts = np.array_split(np.random.default_rng(0).permutation(n), a.sources)
    make_mix = lambda: mix_datasets([Slice(one.reader, p) for p in parts], weights=[len(p) for p in parts], epoch_length=n)
    loaders = train_loaders({'1 source': lambda: ImageDataset(str(root), split='train'), f'{a.sources} sources': make_mix}, a)
    mem, procs = {}, {}

    def after_epoch():
        for name, (_, dl) in loaders.items():
            pids = worker_pids(dl)
            mem.setdefault(name, []).append(sum(pss(p) for p in pids))
            procs[name] = counts([os.getpid()] + pids)

    cpu = {}
    rates = alternate_epochs(loaders, a.epochs, cpu)  # an epoch to warm up, then the timed ones, alternating
    after_epoch()  # memory and counts with the workers alive (persistent)
    print(f'{n} images ({a.input_size}px crops from 320x240 JPEGs), batch {a.batch_size}, {a.workers} workers, '
          f'{a.epochs} rounds; shared 2-core machine')
    print_rates(rates, '1 source', 'x 1 src', cpu=cpu)
    base = f'{a.sources} sources'
    m1, m2 = statistics.median(mem['1 source']), statistics.median(mem[base])
    print(f'workers\' memory (PSS, median over rounds): 1 source {m1 / 1e6:.1f} MB, {base} {m2 / 1e6:.1f} MB: '
          f'ratio {m2 / m1:.3f}')
    print(f'threads and open files of the loader\'s processes (main + workers, both loaders alive): '
          f'1 source {procs["1 source"]}, {base} {procs[base]}')
    r = statistics.median(x / y for x, y in zip(rates[base], rates['1 source'], strict=True))
    print(f'throughput ratio ({base} / 1 source, paired median): {r:.3f}')
    if tmp is not None:
        tmp.cleanup()


if __name__ == '__main__':
    sys.exit(main())
