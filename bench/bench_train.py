"""Where a training image's CPU time goes, timmdata against timm, in CPU-seconds per image (robust to a loaded machine).

The train pipeline of `timmdata bench` (create_loader(is_training=True, color_jitter=0.4), batches of 64) on the
generated sample data, run in this process (num_workers=0: every stage, the collate and the main process's batch step
on one core), timed with the process's CPU clock, best of --reps passes. Prints:
- the loader's CPU ms/image, timm's, their ratio (timm / timmdata: how many times faster timmdata is per core), and
  timmdata against the decode limit (PIL's whole decode, what `timmdata bench` calls decode_limit, per core);
- the stages of one training sample, each timed alone: read, header, the crop's decode, resize and flip (one native
  call, `resample.resize_box`; indented below it: the same made 64 per native call as the loader's collate makes
  them (`resample.resize_pending`), its crop decode alone, and torch's resize of the crop that it replaced), collate; whatever the loader costs beyond their sum is its own machinery (seeding, stage clocks,
  DataLoader, batch step).
With --old TREE: the loader's CPU ms/image (and minor page faults per image) of TREE and of this tree, alternating in one run (each in a subprocess with
that tree first on PYTHONPATH), and new/old.

    python bench/bench_train.py [--images 640] [--reps 3] [--old /work/main] [--root FOLDER]

--root: an image folder with class subfolders instead of the sample data's train/ (e.g. photos of 500x375 made by
`make_sample_dataset(R, n_train=1200, size=(500, 375))`: `--root R/train`).
"""

import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _root():
    "The images: --root, else the generated sample data's train/ folder."
    from timmdata.tools.bench import bench_root

    return Path(os.environ['BENCH_TRAIN_ROOT']) if os.environ.get('BENCH_TRAIN_ROOT') else bench_root()


def loader_cpu_ms(which: str, n: int, reps: int) -> tuple:
    "(CPU ms per image, minor page faults per image) of `which` ('timmdata' or 'timm') over `n` images, best of `reps` passes (after a warm-up batch)."
    import resource
    import torch

    from timmdata.tools.bench import _timm_loader, _timmdata_loader

    torch.set_num_threads(1)
    loader = (_timmdata_loader if which == 'timmdata' else _timm_loader)(_root(), True, 64, 0)
    best = (float('inf'), 0.0)
    for _ in range(reps):
        it = iter(loader)
        next(it)
        t, f, k = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt, 0
        for x, _y in it:
            k += x.shape[0]
            if k >= n:
                break
        ms, faults = (time.process_time() - t) / k * 1e3, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f) / k
        best = min(best, (ms, faults))
    return best


