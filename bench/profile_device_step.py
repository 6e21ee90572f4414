"""Where the device-decode training step's GPU time goes: torch.profiler over a few batches of timmdata's device-decode
training loader alone (no model; steady state: after --warmup batches), its GPU operations sorted by their own GPU
time, and the GPU milliseconds all of them take a batch. The profile is what to read before changing the step: the
figure is a lower bound of the GPU time the step takes from a model training beside it.

    python bench/profile_device_step.py --data DATA/train              # batch 256, 224x224, 16 workers
    python bench/profile_device_step.py --data DATA/train --device cpu --batch-size 8 --workers 2 --batches 2
"""

import argparse
import os
import time

import torch


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--data', required=True, help='a folder of class folders of JPEGs')
    ap.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu', choices=('cpu', 'cuda'))
    ap.add_argument('--batch-size', type=int, default=256)
    ap.add_argument('--size', type=int, default=224)
    ap.add_argument('--workers', type=int, default=os.cpu_count())
    ap.add_argument('--warmup', type=int, default=4, help='batches before the profile')
    ap.add_argument('--batches', type=int, default=6, help='batches profiled')
    ap.add_argument('--rows', type=int, default=25, help='rows of the table')
    a = ap.parse_args(argv)
    from torch.profiler import ProfilerActivity, profile

    from timmdata import ImageDataset, create_loader

    dev = torch.device(a.device)
    loader = create_loader(ImageDataset(a.data), a.size, a.batch_size, is_training=True, num_workers=a.workers,
                           seed=0, decode_device=a.device, persistent_workers=True)  # fmt: skip
    it = iter(loader)
    for _ in range(a.warmup):
        next(it)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == 'cuda' else (lambda: None)
    sync()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == 'cuda' else [])
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        for _ in range(a.batches):
            x, y = next(it)
        sync()
    wall = time.perf_counter() - t0
    ev = prof.key_averages()
    if not len(ev):  # e.g. a CUDA build of torch on a machine without a GPU: Kineto records nothing
        print(f'the profiler recorded no operations on {dev} (wall {wall / a.batches * 1e3:.1f} ms a batch)')
        return
    key = 'self_device_time_total' if dev.type == 'cuda' else 'self_cpu_time_total'
    if not hasattr(ev[0], key):
        key = 'self_cuda_time_total' if dev.type == 'cuda' else key
    print(ev.table(sort_by=key, row_limit=a.rows, max_name_column_width=48))
    total_us = sum(getattr(e, key) for e in ev)
    name = torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'CPU'
    print(f'{name}: device-decode train step, batch {a.batch_size} to {a.size}x{a.size}, {a.batches} batches after '
          f'{a.warmup} warm-up ones, {a.workers} workers')
    print(f'{"GPU" if dev.type == "cuda" else "CPU"} time of the step\'s operations: {total_us / 1e3 / a.batches:.2f} ms a '
          f'batch ({total_us / a.batches / a.batch_size:.1f} us an image); wall {wall / a.batches * 1e3:.1f} ms a batch '
          f'(profiler on)')
    print('decoded where:', loader.stats().info.get('decode'))


if __name__ == '__main__':
    main()
