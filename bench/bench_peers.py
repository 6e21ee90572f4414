"""Issue 46: timmdata against the loaders users pick instead (FFCV, DALI on the CPU, Grain, SPDL), timm (with and
without its prefetcher), torchvision and the PIL full-decode limit, in one run.

Every contender runs in a process of its own, one per contender per pipeline per round (so no one's threads, imports or
page-cache warm-up leak into another's figures), and the contenders alternate round by round (the order rotates), so a
shared machine's load hits them all alike. Each child builds its loader, runs one warm-up epoch (workers start, FFCV's
numba compiles, the page cache fills) and then timed epochs; it reports images/s, the CPU seconds of its whole process
tree per image, the time from building the loader to its first batch, the PSS of its process tree, and what its batches
are (dtype, layout, normalised or not, device), read off a real batch.

The peers live in a separate venv made by `bench/setup_peers.sh` (`.peers-venv/`); a peer that is not installed there is
reported as skipped with the reason. Run:

    bash bench/setup_peers.sh
    .peers-venv/bin/python bench/bench_peers.py            # full run: 3 alternating rounds, 1,500 images
                                                           # (the committed runs used --rounds 2: ~20 min each)
    .peers-venv/bin/python bench/bench_peers.py --quick    # 300 images, 1 round: to try it out (not for figures)
    .peers-venv/bin/python bench/bench_peers.py --sets photos   # only the photographic set (issue 60; both by default)
    python bench/bench_peers.py --plot-only bench/results/peers_2026-11-24.json   # the picture again
"""
import argparse, json, os, resource, statistics, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / 'results' / 'peers_2026-11-24.txt'  # the generated set's; the photographic set's gets _photos
SETS = {  # data set -> what it is (the report's line), made by make_set
    'generated': '{n} generated 500x375 JPEGs (q90, timmdata.tools.sample_data)',
    'photos': '{n} crops of real photographs at ImageNet sizes and encodings (timmdata.tools.photos: Debian wallpapers)',
}
PICTURE = ROOT / 'nbs' / 'images' / 'peers.png'
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BASE = 'timmdata'

# contender -> (module that must import, what it does differently: the configuration, stated; the measured part is in the table)
CONTENDERS = {
    'timmdata': ('timmdata', 'create_dataset + create_loader defaults (device cpu, colour jitter off)'),
    'timm': ('timm', 'timm.data create_dataset + create_loader, use_prefetcher=True (workers give uint8, the main '
                     'process normalises)'),
    'timm-noprefetch': ('timm', 'timm.data create_loader, use_prefetcher=False (workers run ToTensor + Normalize)'),
    'torchvision': ('torchvision', 'ImageFolder + DataLoader; RandomResizedCrop/Resize (PIL, bilinear, antialiased), '
                                   'ToTensor, Normalize in the workers'),
    'ffcv-uint8': ('ffcv', "reads its re-encoded .beton (JPEG q90 written from the folder), not the JPEG files; its "
                           "RandomResizedCrop/CenterCrop decoders decode the whole JPEG (libjpeg-turbo), then crop and "
                           "resize in C (bench/peers_decode.py: more CPU than the whole decode alone); uint8 out"),
    'ffcv-float': ('ffcv', 'as ffcv-uint8 plus NormalizeImage (float32) in its pipeline'),
    'dali-cpu': ('nvidia.dali', 'fn.readers.file (shuffles through a buffer, initial_fill=1024), '
                                "decoders.image_random_crop (decodes the crop's region only; eval decodes all), "
                                'fn.resize (linear, antialiased), crop_mirror_normalize; 2 CPU threads, device_id=None'),
    'grain': ('grain', 'MapDataset of files, PIL open + full decode + crop + resize (bilinear, box=crop) + flip in 2 '
                       'worker processes (ReadOptions 1 thread, 1 batch ahead, not the default 16 threads/500 ahead); '
                       'batches are uint8 NHWC numpy, not normalised'),
    'spdl': ('spdl.io', "spdl.pipeline: FFmpeg decodes the whole JPEG, a filter graph crops/scales/flips "
                        "(swscale bilinear); 2 threads; uint8 NCHW, not normalised; one pipeline over all epochs (up to ~3 batches "
                        "can be ready when a timed epoch starts, as with Grain and DALI's prefetch queue)"),
    'pil-limit': ('PIL', 'PIL full decode (open + convert RGB) in 2 processes, nothing else: the decode ceiling of '
                         'loaders that decode whole images'),
}
PIPELINES = ('train', 'eval')


