"""Each batch's wait (ms inside next(), the device step included) over 4 epochs of one loader, a sleep step after each batch.

    python bench/results/threads_2026-11-26/epoch_waits.py DATA map|stream thread|process SLEEP_MS

DATA: a folder with `folder/` (an image class folder) and `shards/` (its WebDataset shards, `timmdata shards`), as
bench/bench_thread_streams.py writes them. 2 workers, batch 64, 224 px, training pipeline, device='cpu', seed 0."""
import sys, time, warnings

warnings.simplefilter('ignore')
import torch
from timmdata import ImageDataset, IterableImageDataset, create_loader

data, src, mode, nap = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]) / 1e3
torch.set_num_threads(1)
if src == 'map':
    ds = ImageDataset(f'{data}/folder')
else:
    ds = IterableImageDataset(f'{data}/shards', reader='wds/bench', is_training=True, batch_size=64)
ld = create_loader(ds, 224, 64, is_training=True, num_workers=2, device='cpu', worker_mode=mode, seed=0)
print(f'{src} {mode}, a {nap * 1e3:g} ms sleep after each batch')
for e in range(4):
    ld.set_epoch(e)
    it, waits, n, e0 = iter(ld), [], 0, time.perf_counter()
    while True:
        t = time.perf_counter()
        b = next(it, None)
        if b is None:
            break
        waits.append((time.perf_counter() - t) * 1e3)
        n += len(b[0])
        time.sleep(nap)
    rate = n / (time.perf_counter() - e0)
    print(f'epoch {e} {rate:5.0f} img/s, waits ms: ' + ' '.join(f'{x:4.0f}' for x in waits))
