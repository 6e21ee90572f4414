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
"""
import argparse, json, os, resource, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

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


def child(a):
    "One library's loader for one recipe: a warm-up epoch, then `a.epochs` timed ones; prints one RESULT line of JSON (the epoch with the least CPU per image)."
    import psutil, torch
    kw = json.loads(a.kwargs)
    if a.lib == 'timmdata':
        from timmdata import create_dataset, create_loader
        ds = create_dataset('', root=a.data, is_training=True)
        ld = create_loader(ds, (3, 224, 224), a.batch_size, is_training=True, num_workers=a.workers, device='cpu',
                           persistent_workers=True, **kw)
    else:
        import timm.data
        fix_timm_posterize()
        ds = timm.data.create_dataset('', root=a.data, is_training=True)
        ld = timm.data.create_loader(ds, (3, 224, 224), a.batch_size, is_training=True, num_workers=a.workers,
                                     device=torch.device('cpu'), persistent_workers=True, **kw)
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
    ap.add_argument('--epochs', type=int, default=1, help='timed epochs per loader after the warm-up; the one with the '
                    'least CPU per image is reported (more than 1 steadies the figures on a shared machine)')
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
    recipes = [r.strip() for r in a.recipes.split(',') if r.strip()]
    bad = [r for r in recipes if r not in RECIPES]
    if bad:
        raise SystemExit(f'--recipes: unknown {", ".join(bad)}; choose from {", ".join(RECIPES)}')
    import timm, PIL, torch
    print(f'timm {timm.__version__}, Pillow {PIL.__version__}, torch {torch.__version__}; {os.cpu_count()} CPUs, '
          f'load average {os.getloadavg()[0]:.2f}')
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
