"""timm's training recipes (RandAugment, AugMix, three-augment, colour jitter, random erasing) on timmdata and timm, in one run.

For each recipe, `create_loader` is called with the same keywords on both libraries (2 worker processes by default,
224 px, batches of 64, the prefetcher's random erasing on the CPU), over the same class folders. Every loader runs in a
process of its own: it builds the dataset and the loader, runs one warm-up epoch (the workers start, the page cache
fills), then one timed epoch of every image (steady state; with --epochs N, the least disturbed of N: the one with the least
CPU per image); it reports images/s and the CPU seconds of its whole
process tree (the workers included) per image, and the CPU ratio (timm's CPU per image over timmdata's: the img/s
ratio on a machine with cores to spare, and the figure to read on a shared one, where img/s follows each process's share
of the CPUs). timmdata also runs each policy recipe without its policy (the same
keywords, `auto_augment=None`): the CPU per image of the recipe against it says what the policy costs.

timm's `rand-m9-mstd0.5-inc1` fails on Pillow >= 13 (`PosterizeIncreasing` at magnitude 9 posterizes to 0 bits, which
Pillow refuses: "bits must be between or equal to 1 and 8"); its child here runs it with that op fixed (0 bits: black,
as older Pillow gave, and as timmdata does), said in the output.

    python bench/bench_recipes.py                       # both sets (photographs and generated), 1,500 images each
    python bench/bench_recipes.py --sets generated --recipes rand,augmix
    python bench/bench_recipes.py --quick               # 300 images: to try it out, not for figures
    python bench/bench_recipes.py --epochs 3            # each loader's least disturbed of 3 timed epochs (a shared machine)
    python bench/bench_recipes.py --ops                 # the policies' ops per call, timm's and timmdata's
    python bench/bench_recipes.py | tee bench/results/recipes_DATE.txt

With `--encodings imagenet` (or `photos`): the photographs cut with that mix of encodings (`timmdata.tools.photos`:
`mix='imagenet'` has 3% progressive, 2% grayscale, 3% EXIF-rotated, 1% CMYK JPEGs and 0.1% PNGs named .JPEG), and the
two libraries measured in one process per recipe, their epochs alternating (who goes first alternates too, so a drift
of the machine's load hits both alike): one warm-up epoch each, dropped, then the median of `--epochs` (default 6)
timed epochs. Then the per-encoding cost table: for each encoding, the CPU per image of each library's decode-and-crop
path (the training crop and flip, no policy, in one process: its DataLoader with num_workers=0, one torch thread, the
same 64 crops encoded each way), against baseline JPEGs of the same crops, many passes, the encodings and libraries
interleaved; the same crops as denser baseline JPEGs (quality 98, 4:2:0 and 4:4:4 chroma: more bits per pixel, in no
mix) beside them. `--profile` adds the decoders' parts per encoding (whole decode, first row, last row: where the
entropy decoding shows) and cProfile's top functions of each path. `--denser` re-encodes the mixed set at quality 98,
each file keeping its encoding, for the recipes at more bits per pixel.

    python bench/bench_recipes.py --encodings imagenet                  # the four recipes, then the cost table
    python bench/bench_recipes.py --encodings imagenet --costs-only --profile
    python bench/bench_recipes.py --encodings imagenet --denser baseline_q98_444 --no-costs
"""
import argparse, json, os, resource, statistics, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # the timmdata of this tree, here as in the children (run_child's PYTHONPATH)

# name -> (create_loader keywords, keywords of the same recipe without its policy or None)
RECIPES = {
    'jitter': (dict(color_jitter=0.4, re_prob=0.25), None),
    'rand': (dict(auto_augment='rand-m9-mstd0.5', re_prob=0.25), dict(re_prob=0.25, color_jitter=None)),
    'augmix': (dict(auto_augment='augmix-m5-w4-d2', re_prob=0.25), dict(re_prob=0.25, color_jitter=None)),
    '3a': (dict(auto_augment='3a', color_jitter=0.3), dict(color_jitter=0.3)),
    # timm's train.py with its ImageNet recipe arguments (--aa rand-m9-mstd0.5-inc1 --reprob 0.25 --remode pixel)
    'train.py': (dict(auto_augment='rand-m9-mstd0.5-inc1', re_prob=0.25, re_mode='pixel', interpolation='random'),
                 dict(re_prob=0.25, re_mode='pixel', interpolation='random', color_jitter=None)),
}
SETS = {
    'photos': '{n} crops of real photographs at ImageNet sizes and encodings (timmdata.tools.photos)',
    'generated': "{n} generated 500x375 JPEGs (timmdata.tools.sample_data)",
}


