"""The batched crop + resize + flip (`timmdata.pixels.batch_resize.crop_resize_flip`) three ways, on the same decoded
images and the same plans: Triton's kernel (`timmdata.pixels.resize_kernel`, CUDA only), the matrix products (one
gather, two batched products, one copy), and the per-image loop they replaced (`crop_resize_batch` then `flip_batch_`,
below: the baseline, kept with its benchmark). Training plans: timm's RandomResizedCrop boxes, 'random'
interpolation, horizontal flips; evaluation plans (--plans eval): the shorter side to size/0.875, the centre crop.

Prints images/s of each, steady state: the median of `--repeats` timed batches after `--warmup` untimed ones (on CUDA
each timed with CUDA events, after a synchronize). The batched figures include making the taps on the device
(`device_weights`); the cost per image of numpy's reference (`batch_weights`) on this CPU is printed apart.
--blocks times the kernel with other blocks (lines x outputs x warps), each against the default, in the same run.

    python bench/bench_batch_resize.py --device cpu --batch 32
    python bench/bench_batch_resize.py --device cuda          # batch 256 of 500x375 images, 224x224 out
    python bench/bench_batch_resize.py --device cuda --plans eval --blocks 32x32x4,16x64x4,64x16x4,8x128x4
"""

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F


def crop_resize_batch(
    imgs: list,  # uint8 CHW tensors on one device (decoded images), one per plan row
    plans: torch.Tensor,  # (N, 11) int32 plans (CPU)
    out: torch.Tensor,  # (M, C, oh, ow) uint8 output batch on the device
    rows: list,  # the row of `out` each image goes to
) -> torch.Tensor:
    "The baseline: crop each image to its plan's box, resize it (torch's antialiased kernels, grouped by equal sizes), cut its output window, into `out`."
    from timmdata.engine.device_plan import INTERPS
    from timmdata.engine.gpu_decode import rows_on

    oh, ow = out.shape[-2:]
    groups = {}
    for k, p in enumerate(plans.tolist()):
        t, l, h, w, rh, rw, t2, l2, _, _, ii = p
        groups.setdefault((h, w, rh, rw, t2, l2, ii), []).append((k, t, l))
    for (h, w, rh, rw, t2, l2, ii), members in groups.items():
        x = torch.stack([imgs[k][:, t : t + h, l : l + w] for k, t, l in members]).float()
        if (rh, rw) != (h, w):
            x = F.interpolate(x, size=(rh, rw), mode=INTERPS[ii].value, align_corners=False, antialias=True)
        x = x[:, :, t2 : t2 + oh, l2 : l2 + ow].round_().clamp_(0, 255)
        if len(members) == 1:  # a crop of its own size (training's): copied into its row, no index sent
            out[rows[members[0][0]]].copy_(x[0])
        else:  # images of one size (evaluation's): one index for the group
            out.index_copy_(0, rows_on(out.device, [rows[k] for k, _, _ in members]), x.to(torch.uint8))
    return out


def flip_batch_(
    x: torch.Tensor,  # a uint8 (N, C, H, W) batch, flipped in place
    plans: torch.Tensor,  # (N, 11) int32 plans: columns 8 and 9 ask for the horizontal and vertical flips
) -> torch.Tensor:
    "The baseline's flips: the rows of `x` whose plans say so (horizontal, then vertical), in place."
    from timmdata.engine.gpu_decode import rows_on

    for col, dim in ((8, -1), (9, -2)):
        flipped = torch.nonzero(plans[:, col]).flatten().tolist()
        if flipped:
            idx = rows_on(x.device, flipped)
            x.index_copy_(0, idx, x.index_select(0, idx).flip(dim))
    return x


