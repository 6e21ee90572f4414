"""The host's share of the device-decode path, per batch: the Python each stage thread runs (holding the GIL, which the
training thread then waits for) with the device's own work taken out. On the CPU, with CPU tensors:

- bitstreams: the batch's JPEG bytes as one view per image (`gpu_decode.bitstreams`), no copy;
- crop_resize_flip: its checks and bookkeeping for a batch of 256 decoded images and their plans, the taps given (as
  the loader's TapCache gives them), the resize kernel's launches replaced by a call that does nothing, so what is
  timed is the host's part: the images' concatenation included (small images here: 60x80);
- jitter_affine: the colour jitter's map and shift for 256 images (their means given);
- augment_batch: timm's RandAugment (rand-m9-mstd0.5-inc1, filters drawn per op as train.py's `random`) on 256
  images of 8x8 (their draws given), so that its Python and its operations' dispatch are what is timed, not their
  arithmetic: with torch's operations (the CPU's path), and as on a GPU with Triton (`kernel=True`: the kernels'
  launches replaced by a call that does nothing: the layer kernels, or on an older commit the colour and warp
  kernels), and that once more without the tables made from the pixels (autocontrast's, equalize's, contrast's:
  `point_luts` with `histogram=False`; the layer kernels make them on the device, so the row is theirs again);
- augmix_batch: timm's AugMix (augmix-m3-w3: three chains of one to three ops, mixed) the same two ways;
- device step: the whole step of a batch (`DeviceDecodeStep.feed`: bitstreams, decode, crop-resize-flip, RandAugment
  or AugMix, normalisation), as on a GPU with Triton: the decoder and the kernels' launches faked, the rest of its torch
  operations run on CPU tensors (small, 48x48: their arithmetic is in the time, not in the calls).

Prints the median microseconds a batch over `--rounds` rounds of `--batches` batches, after a warm-up, and the torch
calls a batch makes (functions and tensor methods from Python, attribute reads such as a tensor's shape apart,
counted once with a `TorchFunctionMode`: each is a dispatch, and on a GPU most are a kernel launch or a copy; the count
does not vary from run to run, the time does). Run it on two commits to compare them (the figures in CHANGELOG.md come
from such pairs):

    python bench/bench_device_host.py
"""

import argparse
import statistics

import numpy as np
import torch
from _common import timed_rounds
from torch.overrides import TorchFunctionMode


class Calls(TorchFunctionMode):
    "Counts the torch functions and tensor methods called from Python while it is on; attribute reads (a tensor's shape, dtype, device) apart."

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += getattr(func, '__name__', '') != '__get__'
        return func(*args, **(kwargs or {}))


def calls(fn) -> int:
    "The torch calls one `fn()` makes."
    with Calls() as c:
        fn()
    return c.n


def without_pixel_tables(fn, batch_augment):
    "`fn` run with `batch_augment.point_luts` making no table from the pixels (those rows keep the identity)."

    def run():
        keep = batch_augment.point_luts
        batch_augment.point_luts = lambda *a, **k: keep(*a, **{**k, 'histogram': False})
        try:
            return fn()
        finally:
            batch_augment.point_luts = keep

    return run


def timed(fn, batches: int, rounds: int) -> float:
    "Median microseconds of one call over `rounds` rounds of `batches` calls, after a warm-up round."
    timed_rounds(fn, 1, batches)
    return statistics.median(timed_rounds(fn, rounds, batches)) / batches * 1e6


