"""Issue 46: each loader's decode step alone, one thread, in a process of its own: CPU ms per image for the whole
JPEG and for what its training pipeline decodes (a RandomResizedCrop window, resized to 224 where the library does both
in one step). It measures what bench_peers.py's table only states: who decodes whole images and who decodes the crop.

    .peers-venv/bin/python bench/peers_decode.py          # after bench_peers.py made the data and FFCV's .beton

Rows for a library that is not installed say so. Timings are CPU seconds of the process (time.process_time, every
thread), the best of 3 passes over 300 images, on the shared machine (load printed)."""
import argparse, json, os, random, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_peers import _rrc_box, list_files  # noqa: E402  (the same crop boxes as the benchmark)

N = 300


def best(f, n, repeats=3):
    "Best CPU ms per image of `repeats` calls of f() (each handles n images)."
    out = float('inf')
    for _ in range(repeats):
        c = time.process_time(); f(); out = min(out, (time.process_time() - c) / n)
    return out * 1000


def boxes(files):
    rng = random.Random(0)
    from PIL import Image
    out = []
    for f in files:
        with Image.open(f) as im: out.append(_rrc_box(*im.size, rng))
    return out


def lib_pil(files, datas):
    from PIL import Image
    import io
    bx = boxes(files)

    def full():
        for d in datas:
            with Image.open(io.BytesIO(d)) as im: im.convert('RGB')

    def crop():
        for d, b in zip(datas, bx):
            with Image.open(io.BytesIO(d)) as im: im.convert('RGB').resize((224, 224), Image.BILINEAR, box=b)
    return {'PIL: whole JPEG (open + convert RGB)': best(full, len(datas)),
            'PIL: whole JPEG, then crop + resize 224 (bilinear, box; torchvision/Grain way)': best(crop, len(datas))}


def lib_timmdata(files, datas):
    try: from timmdata.pixels.decode import NATIVE, encoded_jpeg  # the package layout
    except ImportError: from timmdata.pixels.decode import NATIVE, encoded_jpeg  # the flat one
    nat = NATIVE.module
    if nat is None: return {'timmdata: native extension not built': float('nan')}
    hw = [(e.height, e.width) for e in (encoded_jpeg(d) for d in datas)]
    bx = boxes(files)

    def full():
        for d, (h, w) in zip(datas, hw): nat.decode_crop(d, 0, 0, h, w)

    def crop():  # decode only the crop's rows and columns (the DCT blocks it touches)
        for d, (x0, y0, x1, y1) in zip(datas, bx): nat.decode_crop(d, y0, x0, y1 - y0, x1 - x0)
    return {'timmdata native: whole JPEG (libjpeg-turbo)': best(full, len(datas)),
            'timmdata native: the crop window only (decode_crop)': best(crop, len(datas))}


def lib_dali(files, datas):
    import numpy as np
    from nvidia.dali import pipeline_def, fn, types
    n = len(datas)

    def run(random_crop):
        @pipeline_def(batch_size=n, num_threads=1, device_id=None, seed=0, prefetch_queue_depth=1)
        def pipe():
            enc = fn.external_source(source=lambda: [np.frombuffer(d, np.uint8) for d in datas], batch=True)
            return (fn.decoders.image_random_crop(enc, device='cpu', output_type=types.RGB) if random_crop else
                    fn.decoders.image(enc, device='cpu', output_type=types.RGB))
        p = pipe(); p.build(); p.run()  # warm
        return best(p.run, n)
    return {'DALI (CPU, 1 thread): whole JPEG (decoders.image)': run(False),
            'DALI (CPU, 1 thread): decoders.image_random_crop (crop only)': run(True)}


