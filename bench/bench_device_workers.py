"""The host side of the device-decode path before the device: what its DataLoader workers spend an image (read the
file, parse its header, draw its crop box, pack the batch's bytes, send it) and what the training process spends
receiving the batches, in CPU milliseconds an image, for two ways of sending a batch, compared in one run:

- `ring`: the loader's own (`DeviceCollate`): the bytes in a slot of a batch ring the workers reuse, the small
  tensors (offsets, plans, targets, ...) by value in the queue's pipe;
- `torch`: `device_decode_collate` as a plain collate_fn: every tensor through torch's sharing (a fresh shared-memory
  file for each, its descriptor handed over a socket, mapped by the training process).

And, apart, the dataset's own `dataset[i]` (read, header, box) in one process, and the collate of one batch into
process memory against into fresh shared memory (as a worker collates). No device step: the workers' batches are
taken as they come (`loader.loader`); a batch's slot comes back when it is dropped.

Persistent workers; the two loaders take turns epoch by epoch (`--epochs` each, after a warm-up epoch each); each
epoch's first batch left out (the workers' start); CPU from /proc (the workers') and `time.process_time` (this
process). Images: the sample-data generator's JPEGs (baseline, 500x375, quality 90), `--n` of them, made once under
`--root`.

    python bench/bench_device_workers.py --n 3000       # 2 workers, batch 64
    python bench/bench_device_workers.py --workers 4 --n 2000
"""

import argparse
import os
import statistics
import time
from pathlib import Path

import torch.utils.data._utils.worker as torch_worker
from _common import timed_rounds


def proc_seconds(pid: int) -> float:
    "CPU seconds (user + system) of process `pid` so far, from /proc."
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--n', type=int, default=600, help='JPEGs in the dataset (made once)')
    ap.add_argument('--root', default='out/bench_device_workers')
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--batch', type=int, default=64)
    ap.add_argument('--epochs', type=int, default=4, help='measured epochs, after one warm-up epoch')
    a = ap.parse_args(argv)
    from timmdata import ImageDataset
    from timmdata.core.torch_compat import loader_worker_pids
    from timmdata.engine.device_plan import device_decode_collate
    from timmdata.engine.gpu_decode import create_device_decode_loader
    from timmdata.tools.sample_data import make_sample_dataset

    root = Path(a.root) / str(a.n)
    if not (root / 'train').is_dir():
        make_sample_dataset(root, n_train=max(1, a.n // 10), n_val=1, size=(500, 375), quality=90)
    ds = ImageDataset(str(root / 'train'))
    ways = {}
    for way in ('torch', 'ring'):
        ld = create_device_decode_loader(
            ds, (3, 224, 224), a.batch, is_training=True, num_workers=a.workers, decode_device='cpu',
            persistent_workers=True,
        )  # fmt: skip
        if way == 'torch':
            ld.loader.collate_fn = device_decode_collate  # before the workers start: they take this one
        ways[way] = ld.loader  # the workers' batches, before the device step
    workers = {w: [] for w in ways}
    main_ms = {w: [] for w in ways}
    for ep in range(a.epochs + 1):
        for way, host in ways.items():
            it = iter(host)
            next(it)  # the first batch: the workers' start, left out
            pids = loader_worker_pids(host)
            c0, m0, n = {p: proc_seconds(p) for p in pids}, time.process_time(), 0
            for packed, _ in it:
                n += len(packed['plans'])
            if ep:
                workers[way].append(sum(proc_seconds(p) - c0[p] for p in pids) / n * 1e3)
                main_ms[way].append((time.process_time() - m0) / n * 1e3)
    host = ways['ring']
    t0, k = time.process_time(), min(len(ds), 2000)
    for i in range(k):
        ds[i]
    own = (time.process_time() - t0) / k * 1e3
    samples = [host.dataset[i] for i in range(a.batch)]  # what a worker collates: (bytes, plan, kind), target

    def collate_ms(shared: bool) -> float:  # `new_uint8` allocates in shared memory inside a worker only
        info = torch_worker._worker_info
        torch_worker._worker_info = torch_worker.WorkerInfo(id=0, num_workers=1, seed=0, dataset=None) if shared else None
        try:
            t = timed_rounds(lambda: device_decode_collate(samples), 5, 10)
        finally:
            torch_worker._worker_info = info
        return statistics.median(t) / 10 / a.batch * 1e3
    med = statistics.median
    print(f'{len(ds)} JPEGs 500x375, batch {a.batch}, {a.workers} persistent workers, {a.epochs} epochs each (median)')
    for way in ways:
        print(f"  {way:5s} workers' CPU an image {med(workers[way]):.3f} ms (each epoch: "
              + ', '.join(f'{v:.3f}' for v in workers[way]) + f'); receiving, this process {med(main_ms[way]):.3f} ms')
    print(f"  ring / torch: workers {med(workers['ring']) / med(workers['torch']):.2f}x, receiving "
          f"{med(main_ms['ring']) / med(main_ms['torch']):.2f}x, the two together "
          f"{(med(workers['ring']) + med(main_ms['ring'])) / (med(workers['torch']) + med(main_ms['torch'])):.2f}x")
    print(f'  dataset[i] alone (read, header, box), one process  {own:.3f} ms')
    print(f'  collate, process memory {collate_ms(False):.3f} ms an image; into fresh shared memory {collate_ms(True):.3f}')


if __name__ == '__main__':
    main()
