"""Issue 45's timeline: what the GPU does while a model trains, with timmdata's prefetcher and without it.

A ResNet-50 (channels-last, AMP, SGD) trains on the images under --root, batch 256, with `create_loader` twice:
- with the prefetcher (timm's default): uint8 batches from the workers, copied on a side stream and normalised there
  while the model's step runs on the default stream;
- without it (`use_prefetcher=False`): float batches normalised in the workers, copied in the training loop
  (`x.cuda(non_blocking=True)`) on the default stream, as a plain DataLoader loop does.
`torch.profiler` records a few steps of each (after a warm-up) into a Chrome trace; from it the picture draws, per
CUDA stream, the kernels and copies of those steps, and measures the GPU's idle fraction: the share of the steps'
wall time (profiler step annotations) in which no kernel or copy ran on any stream. Also images/s over timed steps
without the profiler. Writes prefetch_timeline.png and prefetch_timeline.json to --out.

On the GPU machine:  python bench/gpu_timeline.py --root out/bench_gpu_data_10000/train --out $OUT
On a CPU (checks that it runs: no GPU events, so no idle figure):  python bench/gpu_timeline.py --device cpu --root R
"""
import argparse, json, os, tempfile, time
from pathlib import Path

import torch

import timmdata


def _loader(root, prefetch, bs, workers, device):
    return timmdata.create_loader(timmdata.ImageDataset(str(root)), (3, 224, 224), bs, is_training=True,
                                  use_prefetcher=prefetch, device=device, num_workers=workers,
                                  channels_last=prefetch and device.type == 'cuda', persistent_workers=True)


def _steps(loader, model, opt, device, n, prof=None):
    "n training steps (fewer if the epoch ends); the batch copied in the loop where the loader left it on the CPU."
    amp = torch.autocast(device.type, dtype=torch.bfloat16 if device.type == 'cpu' else torch.float16)
    scaler = torch.amp.GradScaler(device.type, enabled=device.type == 'cuda')  # as train.py's --amp (float16)
    done = 0
    while done < n:
        before = done
        for x, y in loader:
            if x.device != device:  # without the prefetcher: the loop's own copy, on the default stream
                x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
                y = y.to(device, non_blocking=True)
            with amp:
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if prof is not None: prof.step()
            done += 1
            if done >= n: break
        if done == before: raise SystemExit('gpu_timeline: the loader gave no batch: fewer images than a batch?')
    if device.type == 'cuda': torch.cuda.synchronize(device)
    return done


def _gpu_intervals(trace: Path):
    "({stream: [(start_us, end_us, kind)]}, [(start, end)] of the profiler steps) from a Chrome trace."
    ev = json.loads(trace.read_text())['traceEvents']
    streams, steps = {}, []
    for e in ev:
        if e.get('ph') != 'X': continue
        cat = e.get('cat', '')
        if cat in ('kernel', 'gpu_memcpy', 'gpu_memset'):
            kind = 'kernel' if cat == 'kernel' else 'copy'
            streams.setdefault(int(e.get('args', {}).get('stream', e.get('tid', 0))), []).append((e['ts'], e['ts'] + e['dur'], kind, e.get('name', '')))
        elif cat == 'user_annotation' and str(e.get('name', '')).startswith('ProfilerStep#'):
            steps.append((e['ts'], e['ts'] + e['dur']))
    return streams, sorted(steps)


def _idle(streams, window):
    "The share of `window` in which nothing ran on any stream (None without GPU events)."
    iv = sorted((max(s, window[0]), min(e, window[1])) for evs in streams.values() for s, e, *_ in evs
                if e > window[0] and s < window[1])
    if not iv: return None
    busy, cur = 0.0, None
    for s, e in iv:
        if cur is None or s > cur[1]:
            if cur: busy += cur[1] - cur[0]
            cur = [s, e]
        else: cur[1] = max(cur[1], e)
    busy += cur[1] - cur[0]
    return 1 - busy / (window[1] - window[0])


def profile(run, device, steps: int, trace: Path):
    "`run(prof)` (which calls `prof.step()` after each step) under `torch.profiler`: 2 warm-up steps, then `steps` traced into `trace`."
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == 'cuda' else [])
    # the trace is written when the active steps end (after them a new cycle starts, and its events are empty)
    with torch.profiler.profile(activities=acts, schedule=torch.profiler.schedule(wait=0, warmup=2, active=steps, repeat=1),
                                on_trace_ready=lambda p: p.export_chrome_trace(str(trace))) as prof:
        run(prof)


