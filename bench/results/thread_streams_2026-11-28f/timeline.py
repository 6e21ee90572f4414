"""Each stream thread's batches in a thread-mode run, start and end (ms from the epoch's start), for two steady epochs,
and the minor page faults a steady batch of each mode: the figures of README.txt's "Why tried" and last paragraph.

    python bench/results/thread_streams_2026-11-28f/timeline.py [--images 640]

The photos and shards as bench/bench_thread_streams.py makes them (its `make_data`), in a scratch folder; the loader as
it builds it (2 workers, batch 64, device='cpu', seed 0), 7 epochs, the first a warm-up."""
import argparse, os, sys, threading, time, warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
warnings.simplefilter('ignore')
import torch
import timmdata.engine.threads as threads
from timmdata import IterableImageDataset, create_loader
from timmdata.core.torch_compat import loader_worker_pids
from bench_thread_streams import make_data


def loader(data: Path, mode: str):
    ds = IterableImageDataset(str(data / 'shards'), reader='wds/bench', is_training=True, batch_size=64, order='global')
    return create_loader(ds, (3, 224, 224), 64, is_training=True, num_workers=2, device='cpu', worker_mode=mode, seed=0)


def timeline(data: Path):
    "Each stream thread's batches (`StreamThreads._batch`), timed, over 7 epochs; printed for epochs 3 and 4."
    made, real = [], threads.StreamThreads._batch

    def timed(self, *a):
        t = time.perf_counter()
        try:
            return real(self, *a)
        finally:
            made.append((t, threading.current_thread().name[-1], time.perf_counter() - t))

    threads.StreamThreads._batch = timed
    try:
        ld, spans = loader(data, 'thread'), []
        for e in range(7):
            ld.set_epoch(e)
            t0 = time.perf_counter()
            for _ in ld:
                pass
            spans.append((t0, time.perf_counter()))
    finally:
        threads.StreamThreads._batch = real
    for e in (3, 4):
        s0, s1 = spans[e]
        print(f'epoch {e}: {1e3 * (s1 - s0):.0f} ms; stream thread, batch start -> end (ms from the epoch start)')
        for t, w, d in sorted(made):
            if s0 - 0.2 <= t <= s1:
                print(f'   {w} {1e3 * (t - s0):7.1f} -> {1e3 * (t + d - s0):7.1f}')


def faults(data: Path, mode: str) -> float:
    "Minor page faults a steady batch: this process and the loader's workers, epochs 1 to 6."
    ld = loader(data, mode)

    def total():
        pids = [os.getpid(), *loader_worker_pids(ld)]
        return sum(int(open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[7]) for p in pids)

    n = 0
    for e in range(7):
        if e == 1:
            f0, n = total(), 0
        ld.set_epoch(e)
        for _ in ld:
            n += 1
            f1 = total()  # while the workers live
    return (f1 - f0) / n


if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--images', type=int, default=640)
    a = p.parse_args()
    data = make_data(argparse.Namespace(images=a.images, no_index=False))
    timeline(data)
    for mode in ('thread', 'process'):
        print(f'{mode}: {faults(data, mode):.0f} minor page faults a steady batch')
