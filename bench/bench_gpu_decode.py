"""Batched JPEG decode on the device: TorchCodec's `decode_jpeg` (nvJPEG on a GPU) against nvImageCodec
(timmdata.pixels.nvimgcodec) with its default back ends, with the hardware JPEG engines alone, with timmdata's choice
('auto': engines, then CUDA), and with random training regions (RandomResizedCrop boxes, scale 0.08-1, ratio 3/4-4/3)
decoded alone. The same N photo-like JPEGs of 500x375 (timmdata.tools.sample_data) for each; a warm-up pass, then
repeats that take the methods in turn (a machine's drift hits all alike); images a second and CPU milliseconds an image
(the process's CPU time, every thread's) of the median pass; ratios against TorchCodec. On the CPU it runs what runs
there (TorchCodec's CPU decoder, nvImageCodec's libjpeg-turbo back end), to rehearse it.
    python bench/bench_gpu_decode.py --device cuda --out bench/results/gpu_decode.json
    python bench/bench_gpu_decode.py --device cpu --n 200
"""
import argparse, json, math, pathlib, statistics, sys, tempfile, time

import numpy as np
import torch

from timmdata.pixels.decode import torchcodec_jpeg, torchcodec_status
from timmdata.pixels.nvimgcodec import decode_regions, nvimgcodec_decoder, nvimgcodec_status
from timmdata.tools.sample_data import make_sample_dataset