def stages_cpu_ms(n: int, reps: int) -> dict:
    "CPU ms per image of each stage of a training sample, each timed alone over the same `n` files (best of `reps`)."
    import torch
    from PIL import Image
    from torchvision.transforms import InterpolationMode

    from timmdata.batch.collate import fast_collate
    from timmdata.pixels.decode import encoded_jpeg, read_source
    from timmdata.transforms import RandomResizedCropAndInterpolation as RRC
    from timmdata.transforms import resize_exact
    from timmdata.pixels.resample import defer_jpeg_crop, resize_box, resize_pending

    torch.set_num_threads(1)
    files = sorted(glob.glob(str(_root() / '*' / '*')))[:n]
    datas = [read_source(f) for f in files]
    encs = [encoded_jpeg(d) for d in datas]
    random.seed(0)
    boxes = [RRC.get_params(e, (0.08, 1.0), (3 / 4, 4 / 3)) for e in encs]
    crops = [e.decode_crop(*b) for e, b in zip(encs, boxes, strict=True)]
    BILINEAR = InterpolationMode.BILINEAR
    outs = [resize_box(e, b, (224, 224), BILINEAR) for e, b in zip(encs, boxes, strict=True)]

    def pil_decode(f):
        with Image.open(f) as im:
            im.convert('RGB')

    def batched(_):  # what the loader's collate does: a batch's crops in one native call, into the batch
        pend = [defer_jpeg_crop(e, b, (224, 224), BILINEAR, i % 2 == 0, None) for i, (e, b) in enumerate(zip(encs, boxes, strict=True))]
        out = torch.empty(64, 3, 224, 224, dtype=torch.uint8)
        for i in range(0, len(pend) - 63, 64):
            resize_pending(pend[i : i + 64], out)

    def collate(_):
        for i in range(0, len(outs) - 63, 64):
            fast_collate([(o, 0) for o in outs[i : i + 64]])

    work = {
        'read (file bytes)': lambda: [read_source(f) for f in files],
        'header (encoded_jpeg)': lambda: [encoded_jpeg(d) for d in datas],
        'crop decode + resize + flip (resize_box)': lambda: [
            resize_box(e, b, (224, 224), BILINEAR, flip=i % 2 == 0) for i, (e, b) in enumerate(zip(encs, boxes, strict=True))
        ],
        '  the same, 64 per native call (resize_pending)': lambda: batched(None),
        '  of which the crop decode (decode_crop)': lambda: [e.decode_crop(*b) for e, b in zip(encs, boxes, strict=True)],
        '  (torch uint8 AA resize of the crop, before)': lambda: [resize_exact(c, (224, 224), BILINEAR) for c in crops],
        'collate (into the uint8 batch)': lambda: collate(None),
        'whole decode, extension (reference)': lambda: [e.decode() for e in encs],
        'whole decode, PIL (decode limit)': lambda: [pil_decode(f) for f in files],
    }
    res = {}
    for name, fn in work.items():
        best = float('inf')
        for _ in range(reps):
            t = time.process_time()
            fn()
            best = min(best, (time.process_time() - t) / len(files) * 1e3)
        res[name] = best
    for k in ('collate (into the uint8 batch)', '  the same, 64 per native call (resize_pending)'):
        res[k] *= len(files) / (len(files) // 64 * 64)  # per collated image
    return res


def _child(which: str, n: int, reps: int):
    print(json.dumps(loader_cpu_ms(which, n, reps)))  # [ms, faults]


def tree_cpu_ms(tree: Path, n: int, reps: int) -> float:
    "The loader's CPU ms/image with `tree` first on PYTHONPATH (a subprocess)."
    env = {**os.environ, 'PYTHONPATH': str(tree)}
    out = subprocess.run(
        [sys.executable, __file__, '--child', 'timmdata', '--images', str(n), '--reps', str(reps)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
    )
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--images', type=int, default=640)
    p.add_argument('--reps', type=int, default=3)
    p.add_argument('--rounds', type=int, default=3, help='with --old: alternating rounds')
    p.add_argument('--old', help='source tree of the version to compare against (its extension built)')
    p.add_argument('--root', help="image folder with class subfolders (default: the sample data's train/)")
    p.add_argument('--child', help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.root:
        os.environ['BENCH_TRAIN_ROOT'] = str(Path(a.root).resolve())  # the children (--old) read it too
    if a.child:
        return _child(a.child, a.images, a.reps)
    if a.old:
        trees = {'old': Path(a.old).resolve(), 'new': Path(__file__).resolve().parents[1]}
        seen = {'old': [], 'new': []}
        for r in range(a.rounds):
            for v in ('old', 'new') if r % 2 == 0 else ('new', 'old'):
                seen[v].append(tree_cpu_ms(trees[v], a.images, a.reps))
        o, nw = (statistics.median(ms for ms, _ in seen[v]) for v in ('old', 'new'))
        fo, fn = (statistics.median(f for _, f in seen[v]) for v in ('old', 'new'))
        print(
            f'loader CPU ms/image: old {o:.3f} (runs {", ".join(f"{x:.3f}" for x, _ in seen["old"])})  '
            f'new {nw:.3f} (runs {", ".join(f"{x:.3f}" for x, _ in seen["new"])})  old/new {o / nw:.3f}'
        )
        print(f'minor page faults per image: old {fo:.1f}  new {fn:.1f}')
        return
    td, tm = [], []
    for r in range(a.rounds):  # alternating, so both see the same machine load
        for which in ('timmdata', 'timm') if r % 2 == 0 else ('timm', 'timmdata'):
            (td if which == 'timmdata' else tm).append(loader_cpu_ms(which, a.images, a.reps)[0])
    st = stages_cpu_ms(a.images, a.reps)
    ours, theirs, limit = statistics.median(td), statistics.median(tm), st['whole decode, PIL (decode limit)']
    print(f'{"stage (CPU ms per image, one core)":46s} {"ms":>7s} {"of loader":>9s}')
    parts = [k for k in st if 'reference' not in k and 'decode limit' not in k and not k.startswith(' ')]
    for k in [k for k in st if 'reference' not in k and 'decode limit' not in k]:  # indented: parts of the row above
        print(f'{k:46s} {st[k]:7.3f} {st[k] / ours:9.0%}')
    rest = ours - sum(st[k] for k in parts)
    print(f'{"loader machinery + batch step (the rest)":46s} {rest:7.3f} {rest / ours:9.0%}')
    print(f'{"timmdata loader (num_workers=0)":46s} {ours:7.3f}')
    print(f'{"timm loader (num_workers=0)":46s} {theirs:7.3f}')
    for k in ('whole decode, extension (reference)', 'whole decode, PIL (decode limit)'):
        print(f'{k:46s} {st[k]:7.3f}')
    print(f'timmdata/timm (per core) {theirs / ours:.2f}x   timmdata/decode-limit {limit / ours:.2f}x')


if __name__ == '__main__':
    main()
