"""The cost of exact resume (issue 16), in one run on one machine:

1. the training epoch of `timmdata bench` (RandomResizedCrop 224, flip, colour jitter 0.4 on the batch, batch 64,
   2 workers, CPU output) with create_loader's resumable pipeline (one global order per epoch, `(index, seed)`
   batches, per-sample `seed_all(mix_seed(seed, epoch, position))`, the prefetcher's batch seeding) against the same
   dataset, transform and collate in a plain torch DataLoader (RandomSampler) + PrefetchLoader, as before; the
   epochs alternate (with, without, with, ...) so the machine's load drifts over both alike;
2. `state_dict()` per call, mid-epoch, against the time of one batch;
3. the per-sample work alone: `mix_seed` in the main process and `seed_all` in the worker, in microseconds.

    python bench/bench_resume.py [--root FOLDER] [--epochs 3] [--batch-size 64] [--workers 2]

Figures are printed (medians and ratios), asserted nowhere."""
import argparse, json, statistics, time
import torch


def _loaders(root, batch_size, workers):
    from torch.utils.data import DataLoader
    import timmdata
    from timmdata.engine.batch_ring import BatchRing
    from timmdata.engine.collate import fast_collate
    from timmdata.loader import worker_init
    from timmdata.engine.prefetch import PrefetchLoader
    ds = timmdata.ImageDataset(str(root))
    new = timmdata.create_loader(ds, (3, 224, 224), batch_size, is_training=True, color_jitter=0.4, num_workers=workers,
                                 device='cpu')
    # the same dataset (its transform as create_loader set it: jitter moved to the batch) in the pre-resume pipeline
    ring = BatchRing.maybe([(batch_size, 3, 224, 224)], workers, 5) or fast_collate
    dl = DataLoader(ds, batch_size=batch_size, shuffle=True, drop_last=True, num_workers=workers, collate_fn=ring,
                    worker_init_fn=worker_init, persistent_workers=workers > 0)
    old = PrefetchLoader(dl, device='cpu', color_jitter=0.4)
    return new, old


def _epoch(loader) -> float:
    t = time.perf_counter()
    for x, y in loader: pass
    return time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', default=None, help='image folder (default: the generated sample dataset)')
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--out', default=None, help='write the figures as JSON here')
    a = ap.parse_args(argv)
    from timmdata.tools.bench import bench_root
    from timmdata.config import mix_seed, seed_all
    torch.set_num_threads(1)
    root = bench_root(a.root)
    new, old = _loaders(root, a.batch_size, a.workers)
    _epoch(new); _epoch(old)  # warm-up: workers start, files in the page cache
    t_new, t_old = [], []
    for _ in range(a.epochs): t_new.append(_epoch(new)); t_old.append(_epoch(old))
    nb = len(new)
    it = iter(new)
    for _ in range(3): next(it)
    n = 2000
    t = time.perf_counter()
    for _ in range(n): new.state_dict()
    sd_us = (time.perf_counter() - t) / n * 1e6
    del it
    t = time.perf_counter()
    for p in range(20000): mix_seed(123, 4, p)
    mix_us = (time.perf_counter() - t) / 20000 * 1e6
    t = time.perf_counter()
    for p in range(5000): seed_all(p * 7919)
    seed_us = (time.perf_counter() - t) / 5000 * 1e6
    m_new, m_old = statistics.median(t_new), statistics.median(t_old)
    batch_ms = m_new / nb * 1e3
    res = dict(images=nb * a.batch_size, batch_size=a.batch_size, workers=a.workers, epochs=a.epochs,
               epoch_s_resumable=t_new, epoch_s_plain=t_old, median_resumable_s=m_new, median_plain_s=m_old,
               ratio=m_new / m_old, state_dict_us=sd_us, batch_ms=batch_ms, state_dict_share=sd_us / 1e3 / batch_ms,
               mix_seed_us=mix_us, seed_all_us=seed_us)
    print(f"train epoch, {res['images']} images, batch {a.batch_size}, {a.workers} workers, {a.epochs} epochs each (alternating):")
    print(f"  resumable (create_loader) median {m_new:.2f} s  {[round(x, 2) for x in t_new]}")
    print(f"  plain DataLoader+PrefetchLoader median {m_old:.2f} s  {[round(x, 2) for x in t_old]}")
    print(f"  ratio resumable / plain: {m_new / m_old:.3f} ({(m_new / m_old - 1) * 100:+.1f}%)")
    print(f"state_dict(): {sd_us:.1f} us per call = {res['state_dict_share'] * 100:.4f}% of one batch ({batch_ms:.1f} ms)")
    print(f"per sample: mix_seed {mix_us:.2f} us (main process), seed_all {seed_us:.2f} us (worker)")
    if a.out:
        with open(a.out, 'w') as f: json.dump(res, f, indent=1)


if __name__ == '__main__':
    main()
