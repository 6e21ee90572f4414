"""One fresh loader: ms from create_loader to the first batch in hand, and the stage figures then (the device step,
the collate). python first_batch.py DATA map|stream thread|process (DATA: folder/ and shards/ as
bench/bench_thread_streams.py writes them). Run with PYTHONPATH=TREE to time another tree."""
import sys, time, warnings
warnings.simplefilter('ignore')
import torch
from timmdata import ImageDataset, IterableImageDataset, create_loader
data, src, mode = sys.argv[1], sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
ds = ImageDataset(f'{data}/folder') if src == 'map' else IterableImageDataset(f'{data}/shards', reader='wds/bench', is_training=True, batch_size=64)
t0 = time.perf_counter()
ld = create_loader(ds, 224, 64, is_training=True, num_workers=2, device='cpu', worker_mode=mode, seed=0)
it = iter(ld); next(it)
t1 = time.perf_counter()
st = ld.stats().t
print(f'{1e3*(t1-t0):.0f}', f"device {1e3*st['device']:.0f} collate {1e3*st['collate']:.0f}")
