"""The host time of making one batch's resize taps (`timmdata.pixels.batch_resize`), the four ways: per image with
numpy (`batch_weights`, the reference), as a few dozen torch operations on the device (`device_weights`:
`crop_resize_flip`'s taps when it is given none), in one numpy call for the batch (`host_weights`), and from a warm
`TapCache` (in its steady state the batch's resizes were mostly made for earlier batches), its taps gathered on the
host and sent, or gathered on the device from the tables kept there (what the device-decode loader's resize stage
uses: a batch sends its row numbers and the few rows new to the cache).

A batch is `--batch` training plans of decoded `--hw` images (half of them portrait) to `--size` x `--size`, as the
loader's workers draw them (`DeviceDecodeTransform.plan`: timm's RandomResizedCrop boxes, 'random' interpolation,
flips). Each figure is the median host time of `--repeats` calls, each on a fresh batch of plans: the CPU time of the
calling thread (`time.thread_time`: steady on a busy machine; torch and numpy run it in that thread with one torch
thread), its wall time beside it. The cache is warmed on `--warm` batches first. On CUDA (`--device cuda`) `device_weights`'s time is the host's alone (its launches, no
synchronize); the host ways' figures then include the copy of the taps to the device. Run it on a quiet machine:

    nice python bench/bench_batch_taps.py                     # this CPU, one torch thread
    python bench/bench_batch_taps.py --device cuda            # the host time of each way beside a GPU
"""

import argparse
import statistics
import time

import numpy as np
import torch


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    ap.add_argument('--batch', type=int, default=256, help='plans per batch')
    ap.add_argument(
        '--hw', type=int, nargs=2, default=(375, 500), help='decoded image size (h w); half the batch portrait'
    )
    ap.add_argument('--size', type=int, default=224, help='output side')
    ap.add_argument('--repeats', type=int, default=15)
    ap.add_argument('--warm', type=int, default=30, help="batches the cache sees before it is timed")
    ap.add_argument('--threads', type=int, default=1, help='torch CPU threads (0: torch default)')
    a = ap.parse_args(argv)
    from timmdata.config import Draws
    from timmdata.core.runtime import to_device
    from timmdata.engine.device_plan import DeviceDecodeTransform
    from timmdata.pixels.batch_resize import TapCache, batch_weights, device_weights, host_weights

    if a.threads:
        torch.set_num_threads(a.threads)
    dev, (h, w), out = torch.device(a.device), a.hw, (a.size, a.size)
    tf = DeviceDecodeTransform(a.size, is_training=True, interpolation='random')
    shapes = [(3, h, w) if i % 2 == 0 else (3, w, h) for i in range(a.batch)]
    imgs = {s: torch.zeros(s, dtype=torch.uint8) for s in set(shapes)}  # plans need an image's size only
    seed = iter(range(10**9))

    def plans():  # a fresh batch of training plans
        b = next(seed) * a.batch
        return np.array([tf.plan(imgs[s], Draws(b + i)) for i, s in enumerate(shapes)], dtype=np.int64)

    def sent(taps):  # the host ways' taps copied to the device, as crop_resize_flip sends them
        if dev.type == 'cuda':
            taps = tuple(tuple(to_device(t, dev) for t in axis) for axis in taps)
        return taps

    cache = TapCache()
    for _ in range(a.warm):
        cache(plans(), out)
    made, found = cache.made, cache.found
    ways = {
        'per image, numpy (batch_weights)': lambda p: sent(batch_weights(p, out)),
        'device ops (device_weights)': lambda p: device_weights(p, out, dev),
        'one numpy call (host_weights)': lambda p: sent(host_weights(p, out)),
        'warm TapCache': lambda p: sent(cache(p, out)),
        'warm TapCache, kept on the device': lambda p: cache(p, out, dev),  # (on the CPU: a copy of the tables there)
    }
    times = {}
    for name, fn in ways.items():
        fn(plans())  # once untimed: imports, allocator
        cpu, wall = [], []
        for _ in range(a.repeats):
            p = plans()
            if dev.type == 'cuda':
                torch.cuda.synchronize(dev)
            c0, t0 = time.thread_time(), time.perf_counter()
            fn(p)
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - t0)
        times[name] = statistics.median(cpu), statistics.median(wall)
    if dev.type == 'cuda':
        torch.cuda.synchronize(dev)
    where = torch.cuda.get_device_name(dev) if dev.type == 'cuda' else f'CPU, {torch.get_num_threads()} torch thread(s)'
    print(
        f'{where}; batches of {a.batch} training plans of {h}x{w} images (half portrait) to {a.size}x{a.size}, '
        f"'random' interpolation; median host time of {a.repeats} fresh batches"
    )
    base = times['device ops (device_weights)'][0]
    for name, (t, tw) in times.items():
        print(
            f'{name:34s}: {t * 1e3:8.2f} ms of CPU a batch ({t / a.batch * 1e6:6.1f} us an image; wall {tw * 1e3:7.2f} ms); '
            f'device ops / this {base / t:5.2f}x'
        )
    sent = sum(t.nbytes for axis in host_weights(plans(), out) for t in axis)
    print(f'the taps a batch sends when gathered on the host: {sent / 1e6:.1f} MB (kept on the device: its row numbers)')
    fresh = cache.made - made
    print(
        f'the warm cache: {made} resizes made in {a.warm} warm-up batches; while timed {fresh} made, '
        f'{cache.found - found} found'
    )


if __name__ == '__main__':
    main()
