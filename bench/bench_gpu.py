"""Issue 17's benchmark: the device-decode path against timm's loader, torchvision's, timmdata's CPU path and the
decode limit of the device's JPEG decoder (TorchCodec: nvJPEG on CUDA, libjpeg-turbo on the CPU), in one run, on
about 10,000 JPEGs of 500x375 made with `timmdata.make_sample_dataset`, batch 256, train and eval pipelines.

Every loader yields normalised float batches of 3x224x224 on the device; epochs alternate between loaders (one
warm-up epoch each, then `--epochs` measured), and the table prints medians: images/s, CPU seconds per image (the
main process and all its worker processes, user + system), ratios to timm's loader, and the GPU memory each loader's
epochs allocated at their peak (`torch.cuda.max_memory_allocated`). The store is timmdata's decode-once store (raw
pixels, shorter side 256) built from the same images before its first epoch.

On the H100 machine:   python bench/bench_gpu.py --device cuda --workers 16 --out out/bench_gpu_h100.json
On a CPU (proof it runs; CPU figures only):   python bench/bench_gpu.py --device cpu --n 500 --batch-size 64 --workers 2
"""
import argparse, json, os, platform, resource, statistics, sys, time
from pathlib import Path

import torch

import timmdata
from timmdata.pixels import decode
from timmdata.config import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timmdata.engine.gpu_decode import create_device_decode_loader
from timmdata.tools.sample_data import make_sample_dataset

SIZE = 224
CLK = os.sysconf('SC_CLK_TCK')


def cpu_seconds() -> float:
    "CPU seconds (user + system) of this process, its live children (DataLoader workers) and its reaped children."
    def proc(pid):
        try: f = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
        except OSError: return 0.
        return (int(f[11]) + int(f[12])) / CLK
    kids = []
    for task in Path('/proc/self/task').iterdir():
        try: kids += [int(p) for p in (task / 'children').read_text().split()]
        except OSError: pass
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc(os.getpid()) + sum(proc(k) for k in set(kids)) + ru.ru_utime + ru.ru_stime


# ---------- the contenders: each returns an iterable of (float batch on `device`, targets) ----------

def timm_loader(root, train, bs, nw, device):
    import timm.data
    ds = timm.data.ImageDataset(str(root))
    return timm.data.create_loader(ds, (3, SIZE, SIZE), bs, is_training=train, color_jitter=0.4 if train else None,
                                   num_workers=nw, use_prefetcher=True, device=device, persistent_workers=True)

def torchvision_loader(root, train, bs, nw, device):
    from torchvision import datasets, transforms as T
    norm = [T.ToTensor(), T.Normalize(IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD)]
    tf = (T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4)] + norm) if train
          else T.Compose([T.Resize(256), T.CenterCrop(SIZE)] + norm))
    dl = torch.utils.data.DataLoader(datasets.ImageFolder(str(root), transform=tf), batch_size=bs, shuffle=train,
                                     drop_last=train, num_workers=nw, persistent_workers=nw > 0,
                                     pin_memory=device.type == 'cuda')
    class ToDevice:  # the copy to the device belongs to the loader's cost
        loader = dl
        def __len__(self): return len(dl)
        def __iter__(self):
            for x, y in dl: yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    return ToDevice()

def timmdata_cpu_loader(root, train, bs, nw, device):
    return timmdata.create_loader(timmdata.ImageDataset(str(root)), (3, SIZE, SIZE), bs, is_training=train,
                                  color_jitter=0.4 if train else None, num_workers=nw, device=device)

def timmdata_device_loader(root, train, bs, nw, device):
    return create_device_decode_loader(timmdata.ImageDataset(str(root)), (3, SIZE, SIZE), bs, is_training=train,
                                       color_jitter=0.4 if train else None, num_workers=nw, decode_device=device)

def timmdata_device_matmul_loader(root, train, bs, nw, device):
    "The device loader with torch's operations for its resize (matrix products) and warps, not Triton's kernels (their A/B in one run)."
    ld = timmdata_device_loader(root, train, bs, nw, device)
    ld.step.kernels = False
    return ld

def timmdata_store_loader(root, train, bs, nw, device):
    "The decode-once store (raw pixels, shorter side 256), built beside the images on first use."
    from timmdata.store.builder import build_cache
    store = Path(root).parent / 'store'
    build_cache(root, store, progress=False)  # returns at once when it is up to date
    return timmdata_cpu_loader(store, train, bs, nw, device)

