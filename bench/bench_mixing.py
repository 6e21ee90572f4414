"""Mixing many sources (issue 59): a training loader over 100 sources against one source over the same images, in one
run (the loaders alternate epoch by epoch): images/s and the ratio (paired: per round), the workers' memory (PSS) and
the threads and open files of the loader's processes (each loader alone in a fresh process for those: a worker forked from
a process that already holds another loader would share, and copy, more of it).

The 100 sources are 100 disjoint slices of the one source's reader, weighted by their sizes, the epoch as long as the
one source's: the same images, decoded and transformed alike; what differs is the mix (its order, its reader).
Run: python bench/bench_mixing.py [--images 2000 --epochs 6 --workers 2 --batch-size 64]"""
import argparse, json, os, statistics, subprocess, sys, tempfile
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


def sources(root, n_sources: int) -> dict:
    "{name: a function making the dataset}: the one source, and the mix of `n_sources` slices of it (the same images)."
    one = ImageDataset(str(root), split='train')
    parts = np.array_split(np.random.default_rng(0).permutation(len(one)), n_sources)
    mix = lambda: mix_datasets([Slice(one.reader, p) for p in parts], weights=[len(p) for p in parts], epoch_length=len(one))
    return {'1 source': lambda: ImageDataset(str(root), split='train'), f'{n_sources} sources': mix}


def alone(a, root, name: str) -> dict:
    "One loader alone in this process: two epochs, then its workers' memory (PSS), and threads and open files of it all."
    (ds, dl), = train_loaders({name: sources(root, a.sources)[name]}, a).values()
    for _ in range(2):
        for _ in dl: pass
    pids = worker_pids(dl)
    threads, files = counts([os.getpid()] + pids)
    return dict(pss=sum(pss(p) for p in pids), threads=threads, files=files)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--images', type=int, default=2000)
    ap.add_argument('--sources', type=int, default=100)
    ap.add_argument('--epochs', type=int, default=6, help='timed epochs (after one to warm up)')
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--input-size', type=int, default=224)
    ap.add_argument('--root', default=None, help='the sample data (default: a temporary folder, removed after)')
    ap.add_argument('--alone', default=None, help=argparse.SUPPRESS)  # one loader alone: its memory and counts, as JSON
    a = ap.parse_args(argv)
    tmp = None if a.root else tempfile.TemporaryDirectory()
    root = make_sample_dataset(a.root or os.path.join(tmp.name, 'data'), n_train=a.images // 10, n_val=1, size=(320, 240))
    if a.alone:
        print(json.dumps(alone(a, root, a.alone)))
        return 0
    here = [sys.executable, os.path.abspath(__file__), '--root', str(root), '--images', str(a.images), '--sources',
            str(a.sources), '--workers', str(a.workers), '--batch-size', str(a.batch_size), '--input-size', str(a.input_size)]
    made = sources(root, a.sources)
    mem = {name: [json.loads(subprocess.run(here + ['--alone', name], check=True, capture_output=True, text=True).stdout.splitlines()[-1])
                  for _ in range(3)] for name in made}  # each alone, three times (a median)
    loaders = train_loaders(made, a)
    cpu = {}
    rates = alternate_epochs(loaders, a.epochs, cpu)  # an epoch to warm up, then the timed ones, alternating
    n = len(loaders['1 source'][0])
    print(f'{n} images ({a.input_size}px crops from 320x240 JPEGs), batch {a.batch_size}, {a.workers} workers, '
          f'{a.epochs} rounds; shared 2-core machine')
    print_rates(rates, '1 source', 'x 1 src', cpu=cpu)
    base = f'{a.sources} sources'
    m1, m2 = (statistics.median(m['pss'] for m in mem[k]) for k in ('1 source', base))
    print(f"workers' memory (PSS, each loader alone in a process, median of 3): 1 source {m1 / 1e6:.1f} MB, {base} "
          f"{m2 / 1e6:.1f} MB: ratio {m2 / m1:.3f}")
    t = {k: (mem[k][0]['threads'], mem[k][0]['files']) for k in mem}
    print(f"threads and open files of a loader's processes (main + workers): 1 source {t['1 source']}, {base} {t[base]}")
    r = statistics.median(x / y for x, y in zip(rates[base], rates['1 source'], strict=True))
    print(f'throughput ratio ({base} / 1 source, paired median): {r:.3f}')
    if tmp is not None:
        tmp.cleanup()


if __name__ == '__main__':
    sys.exit(main())
