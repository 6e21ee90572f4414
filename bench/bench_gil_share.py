"""How much of an image's time in the default training pipeline holds the GIL: the share loader threads contend for.

    python bench/bench_gil_share.py [--images 640] [--epochs 3] [--rounds 3] [--sources map,stream] [--json FILE]

Writes --images generated 500x375 photos and their WebDataset shards as `bench/bench_thread_streams.py` does, then,
for each source ('map': `ImageDataset(folder)`; 'stream': `IterableImageDataset(shards, reader='wds/bench')`),
builds `create_loader(DATASET, 224, 64, is_training=True, num_workers=0, device='cpu', seed=0)` (RandomResizedCrop,
flip, colour jitter; the prefetcher's float conversion and normalisation on the CPU) and runs one warm-up epoch, then
--epochs steady epochs, all in this thread: every stage of a sample and of a batch runs here, one after the other.
Each call into the C extension is timed (`timmdata._native`'s functions: the batch's crop-aware decode and resize,
the float pass, the channel means; each runs without the GIL). Printed per source, the median over --rounds rounds of:
ms an image in all; in the extension's calls (by function); the rest, which holds the GIL but for file reads and
torch's kernels (the dataset's Python, the draws, reading the bytes, the collate, torch's calls from Python); and that
rest's share. Two loader threads can
overlap only their extension calls: while one holds the GIL for its rest, the other waits if it needs it too.
Steady state only (the warm-up epoch, with its page-ins and first calls, left out); one process, torch on 1 thread."""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command, write_json

NATIVE_CALLS = (
    'resize_crop_jpeg_batch',
    'resize_crop_jpeg',
    'decode_crop',
    'resize_batch',
    'affine_u8',
    'channel_means',
)


def timed_native(times: dict):
    "Wraps the extension's batch-path functions so each call adds its seconds to `times[name]`; returns the module."
    import timmdata._native as nat

    def wrap(name, f):
        def g(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                times[name] = times.get(name, 0.0) + time.perf_counter() - t

        return g

    for name in NATIVE_CALLS:
        if hasattr(nat, name):
            setattr(nat, name, wrap(name, getattr(nat, name)))
    return nat


def one_source(source: str, data: Path, a, times: dict) -> dict:
    from timmdata import ImageDataset, IterableImageDataset, create_loader

    if source == 'map':
        ds = ImageDataset(str(data / 'folder'))
    else:
        ds = IterableImageDataset(str(data / 'shards'), reader='wds/bench', is_training=True, batch_size=64)
    ld = create_loader(ds, (3, 224, 224), 64, is_training=True, num_workers=0, device='cpu', seed=0)
    ld.set_epoch(0)
    for _ in ld:  # warm-up: page-ins, first calls
        pass
    times.clear()
    n, t0 = 0, time.perf_counter()
    for e in range(1, a.epochs + 1):
        ld.set_epoch(e)
        for x, _ in ld:
            n += len(x)
    wall = time.perf_counter() - t0
    native = {k: v / n * 1e3 for k, v in times.items()}
    total = wall / n * 1e3
    rest = total - sum(native.values())
    return {'ms': total, 'native': native, 'rest': rest, 'share': rest / total, 'images': n}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--images', type=int, default=640)
    p.add_argument('--epochs', type=int, default=3, help='steady epochs timed, after one warm-up epoch')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--sources', default='map,stream')
    p.add_argument('--data', help='a folder bench_thread_streams.py wrote (folder/ and shards/); default: a new one')
    p.add_argument('--json', help='write every round here')
    a = p.parse_args()
    import torch

    torch.set_num_threads(1)
    if a.data:
        data = Path(a.data)
    else:
        from bench_thread_streams import make_data

        data = make_data(argparse.Namespace(images=a.images, no_index=False))
    times: dict = {}
    nat = timed_native(times)
    if not hasattr(nat, 'resize_crop_jpeg_batch'):
        raise SystemExit('the C extension is not built: the batch path this measures is not there')
    runs = {s: [] for s in a.sources.split(',')}
    for _ in range(a.rounds):
        for s, rs in runs.items():
            rs.append(one_source(s, data, a, times))
    n = next(iter(runs.values()))[0]['images'] // a.epochs
    print(f'{command()}\n{n} generated 500x375 photos an epoch, batch 64, one thread, {a.epochs} steady epochs a round, '
          f'medians of {a.rounds} rounds; ms an image:')  # fmt: skip
    for s, rs in runs.items():

        def med(f, rs=rs):
            return statistics.median(f(r) for r in rs)

        names = sorted({k for r in rs for k in r['native']})
        calls = ', '.join(f"{k} {med(lambda r, k=k: r['native'].get(k, 0.0)):.3f}" for k in names)
        print(
            f"  {s:6s} all {med(lambda r: r['ms']):.3f}; extension (no GIL) {calls}; "
            f"the rest (the GIL held but for file reads and torch's kernels) {med(lambda r: r['rest']):.3f}, {med(lambda r: r['share']):.0%} of the image's time"
        )
    if a.json:
        write_json(a.json, {'runs': runs, 'images': a.images, 'epochs': a.epochs})


if __name__ == '__main__':
    main()
