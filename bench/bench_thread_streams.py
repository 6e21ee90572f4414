"""A stream read by loader threads against worker processes: steady images/s, alternating in one run.

    python bench/bench_thread_streams.py [--images 400] [--rounds 3] [--epochs 3] [--workers 2] [--batch-size 32]
                                         [--order global|shards] [--no-index] [--size 224]

Writes WebDataset shards of the sample photos (`timmdata.tools.sample_data`, `timmdata shards`: 50 a shard, with the
dataset index unless --no-index) into a scratch folder, then for each round and each mode starts a fresh Python process
that builds `create_loader(IterableImageDataset(...), worker_mode=MODE, num_workers=--workers)` (training:
RandomResizedCrop to --size, flip, CPU output through the prefetcher, persistent workers in the process mode), runs one
warm-up epoch (worker start, files paged in, the first batch: left out), then --epochs epochs timed one by one.
Printed per mode: the median over rounds of each round's median steady epoch, in images/s, and the ratio thread/process.
Included: reading, decoding, cropping, collating, the prefetcher's float conversion and normalisation on the CPU, and
the consumer's loop (no model step). Not included: process start, imports, the warm-up epoch.
The machine may be shared with other work: compare the modes within one run (they alternate), not across runs."""

import argparse, json, statistics, subprocess, sys, tempfile
from pathlib import Path

CHILD = r'''
import json, sys, time, warnings
warnings.simplefilter('ignore')
from timmdata import IterableImageDataset, create_loader
shards, mode, workers, bs, epochs, order, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], int(sys.argv[7])
ds = IterableImageDataset(shards, reader='wds/bench', is_training=True, batch_size=bs, order=order)
ld = create_loader(ds, (3, size, size), bs, is_training=True, num_workers=workers, device='cpu', worker_mode=mode, seed=0)
rates = []
for e in range(epochs + 1):
    ld.set_epoch(e)
    t, n = time.perf_counter(), 0
    for x, y in ld: n += len(x)
    if e: rates.append(n / (time.perf_counter() - t))  # epoch 0: the warm-up, left out
print(json.dumps(rates))
'''


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--images', type=int, default=400)
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--epochs', type=int, default=3)
    p.add_argument('--workers', type=int, default=2)
    p.add_argument('--batch-size', type=int, default=32)
    p.add_argument('--order', default='global', choices=('global', 'shards'))
    p.add_argument('--no-index', action='store_true', help='delete the dataset index: each shard parsed front to back')
    p.add_argument('--size', type=int, default=224)
    a = p.parse_args()
    from timmdata.tools.sample_data import make_sample_dataset
    from timmdata.tools.shards import write_shards

    tmp = Path(tempfile.mkdtemp(prefix='bench_thread_streams_'))
    per_class = max(1, a.images // 10)
    root = make_sample_dataset(tmp / 'sample', n_train=per_class, n_val=1, num_workers=0)
    shards = tmp / 'bench'
    write_shards(root / 'train', shards, shard_size=50, progress=False)
    if a.no_index:
        for f in shards.glob('_timmdata_dataset_index*'):
            f.unlink()
    print(
        f'{per_class * 10} images in {len(list(shards.glob("*.tar")))} shards ({"no index" if a.no_index else "indexed"}), '
        f'order={a.order}, {a.workers} workers, batches of {a.batch_size} at {a.size}px; {a.rounds} rounds x {a.epochs} '
        f'steady epochs, modes alternating',
        flush=True,
    )
    got = {'process': [], 'thread': []}
    for r in range(a.rounds):
        for mode in got:
            out = subprocess.run(
                [
                    sys.executable,
                    '-c',
                    CHILD,
                    str(shards),
                    mode,
                    str(a.workers),
                    str(a.batch_size),
                    str(a.epochs),
                    a.order,
                    str(a.size),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            rates = json.loads(out.stdout.strip().splitlines()[-1])
            got[mode].append(statistics.median(rates))
            print(
                f'round {r + 1} {mode:8s} {got[mode][-1]:8.1f} img/s (epochs: {", ".join(f"{x:.0f}" for x in rates)})',
                flush=True,
            )
    med = {m: statistics.median(v) for m, v in got.items()}
    for m, v in med.items():
        print(f'{m:8s} median {v:8.1f} img/s')
    print(f'thread / process: {med["thread"] / med["process"]:.2f}x')


if __name__ == '__main__':
    main()