def measure(root, prefetch, a, device, work):
    torch.manual_seed(0)
    import timm
    model = timm.create_model(a.model, num_classes=10).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = _loader(root, prefetch, a.batch_size, a.workers, device)
    _steps(loader, model, opt, device, a.warmup)
    t0 = time.perf_counter()
    n = _steps(loader, model, opt, device, a.timed)
    rate = n * a.batch_size / (time.perf_counter() - t0)
    trace = work / f'trace_{int(prefetch)}.json'
    profile(lambda prof: _steps(loader, model, opt, device, a.steps + 2, prof), device, a.steps, trace)
    streams, steps = _gpu_intervals(trace)
    window = (steps[0][0], steps[-1][1]) if steps else None
    idle = _idle(streams, window) if window else None
    del loader
    return dict(prefetch=prefetch, images_per_s=rate, gpu_idle_fraction=idle, window_us=window,
                streams={s: len(v) for s, v in streams.items()}, profiled_steps=len(steps)), streams, window


def plot(results, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    rows = max(1, max(len(r[1]) for r in results))  # streams drawn in each panel
    fig, axes = plt.subplots(len(results), 1, figsize=(11, len(results) * (1.3 + 0.55 * rows)), squeeze=False)
    for ax, (res, streams, window) in zip(axes[:, 0], results):
        label = 'with the prefetcher (side-stream copy)' if res['prefetch'] else 'without it (copy in the loop)'
        idle = res['gpu_idle_fraction']
        ax.set_title(f"{label}: {res['images_per_s']:,.0f} images/s, GPU idle "
                     f"{'n/a' if idle is None else f'{idle:.0%}'}", fontsize=10, loc='left')
        for row, (s, evs) in enumerate(sorted(streams.items())):
            for kind, color in (('kernel', '#4C72B0'), ('copy', '#DD8452')):
                bars = [((b - window[0]) / 1e3, (e - b) / 1e3) for b, e, k, _ in evs if k == kind and window and e > window[0] and b < window[1]]
                if bars: ax.broken_barh(bars, (row - 0.35, 0.7), color=color, label=kind if row == 0 or kind == 'copy' else None)
        ax.set_yticks(range(len(streams)), [f'stream {s}' for s in sorted(streams)])
        ax.set_xlabel('ms')
        if window: ax.set_xlim(0, (window[1] - window[0]) / 1e3)  # the steps' whole wall time: idle edges show
        if not streams: ax.text(0.5, 0.5, 'no GPU events (a CPU run)', ha='center', va='center', transform=ax.transAxes)
        handles, labels = ax.get_legend_handles_labels()
        if handles: ax.legend(dict(zip(labels, handles)).values(), dict(zip(labels, handles)).keys(), loc='upper right', fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--root', required=True, help='an image folder with class subfolders')
    p.add_argument('--device', default='cuda')
    p.add_argument('--model', default='resnet50')
    p.add_argument('--batch-size', type=int, default=256)
    p.add_argument('--workers', type=int, default=os.cpu_count())
    p.add_argument('--warmup', type=int, default=10, help='steps before anything is measured')
    p.add_argument('--timed', type=int, default=20, help='steps timed without the profiler')
    p.add_argument('--steps', type=int, default=6, help='steps in the trace')
    p.add_argument('--out', default='out/gpu')
    a = p.parse_args(argv)
    device = torch.device(a.device)
    if device.type == 'cuda' and not torch.cuda.is_available(): raise SystemExit('gpu_timeline: no CUDA device here')
    torch.backends.cudnn.benchmark = True
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        results = [measure(a.root, pf, a, device, Path(work)) for pf in (True, False)]
    for res, *_ in results:
        print(f"prefetcher {'on ' if res['prefetch'] else 'off'}: {res['images_per_s']:,.0f} images/s, GPU idle "
              f"{res['gpu_idle_fraction'] if res['gpu_idle_fraction'] is None else format(res['gpu_idle_fraction'], '.1%')}, "
              f"events per stream {res['streams']}")
    plot(results, out / 'prefetch_timeline.png')
    meta = dict(device=torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu', model=a.model,
                batch_size=a.batch_size, workers=a.workers, torch=torch.__version__, runs=[r for r, *_ in results])
    (out / 'prefetch_timeline.json').write_text(json.dumps(meta, indent=1, default=str))
    print(f"wrote {out / 'prefetch_timeline.png'} and {out / 'prefetch_timeline.json'}")


if __name__ == '__main__': main()