def lib_ffcv(files, datas, beton):
    from ffcv.loader import Loader, OrderOption
    from ffcv.fields.decoders import IntDecoder, SimpleRGBImageDecoder, RandomResizedCropRGBImageDecoder
    if not Path(beton).exists(): return {f'FFCV: no {beton} (run bench_peers.py first)': float('nan')}

    def run(dec):
        ld = Loader(beton, batch_size=100, num_workers=1, order=OrderOption.SEQUENTIAL, os_cache=True,
                    indices=list(range(len(files))), pipelines={'image': [dec], 'label': [IntDecoder()]})
        for _ in ld: pass  # numba compiles
        return best(lambda: [None for _ in ld], len(files))
    return {'FFCV (1 thread): whole JPEG from the .beton (SimpleRGBImageDecoder)': run(SimpleRGBImageDecoder()),
            'FFCV (1 thread): RandomResizedCropRGBImageDecoder (decode + crop + resize 224)':
                run(RandomResizedCropRGBImageDecoder((224, 224)))}


def lib_spdl(files, datas):
    import torch  # noqa: F401
    import spdl.io
    bx = boxes(files)

    def full():
        for f in files: spdl.io.convert_frames(spdl.io.decode_packets(spdl.io.demux_image(f), filter_desc='format=pix_fmts=rgb24'))

    def crop():
        for f, (x0, y0, x1, y1) in zip(files, bx):
            flt = f'crop={x1 - x0}:{y1 - y0}:{x0}:{y0},scale=224:224:flags=bilinear,format=pix_fmts=rgb24'
            spdl.io.convert_frames(spdl.io.decode_packets(spdl.io.demux_image(f), filter_desc=flt))
    return {'SPDL (FFmpeg): whole JPEG to RGB': best(full, len(files)),
            'SPDL (FFmpeg): whole JPEG, crop + scale 224 filter': best(crop, len(files))}


LIBS = {'pil': lib_pil, 'timmdata': lib_timmdata, 'dali': lib_dali, 'ffcv': lib_ffcv, 'spdl': lib_spdl}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--data', default='/tmp/timmdata_peers_1500/train')
    ap.add_argument('--out', default=str(HERE / 'results' / 'peers_decode_2026-11-24.txt'))
    ap.add_argument('--images', type=int, default=N)
    ap.add_argument('--lib', default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    files = [f for f, _ in list_files(a.data)][:a.images]
    if a.lib:
        os.environ['OMP_NUM_THREADS'] = '1'
        import torch; torch.set_num_threads(1)
        datas = [open(f, 'rb').read() for f in files]
        args = (files, datas) + ((str(Path(a.data).parent / 'train.beton'),) if a.lib == 'ffcv' else ())
        print('RESULT ' + json.dumps(LIBS[a.lib](*args))); return
    rows, load = {}, [os.getloadavg()[0]]
    for lib in LIBS:
        p = subprocess.run([sys.executable, __file__, '--lib', lib, '--data', a.data, '--images', str(a.images)], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(HERE.parent)))
        got = [l for l in p.stdout.splitlines() if l.startswith('RESULT ')]
        if got: rows.update(json.loads(got[0][7:]))
        else: rows[f'{lib}: not measured ({(p.stderr.strip().splitlines() or ["?"])[-1][:150]})'] = float('nan')
    load.append(os.getloadavg()[0])
    pil = rows.get('PIL: whole JPEG (open + convert RGB)', float('nan'))
    lines = [f'decode alone, {len(files)} generated 500x375 JPEGs (q90), one thread, CPU ms per image (best of 3), '
             f'{time.strftime("%H:%M UTC", time.gmtime())}',
             f'command: {os.path.relpath(sys.executable, HERE.parent)} bench/peers_decode.py; machine: {os.cpu_count()} cores, SHARED '
             f'(load {load[0]:.1f} -> {load[1]:.1f})', '',
             f'  {"step":<82}{"CPU ms/img":>11}{"of PIL":>8}']
    lines += [f'  {k:<82}{v:>11.2f}{v / pil:>8.2f}' for k, v in rows.items()]
    text = '\n'.join(lines) + '\n'
    print(text); Path(a.out).write_text(text); print(f'saved {a.out}')


if __name__ == '__main__':
    main()