LOADERS = {'timm': timm_loader, 'torchvision': torchvision_loader, 'timmdata_cpu': timmdata_cpu_loader,
           'timmdata_device': timmdata_device_loader, 'timmdata_device_matmul': timmdata_device_matmul_loader,
           'timmdata_store': timmdata_store_loader}


def sync(device):
    if device.type == 'cuda': torch.cuda.synchronize(device)

def time_epoch(loader, device) -> tuple:
    "(images, seconds, CPU seconds) of one pass; checks every loader gives the same kind of batch."
    n, c0, t0 = 0, cpu_seconds(), time.perf_counter()
    for x, y in loader:
        if n == 0 and (x.dtype != torch.float32 or x.device.type != device.type or tuple(x.shape[1:]) != (3, SIZE, SIZE)):
            raise RuntimeError(f'expected float32 {device.type} batches of 3x{SIZE}x{SIZE}, got {x.dtype} {x.device} {tuple(x.shape)}')
        n += x.shape[0]
    sync(device)
    return n, time.perf_counter() - t0, cpu_seconds() - c0

def decode_limit(files, bs, device, rounds=2) -> tuple:
    "(images/s, CPU s per image) of TorchCodec's decode_jpeg over the files in batches of `bs` on `device`, bytes in memory, one thread."
    dec = decode.torchcodec_jpeg()
    srcs = [torch.frombuffer(bytearray(Path(f).read_bytes()), dtype=torch.uint8) for f in files]
    from timmdata.engine.gpu_decode import jpeg_device_kind

    # the JPEGs the device path decodes there (a colour baseline JPEG with no EXIF turn: what `encoded_jpeg` takes and
    # `jpeg_device_kind` sends on); a photographic set also holds PNGs, grey, CMYK and progressive ones
    srcs = [s for s in srcs if decode.encoded_jpeg(s.numpy().tobytes()) is not None and jpeg_device_kind(s.numpy().tobytes()) == 0]
    dec(srcs[:bs], mode='RGB', device=device); sync(device)  # warm-up (nvJPEG's handles, the CUDA context)
    best = None
    for _ in range(rounds):
        c0, t0 = cpu_seconds(), time.perf_counter()
        for i in range(0, len(srcs), bs): dec(srcs[i:i + bs], mode='RGB', device=device)
        sync(device)
        dt, dc = time.perf_counter() - t0, cpu_seconds() - c0
        if best is None or dt < best[0]: best = dt, dc
    return len(srcs) / best[0], best[1] / len(srcs)