# ----------------------------------------------------------------------------------------------------------- the child
def tree_cpu(proc) -> dict:
    "{pid: CPU seconds} of `proc` (a psutil.Process) and all its live descendants."
    out = {}
    for p in [proc] + proc.children(recursive=True):
        try: t = p.cpu_times(); out[p.pid] = t.user + t.system
        except Exception: pass
    return out


def reaped_cpu() -> float:
    "CPU seconds of this process's children that have ended and been waited for."
    r = resource.getrusage(resource.RUSAGE_CHILDREN); return r.ru_utime + r.ru_stime


def tree_pss_mb(proc) -> float:
    "PSS of `proc` and its descendants in MB (shared pages counted once, split between their users)."
    tot = 0
    for p in [proc] + proc.children(recursive=True):
        try: tot += p.memory_full_info().pss
        except Exception: pass
    return tot / 2**20


def describe(x) -> str:
    "What a batch is: dtype, layout, value range, device (read off the batch itself)."
    import torch
    if not isinstance(x, torch.Tensor): x = torch.as_tensor(x)
    dt = str(x.dtype).replace('torch.', '')
    lay = '?'
    if x.ndim == 4:
        if x.shape[1] == 3: lay = 'NCHW' + (' (channels-last memory)' if not x.is_contiguous()
                                          and x.is_contiguous(memory_format=torch.channels_last) else '')
        elif x.shape[-1] == 3: lay = 'NHWC'
    if x.is_floating_point():
        lo, hi = float(x.min()), float(x.max())
        rng = 'normalised' if lo < -0.5 else ('0-1' if hi <= 1.0 else '0-255')
    else: rng = '0-255'
    return f'{dt} {lay} {rng} {x.device.type}'


def _epochs_from_iterator(make_iter, n_batches):
    "For loaders iterated once over a repeated source: each call yields the next `n_batches` batches of one iterator."
    it = None
    def epoch():
        nonlocal it
        if it is None: it = iter(make_iter())
        for _ in range(n_batches):
            try: yield next(it)
            except StopIteration: return
    return epoch


def build(name, a, train):
    "A function giving one epoch's iterable of (images, labels) for contender `name`."
    root, bs, nw = Path(a.data), a.batch_size, a.workers
    if name == 'timmdata':
        from timmdata import create_dataset, create_loader
        ds = create_dataset('', root=str(root), is_training=train)
        ld = create_loader(ds, (3, 224, 224), bs, is_training=train, num_workers=nw, color_jitter=None, device='cpu')
        return lambda: ld
    if name in ('timm', 'timm-noprefetch'):
        import torch, timm.data
        ds = timm.data.create_dataset('', root=str(root), is_training=train)
        ld = timm.data.create_loader(ds, (3, 224, 224), bs, is_training=train, num_workers=nw, color_jitter=None,
                                     use_prefetcher=name == 'timm', device=torch.device('cpu'), persistent_workers=True)
        return lambda: ld
    if name == 'torchvision':
        import torch
        from torchvision import datasets, transforms as T
        norm = [T.ToTensor(), T.Normalize(MEAN, STD)]
        tf = T.Compose(([T.RandomResizedCrop(224), T.RandomHorizontalFlip()] if train else
                        [T.Resize(256), T.CenterCrop(224)]) + norm)
        ld = torch.utils.data.DataLoader(datasets.ImageFolder(str(root), transform=tf), batch_size=bs, shuffle=train,
                                         drop_last=train, num_workers=nw, persistent_workers=nw > 0)
        return lambda: ld
    if name.startswith('ffcv'):
        return _ffcv(a, train, name == 'ffcv-float')
    if name == 'dali-cpu':
        return _dali(a, train)
    if name == 'grain':
        return _grain(a, train)
    if name == 'spdl':
        return _spdl(a, train)
    if name == 'pil-limit':
        return _pil_limit(a)
    raise ValueError(f'unknown contender {name!r}; choose from {", ".join(CONTENDERS)}')


def list_files(root):
    "[(path, label)] of the image folder, classes sorted (as ImageFolder)."
    classes = sorted(d.name for d in Path(root).iterdir() if d.is_dir())
    return [(str(f), i) for i, c in enumerate(classes) for f in sorted((Path(root) / c).iterdir()) if f.is_file()]


def beton_path(a) -> Path: return Path(a.data).parent / f'{Path(a.data).name}.beton'


