"""Issue 13's benchmark: timm 1.0.31's newer loaders, timmdata's against timm's on the same images and settings, in one
run, epochs alternating between the two:

- `naflex`: NaFlex training batches (`create_naflex_loader(is_training=True)`: sequence lengths 128/256/576, patch 16,
  token budget of `--batch-size` images at 576 tokens), patches normalised on the CPU;
- `scheduled`: scheduled batching (`create_loader(is_training=True, input_size_choices=[160, 192, 224],
  batch_size_choices=[...]`, progressive over 3 epochs).

Prints images/s per loader (median over the measured epochs) and the ratio timmdata/timm; writes JSON to --out.
    python bench/bench_timm1031.py [--epochs 3] [--workers 2] [--root FOLDER] [--pipelines naflex,scheduled]
"""
import argparse, contextlib, io, json, statistics, time, warnings
from pathlib import Path
import torch
from timmdata.tools.bench import bench_root
from timmdata.dataset import ImageDataset
from timmdata.loader import create_loader
from timmdata.naflex_loader import NaFlexPrefetchLoader, create_naflex_loader
import timm.data
from timm.data.naflex_loader import create_naflex_loader as timm_naflex

CPU = torch.device('cpu')  # timm's loaders need a torch.device (a string fails in its prefetcher)

def naflex(lib, root, bs, workers):
    kw = dict(train_seq_lens=(128, 256, 576), batch_size=bs, is_training=True, num_workers=workers, device=CPU,
              patch_size=16, seed=0, persistent_workers=True, pin_memory=False)
    if lib == 'timm': return timm_naflex(timm.data.ImageDataset(str(root)), **kw)
    return create_naflex_loader(ImageDataset(str(root)), **kw)

def scheduled(lib, root, bs, workers):
    kw = dict(input_size=224, batch_size=bs, is_training=True, num_workers=workers, device=CPU,
              input_size_choices=[160, 192, 224], batch_size_choices=[bs * 2, int(bs * 1.4), bs],
              batch_choice_schedule='progressive', batch_schedule_epochs=3, batch_choice_seed=0)
    if lib == 'timm': return timm.data.create_loader(timm.data.ImageDataset(str(root)), **kw)
    return create_loader(ImageDataset(str(root)), **kw)

PIPELINES = {'naflex': naflex, 'scheduled': scheduled}

def images(batch) -> int:
    x = batch[0]
    return (x['patches'] if isinstance(x, dict) else x).shape[0]

class _Timed:
    "The NaFlex prefetcher's batch step (`NaFlexBatchOps`), its calls timed into `step[0]`."
    def __init__(self, ops, step): self.ops, self.step = ops, step
    def __getattr__(self, name): return getattr(self.ops, name)  # its seed(), settings, ...
    def __call__(self, d, y):
        t0 = time.perf_counter(); r = self.ops(d, y); self.step[0] += time.perf_counter() - t0; return r

def run(loader, epoch: int) -> tuple:
    "(images, seconds, seconds inside timmdata's NaFlex prefetcher step (its float/jitter/normalise maths), or None)."
    if callable(getattr(loader, 'set_epoch', None)): loader.set_epoch(epoch)
    elif callable(getattr(loader.dataset, 'set_epoch', None)): loader.dataset.set_epoch(epoch)  # timm's NaFlex prefetcher
    step = None
    if isinstance(loader, NaFlexPrefetchLoader):  # time the main-process maths, to see whether it or the workers set the pace
        step, ops = [0.0], loader.ops
        loader.ops = _Timed(ops, step)
    n, t = 0, time.perf_counter()
    try:
        for b in loader: n += images(b)
    finally:
        if step is not None: loader.ops = ops
    return n, time.perf_counter() - t, None if step is None else step[0]

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root'); p.add_argument('--epochs', type=int, default=3); p.add_argument('--workers', type=int, default=2)
    p.add_argument('--batch-size', type=int, default=32); p.add_argument('--pipelines', default='naflex,scheduled')
    p.add_argument('--out', default='out/bench_timm1031.json')
    a = p.parse_args(argv)
    root, res = bench_root(a.root), {'torch': torch.__version__, 'timm': timm.__version__, 'workers': a.workers,
                                     'batch_size': a.batch_size, 'epochs': a.epochs, 'pipelines': {}}
    for name in a.pipelines.split(','):
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():  # timm's NaFlex wrapper prints its schedule
            warnings.simplefilter('ignore')
            loaders = {lib: PIPELINES[name](lib, root, a.batch_size, a.workers) for lib in ('timmdata', 'timm')}
            rates, share = {lib: [] for lib in loaders}, []
            for ep in range(a.epochs + 1):  # epoch 0 warms up (workers start, caches fill)
                for lib, ld in loaders.items():
                    n, s, step = run(ld, ep)
                    if ep: rates[lib].append(n / s)
                    if ep and step is not None: share.append(step / s)
        med = {lib: statistics.median(r) for lib, r in rates.items()}
        res['pipelines'][name] = {'images_per_s': rates, 'median': med, 'ratio': med['timmdata'] / med['timm'],
                                  'prefetcher_share': statistics.median(share) if share else None}
        extra = f"   (timmdata's prefetcher step: {statistics.median(share):.0%} of the epoch)" if share else ''
        print(f"{name:10s} timmdata {med['timmdata']:7.0f} img/s   timm {med['timm']:7.0f} img/s   ratio {med['timmdata'] / med['timm']:.2f}x{extra}")
    out = Path(a.out); out.parent.mkdir(parents=True, exist_ok=True); out.write_text(json.dumps(res, indent=1))
    print(f'wrote {out}')

if __name__ == '__main__': main()
