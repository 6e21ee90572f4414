"""Eval at the decode limit (issue 29): timmdata's eval loader (resize the shorter side, centre crop) as it comes (the
fused resize-and-crop step, `resample.resize_crop_window`: only the crop's window decoded and resized, PIL's pixels)
and with the steps one by one (`Compose.fuse_resize_crop = False`: whole decode, torch's resize, crop), against timm's
eval loader and against `timmdata bench`'s decode limit (PIL decoding alone, one core times the workers), in one run,
epochs alternating; prints medians and ratios (eval/decode_limit is issue 29's figure: at least 0.95).

Beside images/s (wall clock) it prints CPU-seconds per image: the loader's main process and its workers together, and
PIL's decode. On a shared machine the wall-clock figures move with the other load (and a loader of three processes
handing batches over suffers from it more than one process decoding); the CPU ratio (decode CPU / loader CPU) is what
the wall ratio becomes on an otherwise idle machine whose cores the loader keeps busy (an upper bound of it). The
one-core row runs the same eval loader with no worker process (everything, the batch's normalisation included, in
this process, torch's intra-op threads off) against PIL decoding on one core: both single processes, so the other
load slows both alike.

    python bench/bench_eval.py [--root FOLDER] [--max-images 400] [--epochs 3] [--workers 2] [--stages]

--stages prints instead where an eval image's time goes, stage by stage, in this one process (CPU-µs per image, the
minimum over a few repeats, against PIL's decode of the same files).
"""
import argparse, os, resource, statistics, sys, time
import torch
from pathlib import Path
from PIL import Image
from timmdata.tools.bench import LOADERS, bench_root, decode_limit, time_epoch, worker_pids
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import proc_cpu

def _cpu(loader) -> tuple:
    "(CPU seconds of this process and its waited-for children, {worker pid: its CPU seconds})."
    me, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime, {p: proc_cpu(p) for p in worker_pids(loader)}

def timed_epoch(loader) -> tuple:
    "(images, wall seconds, CPU seconds of the main process and the workers) of one pass."
    c0, w0 = _cpu(loader)
    n, dt = time_epoch(loader)
    c1, w1 = _cpu(loader)
    return n, dt, c1 - c0 + sum(t - w0.get(p, 0.0) for p, t in w1.items())

