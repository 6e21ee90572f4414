"""Where a RandAugment recipe's extra CPU goes, in one process: the loader's CPU per image (its DataLoader in this
process, one torch thread, `create_loader(..., num_workers=0)` over generated 500x375 JPEGs) without the policy, with
the policy made a no-op (what handing the crop to the policy outside the batched decode costs), and with the policy.
Best of `--epochs` epochs after a warm-up, the three alternating, `--repeats` times.

    python bench/bench_policy_cost.py
"""
import argparse
import tempfile
import time

import torch

import timmdata
from timmdata import auto_augment as aa
from timmdata.tools.sample_data import make_sample_dataset

RECIPES = {
    'without the policy': dict(re_prob=0.25),
    'the policy a no-op': dict(auto_augment='rand-m9-mstd0.5', re_prob=0.25),
    'with the policy': dict(auto_augment='rand-m9-mstd0.5', re_prob=0.25),
}


def cpu_ms(root, kw, epochs) -> float:
    loader = timmdata.create_loader(timmdata.ImageDataset(root), (3, 224, 224), 64, is_training=True, num_workers=0,
                                    device='cpu', **kw).loader  # the DataLoader: the workers' share, without the batch step
    for _ in loader:
        pass
    best = float('inf')
    for _ in range(epochs):
        t0, n = time.process_time(), 0
        for x, _ in loader:
            n += len(x)
        best = min(best, (time.process_time() - t0) / n * 1e3)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--images', type=int, default=300)
    ap.add_argument('--epochs', type=int, default=5)
    ap.add_argument('--repeats', type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    root = make_sample_dataset(tempfile.mkdtemp(), n_train=a.images // 10, n_val=1, size=(500, 375)) / 'train'
    real, best = aa.RandAugment.__call__, {k: float('inf') for k in RECIPES}
    for _ in range(a.repeats):
        for name, kw in RECIPES.items():
            aa.RandAugment.__call__ = (lambda self, img, rng=None: img) if name == 'the policy a no-op' else real
            best[name] = min(best[name], cpu_ms(str(root), kw, a.epochs))
    aa.RandAugment.__call__ = real
    base = best['without the policy']
    print(f"{a.images} generated 500x375 JPEGs, batch 64, in one process, one torch thread; `rand-m9-mstd0.5`, re_prob=0.25")
    for name, ms in best.items():
        print(f'  {name:<20} {ms:.3f} CPU ms an image   {ms / base:.2f}x')


if __name__ == '__main__':
    main()