def write_beton(a) -> float:
    "Write FFCV's .beton from the JPEG folder (RGBImageField jpg, max_resolution 512, quality 90); its seconds."
    import torchvision
    from ffcv.writer import DatasetWriter
    from ffcv.fields import RGBImageField, IntField
    out = beton_path(a)
    if out.exists(): return 0.0
    t = time.perf_counter()
    ds = torchvision.datasets.ImageFolder(str(a.data))
    tmp = out.with_suffix('.tmp')
    DatasetWriter(str(tmp), {'image': RGBImageField(write_mode='jpg', max_resolution=512, jpeg_quality=90),
                             'label': IntField()}, num_workers=a.workers).from_indexed_dataset(ds)
    os.replace(tmp, out)
    return time.perf_counter() - t


def _ffcv(a, train, normalise):
    import numpy as np
    from ffcv.loader import Loader, OrderOption
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder, CenterCropRGBImageDecoder
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage, NormalizeImage, Squeeze
    img = ([RandomResizedCropRGBImageDecoder((224, 224)), RandomHorizontalFlip()] if train else
           [CenterCropRGBImageDecoder((224, 224), ratio=224 / 256)])
    if normalise: img.append(NormalizeImage(np.array(MEAN) * 255, np.array(STD) * 255, np.float32))
    img += [ToTensor(), ToTorchImage()]
    ld = Loader(str(beton_path(a)), batch_size=a.batch_size, num_workers=a.workers, os_cache=True, drop_last=train,
                order=OrderOption.RANDOM if train else OrderOption.SEQUENTIAL,
                pipelines={'image': img, 'label': [IntDecoder(), ToTensor(), Squeeze()]})
    return lambda: ld


def _dali(a, train):
    import torch  # noqa: F401  (before DALI's torch plugin)
    from nvidia.dali import pipeline_def, fn, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    mean, std = [m * 255 for m in MEAN], [s * 255 for s in STD]

    @pipeline_def(batch_size=a.batch_size, num_threads=a.workers, device_id=None, seed=0)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=str(a.data), random_shuffle=train, name='Reader')
        if train:
            im = fn.decoders.image_random_crop(jpegs, device='cpu', output_type=types.RGB)
            im = fn.resize(im, resize_x=224, resize_y=224)
            im = fn.crop_mirror_normalize(im, dtype=types.FLOAT, output_layout='CHW', mean=mean, std=std,
                                          mirror=fn.random.coin_flip(probability=0.5))
        else:
            im = fn.decoders.image(jpegs, device='cpu', output_type=types.RGB)
            im = fn.resize(im, resize_shorter=256)
            im = fn.crop_mirror_normalize(im, dtype=types.FLOAT, output_layout='CHW', crop=(224, 224), mean=mean,
                                          std=std)
        return im, labels
    p = pipe(); p.build()
    it = DALIGenericIterator([p], ['x', 'y'], reader_name='Reader', auto_reset=True,
                             last_batch_policy=LastBatchPolicy.DROP if train else LastBatchPolicy.PARTIAL)
    return lambda: ((d[0]['x'], d[0]['y']) for d in it)