def stages(tmp, files, repeats: int = 7):
    "Where an eval image's CPU time goes, stage by stage, in this process (torch single-threaded, as in a worker)."
    import numpy as np
    from timmdata.batch.collate import fast_collate
    from timmdata.pixels.decode import NATIVE, encoded_jpeg
    from timmdata.pixels.resample import _source_span, vertical_first
    torch.set_num_threads(1)
    nat, ld = NATIVE.loaded, LOADERS['timmdata'](tmp, False, 64, 0)
    seeded = ld.loader.fetch_dataset  # the SeededDataset the loader reads (.dataset is the one passed in, as timm's)
    ds, tf, n = seeded.dataset, seeded.dataset.transform, len(files)
    paths = [ds.reader[i][0] for i in range(n)]
    datas = [open(f, 'rb').read() for f in paths]
    encs = [encoded_jpeg(d) for d in datas]
    plans = []  # each image's window: the fused call's arguments, and the decoded source for the resize alone
    for e, d in zip(encs, datas, strict=True):
        H, W = e.height, e.width
        oh, ow = (256, int(256 * W / H)) if W >= H else (int(256 * H / W), 256)
        top, left = int(round((oh - 224) / 2.0)), int(round((ow - 224) / 2.0))
        (y0, y1), (x0, x1) = _source_span(H, oh, top, 224, 1.0), _source_span(W, ow, left, 224, 1.0)
        px = np.frombuffer(nat.decode_crop(d, 0, 0, H, W)[0], np.uint8).reshape(H, -1, 3)[:, :W]
        plans.append(((oh, ow, top, left, 224, 224, 0, vertical_first((H, W), (oh, ow))), px[y0:y1, x0:x1], (y0, x0, H, W)))
    out = torch.empty(64, 3, 224, 224, dtype=torch.uint8)
    out.fill_(0)
    batch = [ds[i] for i in range(min(64, n))]

    def read():
        for f in paths:
            with open(f, 'rb') as fh: fh.read()

    def pil():
        for f in paths:
            with Image.open(f) as im: im.convert('RGB')
    tests = {
        "PIL decode of the file (the decode limit's unit)": pil,
        'read the file': read,
        'JPEG header (encoded_jpeg)': lambda: [encoded_jpeg(d) for d in datas],
        'native decode + resize (resize_crop_jpeg)': lambda: [nat.resize_crop_jpeg(d, *p[0]) for d, p in zip(datas, plans)],
        '  of which the resize (resample_window)': lambda: [nat.resample_window(p[1], p[2][0], p[2][1], p[2][2], p[2][3], *p[0])
                                                             for p in plans],
        'transform (the call and Python around it)': lambda: [tf(e) for e in encs],
        'dataset item (read, header, transform)': lambda: [ds[i] for i in range(n)],
        'seeded items (+ per-sample seeds, stage clocks)': lambda: seeded.__getitems__([(i, i) for i in range(n)]),
        'collate into the batch': lambda: [fast_collate(batch, alloc=lambda shape: out) for _ in range(0, n, len(batch))],
    }
    best = {k: float('inf') for k in tests}
    for _ in range(repeats):
        for k, f in tests.items():
            c = time.process_time(); f(); best[k] = min(best[k], (time.process_time() - c) / n)
    time_epoch(ld)
    best['whole loader, no workers (+ batch normalise)'] = min((lambda c, r: (time.process_time() - c) / r[0])(time.process_time(), time_epoch(ld)) for _ in range(3))
    pil_t = best["PIL decode of the file (the decode limit's unit)"]
    print(f'{n} images, CPU-µs per image (min of {repeats}), load {os.getloadavg()[0]:.1f}')
    print(f"| {'stage':50s} | CPU-µs | of PIL's decode |")
    for k, v in best.items(): print(f'| {k:50s} | {v * 1e6:6.0f} | {v / pil_t:14.2f} |')

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root'); p.add_argument('--max-images', type=int, default=400)
    p.add_argument('--epochs', type=int, default=3); p.add_argument('--workers', type=int, default=2)
    p.add_argument('--batch-size', type=int, default=64)
    p.add_argument('--stages', action='store_true', help='print where an eval image\'s time goes, stage by stage')
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
    def steps(train, bs, nw):  # the same loader, the fused resize + crop off (Compose.fuse_resize_crop)
        ld = LOADERS['timmdata'](tmp, train, bs, nw)
        ld.loader.dataset.transform.fuse_resize_crop = False
        ld.loader.dataset.transform = ld.loader.dataset.transform  # the dataset re-reads its input format
        return ld
    if a.stages:
        try: return stages(tmp, files)
        finally: shutil.rmtree(tmp, ignore_errors=True)
    loaders = {'eval': LOADERS['timmdata'](tmp, False, a.batch_size, a.workers), 'steps': steps(False, a.batch_size, a.workers),
               'timm': LOADERS['timm'](tmp, False, a.batch_size, a.workers),
               'eval_1core': LOADERS['timmdata'](tmp, False, a.batch_size, 0)}
    keys = (*loaders, 'decode_limit', 'decode_1core')
    rates, cpus = {k: [] for k in keys}, {k: [] for k in keys}
    try:
        for ep in range(a.epochs + 1):
            for k, ld in loaders.items():
                threads = torch.get_num_threads()
                if k == 'eval_1core': torch.set_num_threads(1)  # one core: no intra-op threads either (as in a worker)
                try: n, dt, cpu = timed_epoch(ld)
                finally: torch.set_num_threads(threads)
                if ep: rates[k].append(n / dt); cpus[k].append(cpu / n)
            c = time.process_time()
            r = decode_limit(files, a.workers)
            if ep:
                rates['decode_limit'].append(r); cpus['decode_limit'].append((time.process_time() - c) / len(files))
                rates['decode_1core'].append(r / max(1, a.workers)); cpus['decode_1core'].append(cpus['decode_limit'][-1])
    finally: shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    print(f'{len(files)} images (sizes of the first 50: {sizes}), {a.workers} workers, {a.epochs} epochs; load {os.getloadavg()[0]:.1f}')
    for k, v in med.items():
        print(f'  {k:13s} {v:7.0f} images/s  runs {[round(x) for x in rates[k]]}   {cpu[k] * 1e6:6.0f} CPU-µs/image')
    dl = med['decode_limit']
    print(f"wall: eval/decode_limit {med['eval'] / dl:.2f}   steps/decode_limit {med['steps'] / dl:.2f}   eval/steps "
          f"{med['eval'] / med['steps']:.2f}   eval/timm {med['eval'] / med['timm']:.2f}")
    print(f"one core: eval_1core/decode_1core {med['eval_1core'] / med['decode_1core']:.2f}   (no worker processes: the "
          f"same scheduling for both)")
    print(f"CPU:  eval/decode_limit {cpu['decode_limit'] / cpu['eval']:.2f}   steps/decode_limit "
          f"{cpu['decode_limit'] / cpu['steps']:.2f}   eval/timm {cpu['timm'] / cpu['eval']:.2f}   (decode CPU per image / loader CPU per image)")

if __name__ == '__main__': main()
