"""CUDA memory after each epoch of the device-decode loader, with no batch held: what `memory_allocated` counts and the
CUDA tensors alive (1 MiB or more) by shape, to tell a leak (growing every epoch) from a buffer that grows once to the
largest batch it has seen. Run on a GPU machine: python tools/gpu_mem_epochs.py ROOT [EPOCHS] [plain]
(plain: the stages one after another, not a thread a stage)"""
import gc, sys
from collections import Counter

import torch

from timmdata import ImageDataset, create_device_decode_loader


def alive():
    "CUDA tensors of 1 MiB or more that gc can see: (shape, dtype) -> count."
    out = Counter()
    for o in gc.get_objects():
        try:
            if torch.is_tensor(o) and o.is_cuda and o.nbytes >= 2**20: out[(tuple(o.shape), str(o.dtype))] += 1
        except Exception: pass
    return dict(out)


def main(root, epochs=10, plain=False):
    dl = create_device_decode_loader(ImageDataset(root, split='train'), 128, 16, is_training=True, decode_device='cuda',
                                     num_workers=2, re_prob=0.25)
    if plain: dl.step.stages = dl.feeder.lane.stages = ()
    print('staged' if not plain else 'plain', flush=True)
    for epoch in range(epochs):
        dl.set_epoch(epoch)
        n = 0
        for x, y in dl: (x.float().mean() + y.float().sum()).item(); n += len(y)
        x = y = None
        torch.cuda.synchronize()
        print(f'epoch {epoch}: {n} images, allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB, reserved '
              f'{torch.cuda.memory_reserved() / 2**20:.1f} MiB, alive {alive()}', flush=True)


if __name__ == '__main__': main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10, sys.argv[3:4] == ['plain'])
