"""Eval at the decode limit (issue 29): timmdata's eval loader (resize the shorter side, centre crop) with the fused
resize-and-crop step (`resample.resize_crop_window`, `Compose.fuse_resize_crop = True`: only the crop's window resized)
and without it (the steps one by one, the default), against timm's eval loader and against `timmdata bench`'s decode limit (PIL decoding alone, one
core times the workers), in one run, epochs alternating; prints medians and ratios.

    python bench/bench_eval.py [--root FOLDER] [--max-images 400] [--epochs 3] [--workers 2]
"""
import argparse, os, statistics
from pathlib import Path
from PIL import Image
from timmdata.bench import LOADERS, bench_root, decode_limit, time_epoch

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root'); p.add_argument('--max-images', type=int, default=400)
    p.add_argument('--epochs', type=int, default=3); p.add_argument('--workers', type=int, default=2)
    p.add_argument('--batch-size', type=int, default=64)
    a = p.parse_args(argv)
    root = bench_root(a.root)
    files = sorted(f for f in root.rglob('*') if f.suffix.lower() in ('.jpg', '.jpeg'))
    files = [files[i * len(files) // a.max_images] for i in range(min(a.max_images, len(files)))]
    sizes = {}
    for f in files[:50]:
        with Image.open(f) as im: sizes[im.size] = sizes.get(im.size, 0) + 1
    import tempfile, shutil
    tmp = Path(tempfile.mkdtemp(prefix='bench_eval_'))
    for f in files:
        d = tmp / f.relative_to(root); d.parent.mkdir(parents=True, exist_ok=True); os.link(f, d)
    def fused(train, bs, nw):  # the same loader, the fused resize + crop on (Compose.fuse_resize_crop, off by default)
        ld = LOADERS['timmdata'](tmp, train, bs, nw)
        ld.loader.dataset.dataset.transform.fuse_resize_crop = True
        ld.loader.dataset.dataset.transform = ld.loader.dataset.dataset.transform  # the dataset re-reads its input format
        return ld
    loaders = {'fused': fused(False, a.batch_size, a.workers), 'steps': LOADERS['timmdata'](tmp, False, a.batch_size, a.workers),
               'timm': LOADERS['timm'](tmp, False, a.batch_size, a.workers)}
    rates = {k: [] for k in (*loaders, 'decode_limit')}
    try:
        for ep in range(a.epochs + 1):
            for k, ld in loaders.items():
                n, dt = time_epoch(ld)
                if ep: rates[k].append(n / dt)
            if ep: rates['decode_limit'].append(decode_limit(files, a.workers))
    finally: shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f'{len(files)} images (sizes of the first 50: {sizes}), {a.workers} workers, {a.epochs} epochs; load {os.getloadavg()[0]:.1f}')
    for k, v in med.items(): print(f'  {k:13s} {v:7.0f} images/s  runs {[round(x) for x in rates[k]]}')
    dl = med['decode_limit']
    print(f"fused/decode_limit {med['fused'] / dl:.2f}   steps/decode_limit {med['steps'] / dl:.2f}   fused/steps "
          f"{med['fused'] / med['steps']:.2f}   fused/timm {med['fused'] / med['timm']:.2f}")

if __name__ == '__main__': main()