def rrc_box(h: int, w: int, rng: np.random.Generator, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)) -> tuple:
    "RandomResizedCrop's box (top, left, height, width), torchvision's algorithm, drawn from `rng`."
    area, logr = h * w, (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        a = area * rng.uniform(*scale)
        r = math.exp(rng.uniform(*logr))
        cw, ch = int(round(math.sqrt(a * r))), int(round(math.sqrt(a / r)))
        if 0 < cw <= w and 0 < ch <= h:
            return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw
    r = w / h  # the fallback: a centre crop at the nearest allowed aspect
    cw, ch = (w, int(round(w / ratio[0]))) if r < ratio[0] else ((int(round(h * ratio[1])), h) if r > ratio[1] else (w, h))
    ch, cw = min(ch, h), min(cw, w)
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def methods(device: torch.device) -> dict:
    "name -> (decode one batch: fn(srcs, tensors, boxes) -> (images, failed rows), or None, why not)"
    out = {}
    tc = torchcodec_jpeg()
    out['torchcodec'] = ((lambda s, t, b: (list(tc(t, mode='RGB', device=device)), [])) if tc is not None else None,
                         torchcodec_status())
    kinds = [('default', False), ('auto', False), ('hw', False), ('cuda', False), ('auto', True), ('hw', True)] \
        if device.type == 'cuda' else [('cpu', False), ('cpu', True)]
    for be, regions in kinds:
        dec = nvimgcodec_decoder(device, be)
        name = f'nvimgcodec {be}' + (' regions' if regions else '')
        fn = (lambda s, t, b, be=be, regions=regions: decode_regions(s, b if regions else None, device, backends=be)) \
            if dec is not None else None
        out[name] = (fn, nvimgcodec_status(device, be))
    if device.type == 'cuda' and nvimgcodec_decoder(device, 'hw') is not None:
        # the decode call alone on parsed files, no tensors made: what decode_regions adds to it per image
        from nvidia import nvimgcodec as nv
        from timmdata.pixels.nvimgcodec import _params
        dec, params = nvimgcodec_decoder(device, 'hw'), _params(nv)
        out['nvimgcodec hw call alone'] = (lambda s, t, b: (dec.decode([nv.CodeStream(x) for x in s], params=params,
                                                                        cuda_stream=torch.cuda.current_stream().cuda_stream), []),
                                           'the decode call alone')
        cs = lambda s: [nv.CodeStream(x) for x in s]
        st = lambda: torch.cuda.current_stream().cuda_stream
        out['nvimgcodec hw call + from_dlpack'] = (lambda s, t, b: ([torch.from_dlpack(i) for i in dec.decode(cs(s), params=params, cuda_stream=st())], []), 'tensors by DLPack')
        out['nvimgcodec hw call + as_tensor'] = (lambda s, t, b: ([torch.as_tensor(i, device=device) for i in dec.decode(cs(s), params=params, cuda_stream=st())], []), 'tensors by __cuda_array_interface__')
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--device', default='cuda', choices=['cpu', 'cuda'])
    ap.add_argument('--n', type=int, default=1000, help='JPEGs (500x375, quality 90)')
    ap.add_argument('--batch', type=int, default=128)
    ap.add_argument('--repeats', type=int, default=5, help='timed passes over the N images, per method')
    ap.add_argument('--seed', type=int, default=0, help='the regions draws')
    ap.add_argument('--out', default=None, help='write the results as JSON here')
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise SystemExit('bench_gpu_decode: --device cuda, but torch sees no CUDA device here (use --device cpu)')
    root = make_sample_dataset(pathlib.Path(tempfile.mkdtemp()) / 'd', n_train=max(1, a.n // 10), n_val=0, size=(500, 375))
    files = sorted(pathlib.Path(root).rglob('*.JPEG'))[: a.n]
    srcs = [f.read_bytes() for f in files]
    tens = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in srcs]
    boxes = [rrc_box(375, 500, np.random.default_rng([a.seed, i])) for i in range(len(srcs))]
    area = float(np.mean([h * w / (375 * 500) for _, _, h, w in boxes]))
    batches = [(srcs[i : i + a.batch], tens[i : i + a.batch], boxes[i : i + a.batch]) for i in range(0, len(srcs), a.batch)]
    sync = torch.cuda.synchronize if device.type == 'cuda' else (lambda: None)
    ms = methods(device)
    env = {'device': torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu', 'torch': torch.__version__,
           'torchcodec': torchcodec_status(), 'nvimgcodec': nvimgcodec_status(), 'n': len(srcs), 'batch': a.batch,
           'repeats': a.repeats, 'mean_region_area': area, 'cpus': torch.get_num_threads()}
    print(f"{len(srcs)} JPEGs 500x375 q90, batch {a.batch}, {a.repeats} passes each, on {env['device']}; "
          f"regions: RandomResizedCrop boxes, mean {area:.0%} of the image\n{env['torchcodec']}; {env['nvimgcodec']}")
    live = {k: fn for k, (fn, why) in ms.items() if fn is not None}
    for k, (fn, why) in ms.items():
        if fn is None:
            print(f'  {k}: skipped: {why}')
        else:
            print(f'  {k}: {why}')

    def one_pass(fn) -> tuple:
        failed = 0
        w0, c0 = time.perf_counter(), time.process_time()
        for s, t, b in batches:
            imgs, bad = fn(s, t, b)
            failed += len(bad)
        sync()
        return time.perf_counter() - w0, time.process_time() - c0, failed

    for k, fn in live.items():  # warm-up: decoders made, buffers and streams set up
        one_pass(fn)
    runs = {k: [] for k in live}
    for _ in range(a.repeats):
        for k, fn in live.items():
            runs[k].append(one_pass(fn))
    res = {}
    for k, rs in runs.items():
        wall = statistics.median(r[0] for r in rs)
        cpu = statistics.median(r[1] for r in rs)
        res[k] = {'images_per_s': len(srcs) / wall, 'cpu_ms_per_image': 1e3 * cpu / len(srcs), 'failed_per_pass': rs[0][2],
                  'passes_s': [round(r[0], 4) for r in rs]}
    base = res.get('torchcodec')
    print(f"\n{'method':28s} {'images/s':>10s} {'CPU ms/img':>11s} {'x TorchCodec':>13s} {'CPU x':>7s} {'failed':>7s}")
    for k, r in res.items():
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}" if base else '-'
        cratio = f"{r['cpu_ms_per_image'] / base['cpu_ms_per_image']:.2f}" if base and base['cpu_ms_per_image'] > 0 else '-'
        print(f"{k:28s} {r['images_per_s']:10.0f} {r['cpu_ms_per_image']:11.3f} {ratio:>13s} {cratio:>7s} {r['failed_per_pass']:7d}")
    if a.out:
        pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(a.out).write_text(json.dumps({'env': env, 'results': res,
                                                   'skipped': {k: why for k, (fn, why) in ms.items() if fn is None}}, indent=1))
        print(f'wrote {a.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