def timed(fn, device: torch.device, warmup: int, repeats: int) -> float:
    "Median seconds of one call of `fn` over `repeats` calls, after `warmup` untimed ones."
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu', choices=('cpu', 'cuda'))
    ap.add_argument('--batch', type=int, default=256, help='images per batch')
    ap.add_argument('--hw', type=int, nargs=2, default=(375, 500), help='decoded image size (h w); half the batch portrait')
    ap.add_argument('--size', type=int, default=224, help='output side')
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--repeats', type=int, default=10)
    ap.add_argument('--threads', type=int, default=0, help='torch CPU threads (0: torch default)')
    ap.add_argument('--tf32', action='store_true', help="run with torch.set_float32_matmul_precision('high')")
    ap.add_argument('--profile', action='store_true', help="print torch.profiler's table of the batched op's kernels")
    ap.add_argument('--check', type=int, default=32, help="images of the batched output compared with Pillow's (0: none)")
    ap.add_argument('--plans', default='train', choices=('train', 'eval'), help="timm's training crops or its eval crop")
    ap.add_argument('--blocks', default='', help='kernel blocks to time, LINESxOUTPUTSxWARPS,... (CUDA)')
    a = ap.parse_args(argv)
    from timmdata.config import Draws
    from timmdata.engine.gpu_decode import DeviceDecodeTransform
    from timmdata.pixels import resize_kernel
    from timmdata.pixels.batch_resize import batch_weights, crop_resize_flip, matmul_parts

    if a.threads:
        torch.set_num_threads(a.threads)
    if a.tf32:
        torch.set_float32_matmul_precision('high')  # this script's own process: the user's setting here
    dev, (h, w), n = torch.device(a.device), a.hw, a.batch
    g = torch.Generator().manual_seed(0)
    imgs = [
        torch.randint(0, 256, (3, h, w) if i % 2 == 0 else (3, w, h), dtype=torch.uint8, generator=g).to(dev)
        for i in range(n)
    ]
    tf = DeviceDecodeTransform(a.size, is_training=a.plans == 'train', interpolation='random')
    plans = torch.tensor([tf.plan(im.cpu(), Draws(i)) for i, im in enumerate(imgs)], dtype=torch.int32)
    t0 = time.perf_counter()
    weights = batch_weights(plans, (a.size, a.size))
    taps_s = time.perf_counter() - t0
    rows = list(range(n))
    out_b = torch.empty(n, 3, a.size, a.size, dtype=torch.uint8, device=dev)
    out_l = torch.empty_like(out_b)
    kernel = resize_kernel.resize_path(dev) == 'kernel'
    out_m = torch.empty_like(out_b)
    batched = lambda: crop_resize_flip(imgs, plans, out_b, rows)  # the taps made on the device; the default way
    products = lambda: crop_resize_flip(imgs, plans, out_m, rows, kernel=False)
    loop = lambda: flip_batch_(crop_resize_batch(imgs, plans, out_l, rows), plans)
    tb = timed(batched, dev, a.warmup, a.repeats)
    tm = timed(products, dev, a.warmup, a.repeats) if kernel else tb
    tl = timed(loop, dev, a.warmup, a.repeats)
    sweep = []
    if a.blocks and kernel:
        default = dict(resize_kernel.KERNEL_BLOCKS)
        for spec in a.blocks.split(','):
            bl, bo, wp = (int(v) for v in spec.split('x'))
            resize_kernel.KERNEL_BLOCKS.update(lines=bl, outputs=bo, warps=wp)
            t = timed(batched, dev, a.warmup, a.repeats)
            resize_kernel.KERNEL_BLOCKS.update(default)
            sweep.append((spec, t, timed(batched, dev, a.warmup, a.repeats)))  # the default again, next to it
    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == 'cuda' else [])
        with profile(activities=acts) as prof:
            batched()
            if dev.type == 'cuda':
                torch.cuda.synchronize(dev)
        key = 'cuda_time_total' if dev.type == 'cuda' else 'cpu_time_total'
        print(prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=40))
    name = torch.cuda.get_device_name(dev) if dev.type == 'cuda' else f'CPU, {torch.get_num_threads()} torch threads'
    print(f'device: {name}; batch {n} of {h}x{w} (half portrait), {a.plans} plans to {a.size}x{a.size}, '
          f'float32 matmul precision {torch.get_float32_matmul_precision()!r} ({matmul_parts(dev)} weight piece(s))')
    print(f'steady state: median of {a.repeats} batches after {a.warmup} warm-up batches')
    print(f'{a.plans} plans; resize: {resize_kernel.resize_path(dev)}; kernel blocks {resize_kernel.KERNEL_BLOCKS}')
    print(f'batched crop_resize_flip : {n / tb:10.0f} images/s  ({tb * 1e3:.2f} ms a batch)')
    if kernel:
        print(f'  the matrix products    : {n / tm:10.0f} images/s  ({tm * 1e3:.2f} ms a batch)')
        print(f'  ratio kernel / products: {tm / tb:10.2f}x')
    print(f'per-image loop           : {n / tl:10.0f} images/s  ({tl * 1e3:.2f} ms a batch)')
    print(f'ratio batched / loop     : {tl / tb:10.2f}x')
    for spec, t, t0 in sweep:
        print(f'  kernel blocks {spec:<10}: {t * 1e3:6.3f} ms a batch, the default beside it {t0 * 1e3:6.3f}: {t0 / t:.2f}x')
    print(f'taps made on the host with numpy (batch_weights, not used above): {taps_s / n * 1e6:.0f} us an image')
    del weights
    if a.check:
        from PIL import Image

        diffs = []
        for i in range(min(a.check, n)):  # Pillow's crop, resize, window and flips: the CPU path's pixels
            t, l, bh, bw, rh, rw, t2, l2, hf, vf, ii = plans[i].tolist()
            im = Image.fromarray(imgs[i].permute(1, 2, 0).cpu().numpy()).crop((l, t, l + bw, t + bh))
            im = im.resize((rw, rh), (Image.Resampling.BILINEAR, Image.Resampling.BICUBIC)[ii])
            im = im.crop((l2, t2, l2 + a.size, t2 + a.size))
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if hf else im
            im = im.transpose(Image.Transpose.FLIP_TOP_BOTTOM) if vf else im
            ref = torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1)
            diffs.append((out_b[i].cpu().int() - ref.int()).abs().flatten())
        d = torch.cat(diffs).float()
        print(f"batched vs Pillow (first {len(diffs)} images): max {int(d.max())} level, mean {d.mean().item():.5f} levels")
        if kernel:
            d = (out_m.int() - out_b.int()).abs().float()
            print(f'products vs kernel (the whole batch): max {int(d.max())} level, mean {d.mean().item():.5f} levels')
    d = (out_b.int() - out_l.int()).abs().float()
    print(f'the two outputs differ by {d.mean().item():.3f} levels on average (max {int(d.max())}): the loop '
          f"resizes with torch's antialiased kernels, the batched op with Pillow's weights")


if __name__ == '__main__':
    main()