def device_steps(imgs: list, n: int) -> dict:
    """The whole device step of a batch (`DeviceDecodeStep.feed`: bitstreams, decode, crop-resize-flip, RandAugment or
    AugMix, the batch ops), on CPU tensors, as on a GPU with Triton: the decoder faked (it hands back `imgs`), the
    kernels' launches faked by the caller. Its torch operations on the 48x48 batch do run, on the CPU: the time is the
    host's and that arithmetic; the calls are the launches a GPU would get. An empty dict on a commit without them."""
    try:
        from timmdata.auto_augment import AugMixAugment
        from timmdata.config import Draws
        from timmdata.engine import gpu_decode
        from timmdata.engine.device_plan import DeviceDecodeTransform, device_decode_collate
        from timmdata.engine.gpu_decode import DeviceDecodeStep, device_rand_augment
        from timmdata.engine.prefetch import BatchOps
        from timmdata.pixels.batch_augment import encode_augmix, encode_draws
    except ImportError:
        return {}
    gpu_decode.decode_jpegs = lambda srcs, device: (imgs[: len(srcs)], [])  # the decoder's work is the device's

    def step(policy):
        ra = None if policy is None else device_rand_augment(policy, (48, 48), (0.485, 0.456, 0.406), 'random')
        tf = DeviceDecodeTransform(48, is_training=True, interpolation='random', rand_augment=ra)
        samples = []
        for i, im in enumerate(imgs):
            d = Draws(i)
            p, aug = tf.plan(im, d), ()
            if isinstance(ra, AugMixAugment):
                aug = encode_augmix(ra, ra.draw(d))
            elif ra is not None:
                aug = (encode_draws([s for _, s in ra.draw(d)]),)
            samples.append(((b'\xff\xd8' + bytes(100), p, 0, *aug), i % 10))  # JPEG bytes the faked decoder ignores
        b = device_decode_collate(samples)
        s = DeviceDecodeStep((48, 48), BatchOps(device='cpu'), aug_fill=(124, 116, 104))
        s.kernels = True  # the GPU's path: Triton's kernels (their launches faked)
        return lambda: s.feed(b, key=1)

    return {
        'device step, crop+flip': step(None),
        'device step, RandAugment': step('rand-m9-mstd0.5-inc1'),
        'device step, AugMix': step('augmix-m3-w3'),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--batch', type=int, default=256)
    ap.add_argument('--batches', type=int, default=50, help='calls a round')
    ap.add_argument('--rounds', type=int, default=7)
    a = ap.parse_args(argv)
    from timmdata.config import Draws, jitter_ranges
    from timmdata.engine.gpu_decode import DeviceDecodeTransform, bitstreams
    from timmdata.pixels import batch_augment, resize_kernel, warp_kernel
    from timmdata.pixels.batch_resize import TapCache, crop_resize_flip
    from timmdata.engine.gpu_decode import device_rand_augment
    from timmdata.pixels.batch_augment import augment_batch, augmix_batch, augmix_tables, encode_draws
    from timmdata.pixels.jitter import jitter_affine, sample_jitter

    class NoLaunch:  # the kernel's launch, doing nothing: the host's part alone is timed
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    resize_kernel._KERNELS[True] = NoLaunch()
    warp_kernel._KERNELS[True] = NoLaunch()
    kernels = getattr(batch_augment, '_COLOUR_KERNELS', None)  # a commit with the colour kernel (before the layers')
    if kernels is not None:
        kernels[True] = NoLaunch()
    try:  # the layer kernels: stats, tables and apply
        from timmdata.pixels import augment_kernel

        for name in ('_stats', '_tables', '_apply', '_mix'):
            augment_kernel._KERNELS[name] = {True: NoLaunch()}
    except ImportError:  # a commit before them
        pass
    n, g = a.batch, torch.Generator().manual_seed(0)
    imgs = [torch.randint(0, 256, (3, 60, 80) if i % 2 else (3, 80, 60), dtype=torch.uint8, generator=g) for i in range(n)]
    tf = DeviceDecodeTransform(48, is_training=True, interpolation='random')
    plans = np.array([tf.plan(im, Draws(i)) for i, im in enumerate(imgs)], dtype=np.int64)
    taps = TapCache()(plans, (48, 48))
    out, rows = torch.empty(n, 3, 48, 48, dtype=torch.uint8), list(range(n))
    packed = {'data': torch.zeros(n * 37_000, dtype=torch.uint8), 'offsets': torch.arange(0, n * 37_000 + 1, 37_000)}
    mu = torch.rand(n, 3) * 255
    ranges = jitter_ranges(0.4)
    ra = device_rand_augment('rand-m9-mstd0.5-inc1', (8, 8), (0.485, 0.456, 0.406), 'random')
    draws = torch.tensor([encode_draws([d for _, d in ra.draw(Draws(i))]) for i in range(n)], dtype=torch.float64)
    small = torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g)
    am = device_rand_augment('augmix-m3-w3', (8, 8), (0.485, 0.456, 0.406), 'bilinear')
    layers, weights = augmix_tables(am, [am.draw(Draws(i)) for i in range(n)])
    runs = {
        'bitstreams': lambda: bitstreams(packed, torch.device('cpu')),
        'crop_resize_flip': lambda: crop_resize_flip(imgs, plans, out, rows, weights=taps, kernel=True),
        'jitter_affine': lambda: jitter_affine(mu, *sample_jitter(n, ranges, g)),
        'augment_batch': lambda: augment_batch(small, draws.view(n, -1, 3), (124, 116, 104), kernel=False),
        'augment_batch (kernels)': lambda: augment_batch(small, draws.view(n, -1, 3), (124, 116, 104), kernel=True),
        '  no pixel tables': without_pixel_tables(
            lambda: augment_batch(small, draws.view(n, -1, 3), (124, 116, 104), kernel=True), batch_augment
        ),
        'augmix_batch': lambda: augmix_batch(small, layers, weights, (124, 116, 104), kernel=False),
        'augmix_batch (kernels)': lambda: augmix_batch(small, layers, weights, (124, 116, 104), kernel=True),
    }
    runs.update(device_steps(imgs, n))
    print(f'host microseconds a batch of {n} (median of {a.rounds} rounds of {a.batches}), device work left out;')
    print('torch calls a batch, attribute reads apart')
    for name, fn in runs.items():
        print(f'  {name:<24} {timed(fn, a.batches, a.rounds):8.0f} {calls(fn):8d}')


if __name__ == '__main__':
    main()
