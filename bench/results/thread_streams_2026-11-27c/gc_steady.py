"""The cyclic garbage collector over steady epochs of a thread-mode or process-mode loader: collections and their time
per generation in this process (gc.callbacks see every thread's collections), after two warm-up epochs.

    python bench/results/thread_streams_2026-11-27c/gc_steady.py DATA thread|process"""
import gc, sys, time, warnings, threading
warnings.simplefilter('ignore')
import torch
from timmdata import ImageDataset, create_loader
torch.set_num_threads(1)
mode = sys.argv[2]
ds = ImageDataset(f'{sys.argv[1]}/folder')
ld = create_loader(ds, 224, 64, is_training=True, num_workers=2, device='cpu', worker_mode=mode, seed=0)
stats = {0: [0, 0.0, 0], 1: [0, 0.0, 0], 2: [0, 0.0, 0]}
t0 = {}
def cb(phase, info):
    g = info['generation']
    if phase == 'start': t0[threading.get_ident()] = time.perf_counter()
    else:
        s = stats[g]; s[0] += 1; s[1] += time.perf_counter() - t0.pop(threading.get_ident(), time.perf_counter()); s[2] += info['collected']
for e in range(2):
    ld.set_epoch(e)
    for x, y in ld: pass
print('objects tracked', len(gc.get_objects()), 'counts', gc.get_count(), 'thresholds', gc.get_threshold())
gc.callbacks.append(cb)
t = time.perf_counter(); n = 0
for e in range(2, 8):
    ld.set_epoch(e)
    for x, y in ld: n += len(x)
el = time.perf_counter() - t
gc.callbacks.remove(cb)
print(mode, f'{n/el:.0f} img/s', {g: (c, f'{1e3*s:.0f} ms', col) for g, (c, s, col) in stats.items()}, f'wall {el:.2f}s')