def run(a) -> dict:
    device = torch.device(a.device)
    if device.type == 'cuda' and not torch.cuda.is_available(): sys.exit('bench_gpu: --device cuda but CUDA is not available here')
    if a.data:  # a folder of images made elsewhere (tools/gpu_run.sh: the photographic set), used as it is
        data = Path(a.data)
    else:
        root = Path(a.root or Path('out') / f'bench_gpu_data_{a.n}')
        make_sample_dataset(root, n_train=max(1, a.n // 10), n_val=1, size=(500, 375), quality=90)
        data = root / 'train'
    files = sorted(data.rglob('*.JPEG'))
    torch.set_num_threads(max(1, min(4, os.cpu_count() // 4)))
    res = {'device': str(device), 'device_name': torch.cuda.get_device_name(device) if device.type == 'cuda' else platform.processor() or platform.machine(),
           'images': len(files), 'image_size': 'mixed' if a.data else '500x375', 'data': str(data), 'batch_size': a.batch_size, 'workers': a.workers, 'epochs': a.epochs,
           'cpu_count': os.cpu_count(), 'torch': torch.__version__, 'decoder': decode.decoder_name(), 'pipelines': {}}
    print(f"{len(files)} JPEGs {res['image_size']}, batch {a.batch_size}, {a.workers} workers, device {res['device_name']} ({device}); "
          f"{res['cpu_count']} CPUs; decoders: {res['decoder']}", flush=True)
    for pipe in a.pipelines.split(','):
        train = pipe == 'train'
        loaders = {c: LOADERS[c](data, train, a.batch_size, a.workers, device) for c in a.contenders.split(',')}
        rates = {c: [] for c in loaders}; cpu = {c: [] for c in loaders}; mem = {c: 0 for c in loaders}; errors = {}
        for ep in range(a.epochs + 1):
            for c, ld in loaders.items():
                if c in errors: continue
                if device.type == 'cuda': torch.cuda.reset_peak_memory_stats(device)
                try:
                    n, dt, dc = time_epoch(ld, device)
                except Exception as e:  # noqa: BLE001 (one loader failing loses its own figures, not the others')
                    errors[c] = f'{type(e).__name__}: {str(e)[:300]}'
                    print(f'  {pipe} {c} epoch {ep}: FAILED {errors[c]}', flush=True); continue
                if device.type == 'cuda': mem[c] = max(mem[c], torch.cuda.max_memory_allocated(device) / 2**20)
                if ep: rates[c].append(n / dt); cpu[c].append(dc / n)
                print(f'  {pipe} {c} epoch {ep}{" (warm-up)" if not ep else ""}: {n / dt:,.0f} img/s, {dc / n * 1e3:.2f} CPU ms/img', flush=True)
        stages, resize, decoded = {}, {}, {}  # the device path's stages (a thread each): batches, wall and CPU seconds, warm-up included
        for c, ld in loaders.items():
            info = ld.stats().info if getattr(ld, 'stats', None) else {}
            notes = info.get('decode') or {}  # where the images were decoded, the bytes' ring and its share, the kernels
            if notes:
                decoded[c] = notes
                print(f"  {pipe} {c} bytes: {notes.get('bytes')}; in the ring {notes.get('bytes in the ring')}", flush=True)
            if notes.get('resize'):  # Triton's kernels or the matrix products, and why
                resize[c] = notes['resize']
                print(f'  {pipe} {c} resize: {resize[c]}', flush=True)
            got = info.get('device_stages')
            if got:
                stages[c] = got
                print(f'  {pipe} {c} stages, per batch (wall / CPU of its thread): ' + ', '.join(
                    f"{k} {v['seconds'] / v['batches'] * 1e3:.1f} / {v['cpu_seconds'] / v['batches'] * 1e3:.1f} ms"
                    for k, v in got.items()), flush=True)
        del loaders
        try:
            lim, lim_cpu = decode_limit(files, a.batch_size, device)
        except Exception as e:  # noqa: BLE001 (a file the decoder refuses, a PNG named .JPEG say: no limit figure, the loaders' stand)
            print(f'  decode limit: not measured ({type(e).__name__}: {str(e)[:200]})', flush=True)
            lim = lim_cpu = None
        med = {c: statistics.median(v) for c, v in rates.items() if v}
        out = {'img_per_s': {**med, 'decode_limit': lim}, 'cpu_s_per_img': {**{c: statistics.median(v) for c, v in cpu.items() if v}, 'decode_limit': lim_cpu},
               'gpu_mem_mb': mem, 'runs': rates, 'errors': errors, 'device_stages': stages,
               'resize': resize, 'decode': decoded}
        if 'timm' in med: out['ratio_to_timm'] = {c: med[c] / med['timm'] for c in med}
        res['pipelines'][pipe] = out
        if a.out:  # after each pipeline: a run cut short keeps what it measured
            Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(json.dumps(res, indent=1))
    return res

def table(res: dict) -> str:
    rows = [f"{'pipeline':<8} {'loader':<24} {'img/s':>10} {'CPU ms/img':>11} {'x timm':>8} {'GPU MB':>8}"]
    for pipe, out in res['pipelines'].items():
        for c, r in out['img_per_s'].items():
            if r is None: continue  # the decode limit, not measured
            ratio, mb = out.get('ratio_to_timm', {}).get(c), out.get('gpu_mem_mb', {}).get(c)
            rows.append(f"{pipe:<8} {c:<24} {r:>10,.0f} {out['cpu_s_per_img'][c] * 1e3:>11.2f} "
                        f"{'' if ratio is None else f'{ratio:.2f}':>8} {'' if not mb else f'{mb:,.0f}':>8}")
    return '\n'.join(rows)

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--device', default='cuda', help="'cuda' (the benchmark) or 'cpu' (to check that it runs)")
    p.add_argument('--n', type=int, default=10000, help='JPEGs in the dataset (made once, kept under --root)')
    p.add_argument('--batch-size', type=int, default=256)
    p.add_argument('--workers', type=int, default=os.cpu_count())
    p.add_argument('--epochs', type=int, default=3, help='measured epochs per loader, after one warm-up epoch')
    p.add_argument('--pipelines', default='train,eval')
    p.add_argument('--contenders', default=','.join(LOADERS))
    p.add_argument('--root', help='where the generated dataset lives (default out/bench_gpu_data_N)')
    p.add_argument('--data', help='a folder of images (class folders) to use as it is instead of generating (--n, --root unused)')
    p.add_argument('--out', help='write the results here as JSON')
    a = p.parse_args(argv)
    res = run(a)
    print(table(res))
    if res['device'] == 'cpu': print('(CPU run: these are CPU figures only, not GPU ones)')
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(json.dumps(res, indent=1))
    return res

if __name__ == '__main__': main()
