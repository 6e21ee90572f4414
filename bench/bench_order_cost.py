"""The order's CPU against the loader's, per image, in one run: what computing a batch's positions costs a rank (the
orders by position: a mix's `MixOrder`, a map-style epoch's `order='global'`) as a share of the CPU the loader spends on
an image (read, decode, random-resized crop, flip, collate: `create_loader` over generated JPEGs, in this process).

    python bench/bench_order_cost.py                       # 10^5 sources, 10^10 samples, rank 0 of 1,024; ~1 minute
    python bench/bench_order_cost.py --sources 100 --ranks 64

The order's figures are rank 0's, measured with `timmdata.tools.simulate_mix.order_cost` (the code a rank runs, at full
scale: nothing in it grows with the samples); the loader's are process CPU seconds over `--epochs` timed epochs after a
warm-up. Both are CPU time on the same machine, so a busy machine moves the ratio less than it moves either figure.
"""
import argparse, tempfile, time
from pathlib import Path

from timmdata import create_loader
from timmdata.dataset import ImageDataset
from timmdata.tools.sample_data import make_sample_dataset
from timmdata.tools.simulate_mix import format_order_cost, order_cost


def loader_cpu_per_image(root, order, epochs: int) -> float:
    "CPU seconds per image of a training loader in this process (num_workers=0: every second of it counted here)."
    dl = create_loader(ImageDataset(str(root), split='train'), 224, 64, is_training=True, num_workers=0, device='cpu',
                       seed=0, order=order, use_prefetcher=True)
    for _ in dl: pass  # warm-up
    n, t0 = 0, time.process_time()
    for e in range(epochs):
        dl.set_epoch(e + 1)
        for x, _ in dl: n += len(x)
    return (time.process_time() - t0) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--sources', type=int, default=100_000)
    ap.add_argument('--samples', type=int, default=10_000_000_000)
    ap.add_argument('--ranks', type=int, default=1024)
    ap.add_argument('--images', type=int, default=640, help='generated training images (426 x 320 JPEGs)')
    ap.add_argument('--epochs', type=int, default=2)
    a = ap.parse_args()
    root = make_sample_dataset(Path(tempfile.mkdtemp()) / 'set', n_train=a.images // 2, n_val=1, classes=['a', 'b'])
    per_image = {o: loader_cpu_per_image(root, o, a.epochs) for o in (None, 'global')}
    cost = order_cost(a.sources, a.samples, a.ranks)
    print(format_order_cost(cost))
    print(f"loader CPU per image (train, 224, batch 64, in-process): timm's order {per_image[None] * 1e3:.2f} ms, "
          f"order='global' {per_image['global'] * 1e3:.2f} ms (ratio {per_image['global'] / per_image[None]:.3f})")
    for name, us in (('mix', cost['mix']['rank_sample_us']), ("map-style order='global'", cost['epoch']['rank_sample_us'])):
        print(f"  {name}: a rank's positions cost {us:.1f} us a sample = {us * 1e-6 / per_image[None] * 100:.2f}% of the "
              f"loader's CPU per image (target: under 5%)")


if __name__ == '__main__':
    main()