def make_set(name: str, n: int) -> Path:
    "The class-folder root of set `name` (made when missing, reused when there): as bench/bench_peers.py makes it."
    if name == 'photos':
        from timmdata.tools.photos import make_photo_set
        return make_photo_set(Path(f'/tmp/timmdata_photos_{n}'), n=n) / 'train'
    from timmdata.tools.sample_data import make_sample_dataset
    data = Path(f'/tmp/timmdata_peers_{n}')
    make_sample_dataset(data, n_train=max(1, n // 10), n_val=0, size=(500, 375), quality=90)
    return data / 'train'


def fix_timm_posterize():
    "timm's posterize with 0 bits kept gives black (Pillow >= 13 refuses 0 bits); every other case is timm's own."
    from timm.data import auto_augment as taa
    orig = taa.posterize

    def posterize(img, bits_to_keep, **kw):
        if bits_to_keep <= 0:
            return img.point([0] * 256 * len(img.getbands()))
        return orig(img, bits_to_keep, **kw)

    taa.posterize = posterize
    for k, v in list(taa.NAME_TO_OP.items()):
        if v is orig:
            taa.NAME_TO_OP[k] = posterize


def tree_cpu(proc) -> float:
    "CPU seconds of `proc` (a psutil.Process) and its live descendants, plus its reaped children's."
    tot = 0.0
    for p in [proc] + proc.children(recursive=True):
        try:
            t = p.cpu_times(); tot += t.user + t.system
        except Exception:
            pass
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return tot + r.ru_utime + r.ru_stime


def build_loader(lib: str, data, kw: dict, batch_size: int, workers: int):
    "(dataset, loader): `lib`'s create_dataset and create_loader over the class folders `data`, the recipe's keywords `kw`."
    import torch
    if lib == 'timmdata':
        from timmdata import create_dataset, create_loader
        ds = create_dataset('', root=str(data), is_training=True)
        return ds, create_loader(ds, (3, 224, 224), batch_size, is_training=True, num_workers=workers, device='cpu',
                                 persistent_workers=workers > 0, **kw)
    import timm.data
    fix_timm_posterize()
    ds = timm.data.create_dataset('', root=str(data), is_training=True)
    return ds, timm.data.create_loader(ds, (3, 224, 224), batch_size, is_training=True, num_workers=workers,
                                       device=torch.device('cpu'), persistent_workers=workers > 0, **kw)


def child(a):
    "One library's loader for one recipe: a warm-up epoch, then `a.epochs` timed ones; prints one RESULT line of JSON (the epoch with the least CPU per image)."
    import psutil
    kw = json.loads(a.kwargs)
    if a.lib == 'both':
        return both_child(a, kw)
    ds, ld = build_loader(a.lib, a.data, kw, a.batch_size, a.workers)
    me = psutil.Process()
    for _ in ld:  # warm-up epoch
        pass
    best = None
    for _ in range(a.epochs):  # timed epochs: the one with the least CPU per image (the least disturbed on a shared machine)
        c0, t0, n = tree_cpu(me), time.perf_counter(), 0
        for x, y in ld:
            n += len(y)
        dt, cpu = time.perf_counter() - t0, tree_cpu(me) - c0
        got = dict(images=n, rate=n / dt, cpu_ms=1000 * cpu / n, shape=list(x.shape))
        best = got if best is None or got['cpu_ms'] < best['cpu_ms'] else best
    print('RESULT ' + json.dumps(best), flush=True)


ENC_RECIPES = 'rand,jitter,augmix,3a'  # the recipes --encodings runs unless --recipes says otherwise
COST_KW = dict(color_jitter=None)  # the cost table's path: the training crop and flip, nothing after them
# the same crops as baseline JPEGs with more bits per pixel (the photographs' crops are smooth: 1-2 bits per pixel at
# qualities 75-95, where a set of web photographs such as ImageNet's averages several): not in any mix, for comparison
DENSER = {'baseline_q98': dict(quality=98, subsampling=2), 'baseline_q98_444': dict(quality=98, subsampling=0)}


def both_child(a, kw: dict):
    "Both libraries' loaders for one recipe in this process, their epochs alternating (`_common.alternate_epochs`): one warm-up epoch each, dropped, then `a.epochs` timed ones; one RESULT line of JSON with each library's images/s and CPU ms per image (this process and that loader's workers) of every timed epoch."
    sys.path.insert(0, str(HERE))
    from _common import alternate_epochs
    loaders = {lib: build_loader(lib, a.data, kw, a.batch_size, a.workers) for lib in ('timm', 'timmdata')}
    cpu = {}
    rates = alternate_epochs(loaders, a.epochs, cpu)
    print('RESULT ' + json.dumps(dict(rates=rates, cpu_ms=cpu, images=len(loaders['timm'][0]))), flush=True)


def make_mixed_set(mix: str, n: int) -> Path:
    "The class-folder root of `n` photographs cut with the encodings' mix `mix` (made when missing, reused when there)."
    from timmdata.tools.photos import make_photo_set
    return make_photo_set(Path(f'/tmp/timmdata_photos_{mix}_{n}'), n=n, mix=mix) / 'train'


def make_denser_set(data: Path, name: str) -> Path:
    "`data` (a photographic set's train folder) re-encoded with DENSER[name]'s quality and chroma subsampling, each file keeping its encoding (progressive, grayscale, CMYK, EXIF orientation; PNGs copied): made once."
    from PIL import Image
    from timmdata.tools.photos import photo_encoding
    root = data.parent.parent / f'{data.parent.name}_{name}'
    if (root / 'made.json').is_file():
        return root / 'train'
    opts = DENSER[name]
    for f in sorted(data.rglob('*.JPEG')):
        out = root / 'train' / f.relative_to(data)
        out.parent.mkdir(parents=True, exist_ok=True)
        kind = photo_encoding(f)
        if kind == 'png':
            out.write_bytes(f.read_bytes())
            continue
        with Image.open(f) as im:
            im.load()
            extra = dict(exif=im.info['exif']) if 'exif' in im.info else {}
            im.save(out, 'JPEG', progressive=kind == 'progressive', **opts, **extra)
        if photo_encoding(out) != kind:
            raise RuntimeError(f'{out}: re-encoded as {photo_encoding(out)}, not {kind}')
    (root / 'made.json').write_text(json.dumps(dict(source=str(data), opts=opts)))
    return root / 'train'


def make_kind_set(k: int) -> Path:
    "Root of k photographs in every encoding: <root>/<encoding>/c000/k_<j>.JPEG is crop j at the same size and quality in each (made once)."
    from timmdata.tools.photos import PHOTO_ENCODINGS, PHOTO_SHAPES, cut_photo, encode_photo, fetch_photo_sources

    root = Path(f'/tmp/timmdata_kinds_{k}')
    made = dict(k=k, denser=DENSER, kinds=list(PHOTO_ENCODINGS))  # a set made before a kind was added is made again
    if (root / 'made.json').is_file() and json.loads((root / 'made.json').read_text()) == made:
        return root
    import numpy as np
    from PIL import Image
    sources = fetch_photo_sources(Path.home() / '.cache' / 'timmdata' / 'photo_packages')
    for kind in (*PHOTO_ENCODINGS, *DENSER):
        (root / kind / 'c000').mkdir(parents=True, exist_ok=True)
    for si, path in enumerate(sources):  # one source decoded at a time
        js = range(si, k, len(sources))
        if not js:
            continue
        with Image.open(path) as im:
            src = im.convert('RGB')
        for j in js:  # ImageNet's common sizes in turn, qualities 75-95
            img = cut_photo(src, PHOTO_SHAPES[j % len(PHOTO_SHAPES)], np.random.default_rng([j, 62]))
            for kind in PHOTO_ENCODINGS:
                (root / kind / 'c000' / f'k_{j:04d}.JPEG').write_bytes(encode_photo(img, kind, 75 + (7 * j) % 21))
            for kind, opts in DENSER.items():
                img.save(root / kind / 'c000' / f'k_{j:04d}.JPEG', 'JPEG', **opts)
    (root / 'made.json').write_text(json.dumps(made))
    return root


def photo_size(f) -> tuple:
    "(width, height) of an image file as stored."
    from PIL import Image
    with Image.open(f) as im:
        return im.size


def seed_all(s: int):
    "The global generators (timm's crops, both samplers' shuffles) seeded alike before each pass: the same boxes for every encoding."
    import random
    import numpy as np
    import torch
    random.seed(s); np.random.seed(s); torch.manual_seed(s)


def encoding_costs(a, shares: dict):
    "The per-encoding cost table (module docstring); `shares`: the mix's {encoding: share}, for the mix's average."
    import torch
    from timmdata.tools.photos import PHOTO_ENCODINGS
    torch.set_num_threads(1)
    root = make_kind_set(a.cost_images)
    libs = ('timmdata', 'timm')
    bs = min(16, a.cost_images)  # training loaders drop a last partial batch
    kinds = (*PHOTO_ENCODINGS, *DENSER)
    loaders = {(lib, kind): build_loader(lib, root / kind, COST_KW, bs, 0)[1].loader  # the DataLoader: uint8 batches
               for lib in libs for kind in kinds}
    ms, keys = {key: [] for key in loaders}, list(loaders)
    for rep in range(a.cost_passes + 1):  # pass 0 warms up (page cache, first-call costs) and is dropped
        for key in keys if rep % 2 == 0 else keys[::-1]:
            seed_all(rep)
            t0, n = time.process_time(), 0
            for x, y in loaders[key]:
                n += len(y)
            if rep:
                ms[key].append((time.process_time() - t0) / n * 1e3)
    med = {key: statistics.median(v) for key, v in ms.items()}
    sizes, bpp = {}, {}
    for kind in kinds:
        files = sorted((root / kind / 'c000').iterdir())
        sizes[kind] = sum(f.stat().st_size for f in files) / len(files) / 1e3
        bpp[kind] = 8e3 * sizes[kind] * len(files) / sum(w * h for w, h in (photo_size(f) for f in files))
    print('\n## What each encoding costs: the decode-and-crop path, CPU ms per image, one process\n')
    print(f"{a.cost_images} crops of the photographs at ImageNet's common sizes (500x375, 500x333, 375x500, 333x500, "
          f'500x500), each encoded every way at the same quality (75-95); both libraries\' training loader '
          f'(RandomResizedCrop 224 and flip, `color_jitter=None`, no policy, no erasing) with num_workers=0 and one '
          f'torch thread, its DataLoader alone (uint8 batches of {bs}: read, decode, crop, resize, flip, collate); the '
          f'same boxes for every encoding (the generators seeded alike per pass); median of {a.cost_passes} passes '
          f'after a warm-up, the encodings and libraries interleaved. Load average {os.getloadavg()[0]:.2f}.\n')
    print('| encoding | KB/file | bits/pixel | timmdata ms/img | vs baseline | timm ms/img | vs baseline | timm / timmdata |')
    print('| --- | --- | --- | --- | --- | --- | --- | --- |')
    for kind in kinds:
        d, t = med['timmdata', kind], med['timm', kind]
        label = kind if kind in PHOTO_ENCODINGS else f"{kind} (quality 98, {'4:4:4' if DENSER[kind]['subsampling'] == 0 else '4:2:0'}; in no mix)"
        print(f"| {label} | {sizes[kind]:.0f} | {bpp[kind]:.2f} | {d:.3f} | {d / med['timmdata', 'baseline']:.2f}x | "
              f"{t:.3f} | {t / med['timm', 'baseline']:.2f}x | {t / d:.2f}x |")
    rest = 1 - sum(shares.values())
    avg = {lib: rest * med[lib, 'baseline'] + sum(s * med[lib, k] for k, s in shares.items()) for lib in libs}
    r0, r1 = med['timm', 'baseline'] / med['timmdata', 'baseline'], avg['timm'] / avg['timmdata']
    print(f"\nOver the mix ({', '.join(f'{k} {s:.1%}' for k, s in shares.items())}, the rest baseline): timmdata "
          f"{avg['timmdata']:.3f} ms/img ({avg['timmdata'] / med['timmdata', 'baseline'] - 1:+.1%} against all "
          f"baseline), timm {avg['timm']:.3f} ({avg['timm'] / med['timm', 'baseline'] - 1:+.1%}); this path's ratio "
          f'timm / timmdata {r0:.2f}x on baseline JPEGs, {r1:.2f}x over the mix.')
    per = {k: ' '.join(f'{x:.2f}' for x in ms[k]) for k in keys}
    print('\nEvery pass (ms/img): ' + '; '.join(f'{lib} {kind}: {per[lib, kind]}' for lib, kind in keys))
    if a.profile:
        decode_parts(root, a.profile_passes * 3)
        profile_paths(loaders, a.profile_passes)


def decode_parts(root: Path, reps: int):
    "Per encoding, the decoders' parts on the cost table's files (CPU ms per image, median of `reps` passes): where a kind's time goes inside the decode."
    import io
    from PIL import Image
    import torch
    from torchvision.transforms import InterpolationMode
    from timmdata.pixels import decode
    from timmdata.pixels.decode import EncodedJpeg, decode_image
    from timmdata.pixels.resample import resize_box
    from timmdata.tools.photos import PHOTO_ENCODINGS
    nat = decode.NATIVE.module

    def tm(f, items):
        runs = []
        for _ in range(reps):
            t = time.process_time()
            for it in items:
                f(it)
            runs.append((time.process_time() - t) / len(items) * 1e3)
        return statistics.median(runs)

    print(f'\n## Inside the decode: its parts per encoding (CPU ms per image, one thread, median of {reps} passes)\n')
    print('native: timmdata\'s libjpeg-turbo calls (`decode_crop` of the whole image; of its first row only: what '
          'comes before any pixel, for a progressive JPEG the entropy decoding of every scan; of its last row only: the '
          'entropy decoding of every row above it, without their inverse DCT); PIL: `Image.open(...).load()` in the '
          "file's own mode, and `.convert('RGB')` after it; decode_image: timmdata's whole-image decoder, as the "
          'dataset calls it for a JPEG that is not handed over undecoded.\n')
    print('| encoding | native whole | native first row | native last row | PIL load | PIL convert to RGB | decode_image |')
    print('| --- | --- | --- | --- | --- | --- | --- |')
    for kind in (*PHOTO_ENCODINGS, *DENSER):
        files = [f.read_bytes() for f in sorted((root / kind / 'c000').iterdir())]
        cells = ['-'] * 3
        if kind not in ('cmyk', 'png'):
            hw = [nat.header(d)[:2] for d in files]
            items = list(zip(files, hw))
            cells = [f'{tm(lambda it: nat.decode_crop(it[0], y(it[1]), 0, 1 if y(it[1]) or one else it[1][0], it[1][1]), items):.3f}'
                     for y, one in ((lambda hw: 0, False), (lambda hw: 0, True), (lambda hw: hw[0] - 1, True))]
        load = tm(lambda d: Image.open(io.BytesIO(d)).load(), files)
        loaded = [Image.open(io.BytesIO(d)) for d in files]
        for im in loaded:
            im.load()
        conv = tm(lambda im: im.convert('RGB'), loaded)  # of an RGB image: a copy
        whole = tm(lambda d: decode_image(d, 'RGB', to_tensor=True), files)
        print(f'| {kind} | ' + ' | '.join(cells) + f' | {load:.3f} | {conv:.3f} | {whole:.3f} |')
    # grayscale JPEGs are decoded whole (`encoded_jpeg` takes colour JPEGs only); libjpeg-turbo's crop decode gives them
    # as RGB too: the same boxes both ways, the bytes compared
    files, rng = [f.read_bytes() for f in sorted((root / 'grayscale' / 'c000').iterdir())], __import__('random').Random(0)
    jobs = []
    for d in files:
        h, w = nat.header(d)[:2]
        for _ in range(4):
            bh, bw = rng.randint(40, h), rng.randint(40, w)
            jobs.append((d, h, w, (rng.randint(0, h - bh), rng.randint(0, w - bw), bh, bw), rng.random() < 0.5))
    now = lambda j: resize_box(decode_image(j[0], 'RGB', to_tensor=True), j[3], (224, 224), InterpolationMode.BILINEAR, flip=j[4])
    crop = lambda j: resize_box(EncodedJpeg(j[0], j[1], j[2]), j[3], (224, 224), InterpolationMode.BILINEAR, flip=j[4])
    same = sum(torch.equal(now(j), crop(j)) for j in jobs)
    print(f'\nGrayscale JPEGs, {len(jobs)} random boxes resized to 224 (bilinear), flipped or not: decoded whole then '
          f'cropped and resized (timmdata now) {tm(now, jobs):.3f} ms; the box decoded by libjpeg-turbo as RGB and '
          f'resized in one call (`EncodedJpeg` of the grayscale file: the colour JPEGs\' path) {tm(crop, jobs):.3f} ms; '
          f'the same bytes in {same} of {len(jobs)} boxes.')


def profile_paths(loaders: dict, passes: int, top: int = 10):
    "cProfile's top functions by own time of each (library, encoding) path: per image, over `passes` passes."
    import cProfile, pstats
    print(f'\n## Where each path\'s time goes (cProfile, {passes} passes; own time and with callees, per image)\n')
    for (lib, kind), loader in loaders.items():
        pr, n = cProfile.Profile(), 0
        for rep in range(passes):
            seed_all(100 + rep)
            pr.enable()
            for x, y in loader:
                n += len(y)
            pr.disable()
        st = pstats.Stats(pr).stats
        tot = sum(v[2] for v in st.values())
        print(f'{lib}, {kind}: {1e3 * tot / n:.3f} ms/img under the profiler')
        for (file, line, fn), (cc, nc, tt, ct, _) in sorted(st.items(), key=lambda kv: -kv[1][2])[:top]:
            where = fn if file == '~' else f'{"/".join(Path(file).parts[-2:])}:{line}({fn})'
            print(f'  {1e3 * tt / n:7.3f} own {1e3 * ct / n:7.3f} cum {nc / n:6.2f} calls/img  {where}')
        print()


def run_encodings(a, recipes: list, n: int):
    "--encodings: the recipes on the mixed set, the libraries interleaved per epoch; then the per-encoding cost table."
    from timmdata.tools.photos import photo_mix
    shares = photo_mix(a.encodings)
    if not a.costs_only:
        data = make_mixed_set(a.encodings, n)
        counts = json.loads((data.parent / 'photo_set.json').read_text())['counts']
        dense = ''
        if a.denser:
            data, o = make_denser_set(data, a.denser), DENSER[a.denser]
            dense = (f", every file re-encoded at quality {o['quality']} with "
                     f"{'4:4:4' if o['subsampling'] == 0 else '4:2:0'} chroma (PNGs as they are)")
        files = sorted(data.rglob('*.JPEG'))
        kb, px = sum(f.stat().st_size for f in files) / 1e3, sum(w * h for w, h in map(photo_size, files))
        print(f"\n## {n} photographs with the encodings of mix='{a.encodings}' (timmdata.tools.photos): "
              + ', '.join(f'{k} {v}' for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) + dense
              + f'; {kb / len(files):.0f} KB a file, {8e3 * kb / px:.2f} bits per pixel\n')
        print(f'Per recipe, one process holds both loaders (create_loader(..., num_workers={a.workers}, '
              f'persistent_workers=True), batches of {a.batch_size}, {n} images an epoch); their epochs alternate, who '
              f'goes first alternating too; one warm-up epoch each (dropped: steady state), then the median of '
              f'{a.epochs} timed epochs. CPU: the process and that loader\'s workers. Paired: the median of the '
              f'per-round ratios. Load average {os.getloadavg()[0]:.2f}.\n')
        print('| recipe | timm img/s | timmdata img/s | ratio | paired | timm CPU ms/img | timmdata CPU ms/img | '
              'CPU ratio | timed epochs img/s: timm; timmdata |')
        print('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
        for r in recipes:
            kw = RECIPES[r][0]
            got = run_child(a, 'both', data, kw)
            rt, rd = got['rates']['timm'], got['rates']['timmdata']
            ct, cd = (statistics.median(got['cpu_ms'][lib]) for lib in ('timm', 'timmdata'))
            mt, md = statistics.median(rt), statistics.median(rd)
            paired = statistics.median(d / t for d, t in zip(rd, rt, strict=True))
            print(f"| `{kw_str(kw)}` | {mt:,.0f} | {md:,.0f} | {md / mt:.2f}x | {paired:.2f}x | {ct:.2f} | {cd:.2f} | "
                  f"{ct / cd:.2f}x | {' '.join(f'{x:.0f}' for x in rt)}; {' '.join(f'{x:.0f}' for x in rd)} |", flush=True)
    if not a.no_costs:
        encoding_costs(a, shares)


def ops(rounds: int = 3, n: int = 40):
    "Per call, on one thread: each policy op (magnitude 9, always applied) and each policy, timm's and timmdata's, on a 224 px image (best of `rounds`)."
    import random
    import numpy as np
    from timm.data import auto_augment as ta
    from timmdata import auto_augment as aa
    from timmdata.pixels.augment_ops import native_kernels
    from timmdata.config import Draws
    from timmdata.tools.sample_data import make_sample_image
    fix_timm_posterize()
    img = make_sample_image(3, seed=1, size=(224, 224))
    hp = dict(translate_const=100, img_mean=(124, 116, 104), translate_pct=0.3)

    def tm(f):
        best = 1e9
        for _ in range(rounds):
            t = time.process_time()
            for k in range(n):
                f(k)
            best = min(best, (time.process_time() - t) / n * 1e3)
        return best

    def seeded(t):
        return lambda k: (random.seed(k), np.random.seed(k), t(img))

    px = np.asarray(img).copy()  # the crop's pixels as the loader hands them to a policy (a uint8 HWC array)
    print(f'load average {os.getloadavg()[0]:.2f}; timmdata with the kernels: {native_kernels() is not None}\n')
    print('| op or policy (224 px; ops at magnitude 9, always applied; filter drawn per call) | timm ms | timmdata ms '
          '(PIL image in and out) | ratio | timmdata ms (pixels: the loader\'s path) | ratio |')
    print('| --- | --- | --- | --- | --- | --- |')

    def row(label, t, f):
        o, p = tm(lambda k: f(img, Draws(k))), tm(lambda k: f(px, Draws(k)))
        print(f'| {label} | {t:.3f} | {o:.3f} | {t / o:.2f}x | {p:.3f} | {t / p:.2f}x |', flush=True)

    for name in ['Rotate', 'ShearX', 'ShearY', 'TranslateXRel', 'TranslateYRel', 'Sharpness', 'Equalize', 'AutoContrast',
                 'Color', 'Contrast', 'Brightness', 'Solarize', 'Posterize', 'SolarizeAdd', 'Invert', 'Desaturate',
                 'GaussianBlurRand']:
        t = tm(seeded(ta.AugmentOp(name, prob=1.0, magnitude=9, hparams=hp)))
        row(name, t, aa.AugmentOp(name, prob=1.0, magnitude=9, hparams=hp))
    for s in ['rand-m9-mstd0.5', 'rand-m9-mstd0.5-inc1', 'augmix-m5-w4-d2', '3a']:
        build = 'rand_augment_transform' if s.startswith('rand') else 'augment_and_mix_transform' if s.startswith('aug') else 'auto_augment_transform'
        t = tm(seeded(getattr(ta, build)(s, dict(hp))))
        row(f'`{s}`', t, getattr(aa, build)(s, dict(hp)))


def run_child(a, lib, data, kw) -> dict:
    "The RESULT of a child process: `lib`'s loader ('both': the two, interleaved) for the recipe keywords `kw` over `data`."
    cmd = [sys.executable, __file__, '--child', lib, '--data', str(data), '--kwargs', json.dumps(kw),
           '--workers', str(a.workers), '--batch-size', str(a.batch_size), '--epochs', str(a.epochs)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + os.environ.get('PYTHONPATH', '').split(os.pathsep)))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
    for line in p.stdout.splitlines():
        if line.startswith('RESULT '):
            return json.loads(line[7:])
    raise RuntimeError(f'{lib} {kw}: no result (exit {p.returncode}): {p.stderr.strip()[-800:]}')


def kw_str(kw) -> str:
    return ', '.join(f'{k}={v!r}' for k, v in kw.items())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--sets', default='photos,generated', help='photos, generated, or both (default)')
    ap.add_argument('--recipes', default=','.join(RECIPES), help='comma-separated, from: ' + ', '.join(RECIPES))
    ap.add_argument('--images', type=int, default=1500)
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--quick', action='store_true', help='300 images (to try it out; not for figures)')
    ap.add_argument('--epochs', type=int, default=None, help='timed epochs per loader after the warm-up; the one with the '
                    'least CPU per image is reported (more than 1 steadies the figures on a shared machine); with '
                    '--encodings, the median (default 6 there, 1 here)')
    ap.add_argument('--encodings', default=None, choices=['photos', 'imagenet'],
                    help="run over photographs with this mix of encodings (timmdata.tools.photos' mix=), the two "
                    'libraries interleaved epoch by epoch, then the per-encoding cost table')
    ap.add_argument('--denser', default=None, choices=['baseline_q98', 'baseline_q98_444'],
                    help='with --encodings: the set re-encoded at quality 98 (4:2:0 or 4:4:4 chroma), more bits per '
                    'pixel, each file keeping its encoding')
    ap.add_argument('--costs-only', action='store_true', help='with --encodings: only the per-encoding cost table')
    ap.add_argument('--no-costs', action='store_true', help='with --encodings: no per-encoding cost table')
    ap.add_argument('--cost-images', type=int, default=64, help='crops per encoding in the cost table')
    ap.add_argument('--cost-passes', type=int, default=10, help='timed passes over them per encoding and library')
    ap.add_argument('--profile', action='store_true', help='with --encodings: cProfile of each path of the cost table')
    ap.add_argument('--profile-passes', type=int, default=3)
    ap.add_argument('--ops', action='store_true', help='only the ops and policies per call, on one thread, timm against timmdata')
    ap.add_argument('--timeout', type=int, default=900, help='seconds one child may take')
    ap.add_argument('--child', default=None, help=argparse.SUPPRESS)
    ap.add_argument('--data', default=None, help=argparse.SUPPRESS)
    ap.add_argument('--kwargs', default='{}', help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        a.lib = a.child
        return child(a)
    if a.ops:
        return ops()
    n = 300 if a.quick else a.images
    if a.epochs is None:
        a.epochs = 6 if a.encodings else 1
    if a.encodings is None and (a.costs_only or a.no_costs or a.profile or a.denser):
        raise SystemExit('--costs-only, --no-costs, --profile and --denser go with --encodings (e.g. --encodings imagenet)')
    if a.encodings and a.recipes == ap.get_default('recipes'):
        a.recipes = ENC_RECIPES
    recipes = [r.strip() for r in a.recipes.split(',') if r.strip()]
    bad = [r for r in recipes if r not in RECIPES]
    if bad:
        raise SystemExit(f'--recipes: unknown {", ".join(bad)}; choose from {", ".join(RECIPES)}')
    import timm, PIL, torch
    print(f'timm {timm.__version__}, Pillow {PIL.__version__}, torch {torch.__version__}; {os.cpu_count()} CPUs, '
          f'load average {os.getloadavg()[0]:.2f}')
    if a.encodings:
        from timmdata.pixels.decode import decoder_name
        print(f'timmdata decoders: {decoder_name()}. timm runs rand-m9-mstd0.5-inc1 with its posterize fixed for 0 bits '
              '(Pillow >= 13 refuses them).')
        run_encodings(a, recipes, n)
        print(f'\nload average at the end {os.getloadavg()[0]:.2f}')
        return
    print(f'create_loader((3, 224, 224), batch_size={a.batch_size}, is_training=True, num_workers={a.workers}, '
          "device='cpu', persistent_workers=True, **recipe) on both libraries; each loader in a process of its own: "
          f'one warm-up epoch, then {a.epochs} timed epoch(s) of every image (steady state; of several, the one with the '
          'least CPU per image); CPU: the process tree, workers included. timm runs rand-m9-mstd0.5-inc1 with its posterize fixed for 0 bits (Pillow >= 13 refuses them).')
    for s in [s.strip() for s in a.sets.split(',') if s.strip()]:
        data = make_set(s, n)
        print(f'\n## {SETS[s].format(n=n)}\n')
        print('| recipe | timmdata img/s | timm img/s | ratio | timmdata CPU ms/img | timm CPU ms/img | CPU ratio (timm / '
              'timmdata) | timmdata without the policy CPU ms/img | CPU with / without the policy |')
        print('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
        for r in recipes:
            kw, base = RECIPES[r]
            ours, theirs = run_child(a, 'timmdata', data, kw), run_child(a, 'timm', data, kw)
            nopol = run_child(a, 'timmdata', data, base) if base is not None else None
            cols = [f'`{kw_str(kw)}`', f"{ours['rate']:,.0f}", f"{theirs['rate']:,.0f}",
                    f"{ours['rate'] / theirs['rate']:.2f}x", f"{ours['cpu_ms']:.2f}", f"{theirs['cpu_ms']:.2f}",
                    f"{theirs['cpu_ms'] / ours['cpu_ms']:.2f}x", f"{nopol['cpu_ms']:.2f}" if nopol else '-',
                    f"{ours['cpu_ms'] / nopol['cpu_ms']:.2f}x" if nopol else '-']
            print('| ' + ' | '.join(cols) + ' |', flush=True)
    print(f'\nload average at the end {os.getloadavg()[0]:.2f}')


if __name__ == '__main__':
    main()
