"""The first batch of a fresh loader, in parts: create_loader, then the first batch, and the stage figures at that
point (ms summed over the threads or worker processes that spent them).

    python bench/results/threads_2026-11-26/first_batch_parts.py DATA map|stream thread|process

DATA as for epoch_waits.py. 2 workers, batch 64, 224 px, training pipeline, device='cpu', seed 0."""
import sys, time, warnings

warnings.simplefilter('ignore')
import torch
from timmdata import ImageDataset, IterableImageDataset, create_loader

data, src, mode = sys.argv[1], sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
if src == 'map':
    ds = ImageDataset(f'{data}/folder')
else:
    ds = IterableImageDataset(f'{data}/shards', reader='wds/bench', is_training=True, batch_size=64)
t0 = time.perf_counter()
ld = create_loader(ds, 224, 64, is_training=True, num_workers=2, device='cpu', worker_mode=mode, seed=0)
t1 = time.perf_counter()
it = iter(ld)  # kept: a dropped iterator stops its pass, waiting for the batches in flight
next(it)
t2 = time.perf_counter()
t = ld.stats().t
print(
    f'{src:6s} {mode:7s} create_loader {1e3 * (t1 - t0):4.0f} ms, first batch {1e3 * (t2 - t1):4.0f} ms | '
    + ' '.join(f'{k} {t[k] * 1e3:4.0f}' for k in ('read', 'decode', 'ops', 'collate', 'device'))
)
