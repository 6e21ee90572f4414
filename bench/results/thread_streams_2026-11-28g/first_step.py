"""A thread-mode stream loader's first batch: from create_loader to the batch in hand, and the part of it spent in the
first batch's step (`prefetch._rows_at_once`: the float pass into fresh memory, in two halves at once), or with that
pass in one thread ('one'). Each run a fresh process; the runs alternate.

    python bench/results/thread_streams_2026-11-28g/first_step.py [--rounds 4]

The photos and shards as bench/bench_thread_streams.py makes them (640 photos, its make_data), in a scratch folder."""
import argparse, subprocess, sys, time, warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def one(data: Path, var: str):
    warnings.simplefilter('ignore')
    import torch
    import timmdata.engine.prefetch as PF
    from timmdata import IterableImageDataset, create_loader

    torch.set_num_threads(1)
    ds = IterableImageDataset(str(data / 'shards'), reader='wds/bench', is_training=True, batch_size=64)
    real, took = PF._rows_at_once, []

    def rows_at_once(rows, n):
        t = time.perf_counter()
        rows(0, n) if var == 'one' else real(rows, n)
        took.append(time.perf_counter() - t)

    PF._rows_at_once = rows_at_once
    t = time.perf_counter()
    ld = create_loader(ds, (3, 224, 224), 64, is_training=True, num_workers=2, device='cpu', worker_mode='thread', seed=0)
    next(iter(ld))
    print(f'{var}: first batch {1e3 * (time.perf_counter() - t):.0f} ms, its step {1e3 * took[0]:.0f} ms', flush=True)


if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--rounds', type=int, default=4)
    p.add_argument('--one', nargs=2, metavar=('DATA', 'VAR'))
    a = p.parse_args()
    if a.one:
        one(Path(a.one[0]), a.one[1])
        sys.exit()
    sys.path.insert(0, str(REPO / 'bench'))
    from bench_thread_streams import make_data

    data = make_data(argparse.Namespace(images=640, no_index=False))
    for _ in range(a.rounds):
        for var in ('one', 'two'):
            subprocess.run([sys.executable, __file__, '--one', str(data), var], check=True)