def _rrc_box(w, h, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    "A RandomResizedCrop box (left, top, right, bottom), drawn as torchvision draws it (10 tries, then the centre)."
    import math
    area = w * h
    for _ in range(10):
        ta = area * rng.uniform(*scale)
        ar = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        cw, ch = int(round(math.sqrt(ta * ar))), int(round(math.sqrt(ta / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
            return x, y, x + cw, y + ch
    s = min(w, h); x, y = (w - s) // 2, (h - s) // 2
    return x, y, x + s, y + s


def _eval_box(w, h):
    "Resize shorter side to 256, centre crop 224, as one box in the source image."
    s = min(w, h) * 224 / 256
    x, y = (w - s) / 2, (h - s) / 2
    return x, y, x + s, y + s


class GrainLoad:
    "Grain's map step: PIL open, crop + resize to 224 (bilinear, one resample with a box), random flip; uint8 HWC."
    def __init__(self, train): self.train = train

    def __call__(self, item):
        import random, numpy as np
        from PIL import Image
        path, label = item
        rng = random.Random()
        with Image.open(path) as im:
            im = im.convert('RGB')
            box = _rrc_box(*im.size, rng) if self.train else _eval_box(*im.size)
            im = im.resize((224, 224), Image.BILINEAR, box=box)
            if self.train and rng.random() < 0.5: im = im.transpose(Image.FLIP_LEFT_RIGHT)
            return np.asarray(im), np.int64(label)


def _grain(a, train):
    import grain, torch
    files = list_files(a.data)
    n_batches = len(files) // a.batch_size if train else -(-len(files) // a.batch_size)
    epochs = a.epochs + 1  # warm-up included: one iterator over the repeated dataset keeps the worker processes

    def make():
        ds = grain.MapDataset.source(files)
        if train: ds = ds.shuffle(seed=0)
        ds = ds.repeat(epochs).map(GrainLoad(train)).batch(a.batch_size, drop_remainder=train)
        # one element (a batch) at a time per worker, one batch buffered: a DataLoader worker's way. Grain's default
        # ReadOptions (16 threads, 500 elements ahead) runs whole epochs ahead, which no timed window can see past
        read = grain.ReadOptions(num_threads=1, prefetch_buffer_size=1)
        return (tuple(torch.from_numpy(v) for v in b) for b in ds.to_iter_dataset(read).mp_prefetch(
            grain.multiprocessing.MultiprocessingOptions(num_workers=a.workers)))
    return _epochs_from_iterator(make, n_batches)


def _spdl(a, train):
    import torch, random  # torch first: importing it after the pipeline is built stalls the first batch
    import spdl.io
    from spdl.pipeline import PipelineBuilder
    from PIL import Image
    files = list_files(a.data)
    n_batches = len(files) // a.batch_size if train else -(-len(files) // a.batch_size)
    rng = random.Random(0)

    def load(item):
        path, label = item
        with Image.open(path) as im: w, h = im.size  # the header only: the crop box needs the size
        x0, y0, x1, y1 = _rrc_box(w, h, rng) if train else _eval_box(w, h)
        flt = f'crop={int(x1 - x0)}:{int(y1 - y0)}:{int(x0)}:{int(y0)},scale=224:224:flags=bilinear'
        if train and rng.random() < 0.5: flt += ',hflip'
        frames = spdl.io.decode_packets(spdl.io.demux_image(path), filter_desc=flt + ',format=pix_fmts=rgb24')
        return frames, label

    def collate(items):
        buf = spdl.io.convert_frames([f for f, _ in items])
        x = spdl.io.to_torch(buf).permute(0, 3, 1, 2)  # NHWC -> NCHW view
        return x.contiguous(), torch.tensor([l for _, l in items])

    def make():
        def src():
            for _ in range(a.epochs + 1):
                order = list(files)
                if train: rng.shuffle(order)
                yield from order
        pl = (PipelineBuilder().add_source(src()).pipe(load, concurrency=a.workers)
              .aggregate(a.batch_size, drop_last=train).pipe(collate).add_sink(2).build(num_threads=a.workers))
        def gen():
            with pl.auto_stop(): yield from pl
        return gen()
    return _epochs_from_iterator(make, n_batches)


def _pil_decode(paths):
    from PIL import Image
    for p in paths:
        with Image.open(p) as im: im.convert('RGB')
    return len(paths)


def _pil_limit(a):
    import torch
    from concurrent.futures import ProcessPoolExecutor
    files = [f for f, _ in list_files(a.data)]
    pool = ProcessPoolExecutor(a.workers)
    chunks = [files[i:i + a.batch_size] for i in range(0, len(files), a.batch_size)]
    fake = torch.zeros(1, 3, 224, 224, dtype=torch.uint8)  # no batch: only the decode is done

    def epoch():
        for n in pool.map(_pil_decode, chunks): yield fake.expand(n, 3, 224, 224), torch.zeros(n)
    return epoch


def child(a):
    "Run one contender's pipeline: warm-up epoch, then `a.epochs` timed epochs; print one RESULT line of JSON."
    import psutil
    me = psutil.Process()
    t_start = me.create_time()
    name, train = a.child, a.pipeline == 'train'
    import torch  # noqa: F401  (every contender's batches are read as torch tensors)
    t_build = time.time()
    epoch = build(name, a, train)
    res = dict(name=name, pipeline=a.pipeline, built_s=time.time() - t_build)
    first = None
    rates, cpu_ms = [], []
    for e in range(a.epochs + 1):
        before, r0, t0, n = tree_cpu(me), reaped_cpu(), time.perf_counter(), 0
        for x, y in epoch():
            if first is None:
                first = time.time()
                res.update(first_batch_s=first - t_build, first_batch_from_start_s=first - t_start,
                           output='no batch: decode only (PIL RGB images)' if name == 'pil-limit' else describe(x))
            n += len(y)
        dt = time.perf_counter() - t0
        after, r1 = tree_cpu(me), reaped_cpu()
        cpu = sum(v - before.get(p, 0.0) for p, v in after.items()) + (r1 - r0)
        if e == 0: res.update(warmup_s=dt, warmup_images=n)
        else: rates.append(n / dt); cpu_ms.append(1000 * cpu / max(n, 1))
        if n == 0: raise RuntimeError(f'{name} {a.pipeline}: an epoch gave no images')
    # PSS once, at the end (workers still alive): a pause between epochs would let a loader that streams over one
    # iterator (Grain, SPDL) fill its buffers ahead of the timed epoch
    res.update(images=n, rates=rates, cpu_ms=cpu_ms, pss_mb=tree_pss_mb(me))
    print('RESULT ' + json.dumps(res), flush=True)


# ------------------------------------------------------------------------------------------------- results and tables
def summarise(runs: list) -> dict:
    "{(name, pipeline): summary} over every child's result: median img/s and CPU ms/img, median first batch, max PSS."
    out = {}
    for r in runs:
        s = out.setdefault((r['name'], r['pipeline']), dict(rates=[], cpu_ms=[], first=[], pss=[], output=None))
        s['rates'] += r['rates']; s['cpu_ms'] += r['cpu_ms']
        s['first'].append(r['first_batch_s']); s['pss'].append(r['pss_mb']); s['output'] = r['output']
    for s in out.values():
        s['img_s'] = statistics.median(s['rates']); s['cpu'] = statistics.median(s['cpu_ms'])
        s['first_s'] = statistics.median(s['first']); s['pss_mb'] = max(s['pss'])
    return out


def format_table(summary: dict, skipped: dict | None = None, failed: dict | None = None, base: str = BASE) -> str:
    """The table: per pipeline, each contender's img/s and its ratio timmdata / contender (>1: timmdata is faster),
    CPU ms per image and the ratio contender / timmdata (>1: the contender spends more CPU), first batch, PSS, output."""
    lines = []
    for pipe in PIPELINES:
        rows = [(n, s) for (n, p), s in summary.items() if p == pipe]
        if not rows: continue
        b = summary.get((base, pipe))
        lines.append(f'{pipe}:')
        lines.append(f'  {"contender":<16}{"img/s":>8}{"timmdata x":>12}{"CPU ms/img":>12}{"CPU x":>8}'
                     f'{"1st batch s":>13}{"PSS MB":>8}  {"img/s by round":<16}output')
        for n, s in sorted(rows, key=lambda r: -r[1]['img_s']):
            fast = f'{b["img_s"] / s["img_s"]:.2f}' if b and s['img_s'] > 0 else '-'
            cpu = f'{s["cpu"] / b["cpu"]:.2f}' if b and b['cpu'] > 0 else '-'
            lines.append(f'  {n:<16}{s["img_s"]:>8.0f}{fast:>12}{s["cpu"]:>12.2f}{cpu:>8}{s["first_s"]:>13.1f}'
                         f'{s["pss_mb"]:>8.0f}  {"/".join(f"{r:.0f}" for r in s["rates"]):<16}{s["output"]}')
    lines.append('  timmdata x: timmdata img/s / contender img/s (>1: timmdata faster). CPU x: contender CPU per image / '
                 "timmdata's (>1: the contender spends more).")
    for what, d in (('skipped', skipped or {}), ('failed', failed or {})):
        for n, why in d.items(): lines.append(f'  {what}: {n}: {why}')
    return '\n'.join(lines)


def plot(summary: dict, path, title=''):
    "Two rows (train, eval) of two bar charts: img/s and CPU ms per image per contender (median; dots: each round)."
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(9, 6.2), dpi=80)
    for i, pipe in enumerate(PIPELINES):
        rows = sorted(((n, s) for (n, p), s in summary.items() if p == pipe), key=lambda r: r[1]['img_s'])
        names = [n for n, _ in rows]
        col = ['tab:orange' if n == BASE else 'tab:blue' for n in names]
        for j, (key, lab) in enumerate((('img_s', 'images/s (higher is better)'), ('cpu', 'CPU ms per image (lower is better)'))):
            ax = axes[i][j]
            ax.barh(names, [s[key] for _, s in rows], color=col)
            for y, (_, s) in enumerate(rows):  # each round's figure: how far the shared machine moved it
                per = s['rates'] if key == 'img_s' else s['cpu_ms']
                ax.plot(per, [y] * len(per), 'k.', ms=5)
            ax.set_title(f'{pipe}: {lab}', fontsize=10); ax.tick_params(labelsize=8)
    if title: fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------- the parent
def peers_python() -> str:
    v = ROOT / '.peers-venv' / 'bin' / 'python'
    return str(v) if v.exists() else sys.executable


def availability(py) -> dict:
    "{contender: None if it can run, else why not}: imports tried in `py`, reasons from setup_peers.sh's skipped.txt."
    mods = sorted({m for m, _ in CONTENDERS.values()})
    code = ('import importlib, json\nout = {}\nfor m in %r:\n    try: importlib.import_module(m); out[m] = None\n'
            '    except Exception as e: out[m] = f"{type(e).__name__}: {e}"[:200]\nprint(json.dumps(out))' % mods)
    try: got = json.loads(subprocess.run([py, '-c', code], capture_output=True, text=True, timeout=300).stdout)
    except Exception as e: got = {m: f'{py} could not be run ({e})' for m in mods}
    reasons = {}
    sk = Path(py).parent.parent / 'skipped.txt'
    if sk.exists():
        for line in sk.read_text().splitlines():
            if ':' in line: k, v = line.split(':', 1); reasons[k.strip()] = v.strip()
    out = {}
    for n, (m, _) in CONTENDERS.items():
        if got.get(m) is None: out[n] = None
        else:
            peer = n.split('-')[0]
            out[n] = (f'not installed in {py} ({reasons[peer]})' if peer in reasons else
                      f'not importable in {py}: {got[m]} (run bench/setup_peers.sh)')
    return out


def versions(py) -> str:
    "Installed versions of the contenders' packages in `py`."
    code = ('from importlib.metadata import version\nout = []\nfor d in %r:\n    try: out.append(f"{d} {version(d)}")\n'
            '    except Exception: pass\nprint(", ".join(out))' % (DISTS,))
    try: return subprocess.run([py, '-c', code], capture_output=True, text=True, timeout=120).stdout.strip()
    except Exception: return '?'


DISTS = ('timmdata', 'timm', 'torch', 'torchvision', 'pillow', 'numpy', 'ffcv', 'numba', 'opencv-python-headless',
         'nvidia-dali-cuda120', 'grain', 'spdl', 'spdl-io', 'spdl-core')


def run_child(py, name, pipe, a) -> tuple:
    "(result dict or None, error text or None) of one child process."
    cmd = [py, str(Path(__file__).resolve()), '--child', name, '--pipeline', pipe, '--data', str(a.data),
           '--batch-size', str(a.batch_size), '--workers', str(a.workers), '--epochs', str(a.epochs)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')]).rstrip(os.pathsep))
    try: p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
    except subprocess.TimeoutExpired: return None, f'no result within {a.timeout} s'
    for line in p.stdout.splitlines():
        if line.startswith('RESULT '): return json.loads(line[7:]), None
    tail = (p.stderr.strip().splitlines() or ['(no output)'])[-1]
    return None, f'exit {p.returncode}: {tail[:200]}'


def load_avg() -> str:
    try: return subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()
    except OSError: return ' '.join(open('/proc/loadavg').read().split()[:3])


def gpu_note() -> str:
    try:
        import torch
        if torch.cuda.is_available(): return f'GPU present ({torch.cuda.get_device_name(0)}) but not used: CPU pipelines only.'
    except Exception: pass
    return 'No GPU on this machine: CPU pipelines only; no GPU figures (DALI/nvImageCodec on a GPU not run).'


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--quick', action='store_true',
                    help='300 images, 1 round, results not saved unless --out is given: to try the setup, not for '
                         "figures (with 5 batches an epoch, the batches Grain and SPDL prepare ahead are a large share "
                         "of the timed epoch, so their img/s come out high and their CPU per image low)")
    ap.add_argument('--rounds', type=int, default=3, help='alternating rounds (default 3; --quick: 1)')
    ap.add_argument('--images', type=int, default=1500, help='images in each set (default 1500; --quick: 300)')
    ap.add_argument('--sets', default='generated,photos',
                    help='comma-separated data sets, each run in full and saved apart: generated (the sample-data '
                         "generator's pictures), photos (crops of real photographs, timmdata.tools.photos)")
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--workers', type=int, default=2, help='worker processes or threads per contender (default 2)')
    ap.add_argument('--epochs', type=int, default=1, help='timed epochs per child, after one warm-up epoch (default 1)')
    ap.add_argument('--only', default='', help='comma-separated contenders (default: all): ' + ', '.join(CONTENDERS))
    ap.add_argument('--pipelines', default='train,eval')
    ap.add_argument('--data', default=None, help='folder for the images (default /tmp/timmdata_peers_N, /tmp/timmdata_photos_N)')
    ap.add_argument('--python', default=None, help="the peers' python (default .peers-venv/bin/python, else this one)")
    ap.add_argument('--out', default=None, help=f'results file (default {RESULTS.relative_to(ROOT)}; with --quick none)')
    ap.add_argument('--picture', default=None, help=f'picture to write (default {PICTURE.relative_to(ROOT)} for a full run)')
    ap.add_argument('--timeout', type=int, default=600, help='seconds one child may take')
    ap.add_argument('--plot-only', default=None, metavar='JSON', help='only redraw the picture from a saved .json')
    ap.add_argument('--table-from', default=None, metavar='JSON',
                    help="rewrite the results .txt beside a saved .json from it (its header kept; this version's notes)")
    ap.add_argument('--child', default=None, help=argparse.SUPPRESS)
    ap.add_argument('--pipeline', default='train', help=argparse.SUPPRESS)
    ap.add_argument('--write-beton', action='store_true', help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child: return child(a)
    if a.write_beton: print('BETON', write_beton(a)); return
    if a.plot_only:
        d = json.loads(Path(a.plot_only).read_text())
        plot(summarise(d['runs']), a.picture or PICTURE, d.get('title', '') + ' (bars: median, dots: each round)'); return
    if a.table_from:
        d, js = json.loads(Path(a.table_from).read_text()), Path(a.table_from)
        names = list(dict.fromkeys([r['name'] for r in d['runs']] + list(d['skipped']) + list(d['failed'])))
        text = (d['header'] + f'\n(table re-rendered from {js.name} with --table-from)\n\n'
                + format_table(summarise(d['runs']), d['skipped'], d['failed']) + '\n\nwhat each contender does:\n'
                + '\n'.join(f'  {n}: {CONTENDERS[n][1]}' for n in names if n in CONTENDERS) + '\n')
        js.with_suffix('.txt').write_text(text); print(text); return
    if a.quick: a.rounds, a.images = 1, min(a.images, 300)
    only = [s for s in a.only.split(',') if s] or list(CONTENDERS)
    bad = [s for s in only if s not in CONTENDERS]
    if bad: ap.error(f'unknown contender(s) {bad}; choose from {", ".join(CONTENDERS)}')
    pipes = [p for p in a.pipelines.split(',') if p]
    if any(p not in PIPELINES for p in pipes): ap.error(f'--pipelines: choose from {", ".join(PIPELINES)}')
    py = a.python or peers_python()

    sets = [x for x in a.sets.split(',') if x]
    if not sets or any(x not in SETS for x in sets): ap.error(f'--sets: choose from {", ".join(SETS)}; got {a.sets!r}')
    data_arg = a.data
    for k, name in enumerate(sets):
        a.data = make_set(name, a.images, data_arg if len(sets) == 1 else None)
        # a file named with --out/--picture is used as given for one set; the defaults (and several sets) get _<set>
        out = a.out or (None if a.quick else RESULTS)
        if out and name != 'generated' and (len(sets) > 1 or not a.out):
            out = Path(out).with_name(Path(out).stem + f'_{name}' + Path(out).suffix)
        pic = a.picture or (None if a.quick else PICTURE)
        if pic and name != 'generated' and (len(sets) > 1 or not a.picture):
            pic = Path(pic).with_name(Path(pic).stem + f'_{name}' + Path(pic).suffix)
        run_set(a, argv, py, only, pipes, name, out, pic)


def make_set(name: str, n: int, data=None) -> Path:
    "The class-folder root of data set `name` with `n` images (made when missing, reused when there)."
    if name == 'photos':
        from timmdata.tools.photos import make_photo_set
        data = Path(data or f'/tmp/timmdata_photos_{n}')
        print(f'data: {SETS[name].format(n=n)} in {data}', flush=True)
        return make_photo_set(data, n=n) / 'train'
    from timmdata.tools.sample_data import make_sample_dataset
    classes = 10
    data = Path(data or f'/tmp/timmdata_peers_{n}')
    print(f'data: {SETS[name].format(n=n)} in {data}', flush=True)
    make_sample_dataset(data, n_train=max(1, n // classes), n_val=0, size=(500, 375), quality=90)
    return data / 'train'


def run_set(a, argv, py, only, pipes, set_name, out, pic):
    "Every contender on one data set (a.data), in alternating rounds; the table to `out`, the picture to `pic`."
    a.set_name = set_name
    avail = availability(py)
    skipped = {n: avail[n] for n in only if avail[n]}
    todo = [n for n in only if not avail[n]]
    for n, why in skipped.items(): print(f'skipped {n}: {why}', flush=True)
    notes = []
    if any(n.startswith('ffcv') for n in todo):
        p = subprocess.run([py, __file__, '--write-beton', '--data', str(a.data), '--workers', str(a.workers)],
                           capture_output=True, text=True)
        got = [l for l in p.stdout.splitlines() if l.startswith('BETON')]
        if not got:
            why = (p.stderr.strip().splitlines() or ['?'])[-1][:200]
            for n in [n for n in todo if n.startswith('ffcv')]: skipped[n] = f'writing the .beton failed: {why}'
            todo = [n for n in todo if not n.startswith('ffcv')]
        elif float(got[0].split()[1]): notes.append(f'FFCV .beton written in {float(got[0].split()[1]):.1f} s (not in its figures)')

    load = [load_avg()]
    runs, failed = [], {}
    t0 = time.time()
    for r in range(a.rounds):
        order = todo[r % len(todo):] + todo[:r % len(todo)] if todo else []  # rotate: nobody always runs first
        for pipe in pipes:
            for n in order:
                if n in failed: continue
                res, err = run_child(py, n, pipe, a)
                if err: failed[n] = f'{pipe}, round {r + 1}: {err}'; print(f'  {n} {pipe}: FAILED {err}', flush=True); continue
                runs.append(res)
                print(f'  round {r + 1} {pipe:<5} {n:<16} {statistics.median(res["rates"]):7.0f} img/s '
                      f'{statistics.median(res["cpu_ms"]):6.2f} CPU ms/img  first batch {res["first_batch_s"]:.1f} s', flush=True)
        load.append(load_avg())
        text = report(a, argv, py, only, runs, skipped, failed, notes, load, r + 1, t0)
        if out: save(out, text, runs, skipped, failed)  # after every round: a run cut short keeps what it measured
    print('\n' + text)
    if out: print(f'saved {out} (+ .json)')
    summary = summarise(runs)
    if pic and summary:
        plot(summary, pic, f'{a.images} images ({set_name}), batch {a.batch_size}, {a.workers} workers, shared '
             f'{os.cpu_count()}-core CPU (bars: median, dots: each round)'); print(f'picture: {pic}')


def report(a, argv, py, only, runs, skipped, failed, notes, load, rounds_done, t0) -> str:
    "The results file's text: what was run, on what, under which load, then the table and each contender's configuration."
    head = [f'timmdata vs peers, {time.strftime("%H:%M UTC", time.gmtime())}',
            f'command: {" ".join([os.path.relpath(py, ROOT)] + [str(x) for x in (argv if argv is not None else sys.argv)])}',
            f"peers' python: {os.path.relpath(py, ROOT)}; {versions(py)}",
            f'{SETS[getattr(a, "set_name", "generated")].format(n=a.images)}, batch {a.batch_size}, {a.workers} workers, '
            f'{rounds_done} of {a.rounds} alternating rounds done x ({a.epochs} timed epoch after 1 warm-up epoch), each '
            f'contender in its own process; train: RandomResizedCrop 224 + flip, no colour jitter; eval: resize 256 + '
            f'centre crop 224',
            f'machine: {os.cpu_count()} cores, SHARED with other jobs (load below); {gpu_note()}',
            'load (uptime before the run and after each round): ' + ' | '.join(load),
            f'run took {time.time() - t0:.0f} s so far'] + notes
    cfg = '\n'.join(f'  {n}: {CONTENDERS[n][1]}' for n in only)
    return '\n'.join(head) + '\n\n' + format_table(summarise(runs), skipped, failed) + '\n\nwhat each contender does:\n' + cfg + '\n'


def save(out, text, runs, skipped, failed):
    "The table to `out`, every child's result to `out` with .json (for the picture and the notebook)."
    Path(out).write_text(text)
    Path(out).with_suffix('.json').write_text(json.dumps(dict(title=text.splitlines()[0], runs=runs, skipped=skipped,
                                                              failed=failed, header=text.split('\n\n')[0]), indent=1))

if __name__ == '__main__':
    main()
