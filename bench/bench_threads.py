"""Thread mode against worker processes and timm's loader, alternating in one run: throughput, memory, first batch, CPU.

    python bench/bench_threads.py [--root data/sample/train] [--rounds 3] [--workers 2] [--batch-size 64]

Each run is a fresh Python process (so the first batch and the memory are what a new training run sees) that builds a
training loader over `root` (RandomResizedCrop 224, flip, jitter 0.4, CPU output) and runs one epoch. Contenders:
timmdata with worker_mode='thread', timmdata with worker processes (the default), timm's create_loader. Runs alternate
contender by contender, round by round; printed are the medians over the rounds and the ratios against the process mode:
- img/s: images of the epoch over its wall time (the first batch included);
- first batch: seconds from create_loader to the first batch in hand;
- total RSS: the largest sum, over the epoch, of the resident memory of the main process and its worker processes
  (sampled at every batch; shared pages are counted once per process, as `ps` does); PSS: the same with shared
  pages divided among the processes that share them (psutil's memory_full_info), the fairer sum;
- CPU ms/image: user + system CPU seconds of the main process and its workers over the run, per image;
- with --epochs N: steady img/s, the median of N further epochs of the same loader, timed alone (no memory reads).
With --old TREE, the thread and process modes of TREE (its extension built) run too, as thread-old and process-old.
The machine may be shared with other work: compare the contenders within one run (they alternate), not across runs."""
import argparse, json, os, statistics, subprocess, sys
from pathlib import Path

CHILD = r'''
import json, os, resource, sys, time
import psutil, torch
root, kind, workers, bs, more = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
me = psutil.Process()
def mem():
    procs = [me] + me.children(recursive=True)
    rss = pss = 0
    for p in procs:
        try: rss += p.memory_info().rss; pss += p.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied): pass
    return rss, pss
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), 0.
    for p in me.children(recursive=True):
        try: t = p.cpu_times(); c += t.user + t.system
        except psutil.NoSuchProcess: pass
    return s.ru_utime + s.ru_stime + c + sum(getattr(resource.getrusage(resource.RUSAGE_CHILDREN), k) for k in ('ru_utime', 'ru_stime'))
if kind == 'timm':
    import timm.data
    from timmdata.tools.bench import LOADERS
else:
    from timmdata import ImageDataset, create_loader  # imported now: `import timmdata` alone defers its modules
c0, t0 = cpu(), time.perf_counter()  # each loader's modules imported before, as timm's are by `import timm.data`
if kind == 'timm': ld = LOADERS['timm'](root, True, bs, workers)
else:
    ld = create_loader(ImageDataset(root), (3, 224, 224), bs, is_training=True, color_jitter=0.4,
                                num_workers=workers, device='cpu', worker_mode=kind)
n, first, peak, cpu_last = 0, None, (0, 0), 0.
for x, y in ld:
    if first is None: first = time.perf_counter() - t0
    n += len(x)
    m = mem(); peak = (max(peak[0], m[0]), max(peak[1], m[1]))
    cpu_last = cpu()  # the workers' CPU time, read while they are alive
wall = time.perf_counter() - t0
steady = []  # --epochs: further epochs, nothing sampled during them (steady state, no first batch, no memory reads)
for _ in range(more):
    t, k = time.perf_counter(), 0
    for x, y in ld: k += len(x)
    steady.append(k / (time.perf_counter() - t))
print(json.dumps(dict(n=n, ips=n / wall, first=first, rss=peak[0] / 2**20, pss=peak[1] / 2**20, cpu_ms=(cpu_last - c0) / n * 1e3,
                      steady=sorted(steady)[len(steady) // 2] if steady else float('nan'))))
'''

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root', help='image folder with class subfolders (default: the sample dataset, made when missing)')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--workers', type=int, default=2)
    p.add_argument('--batch-size', type=int, default=64)
    p.add_argument('--contenders', default='thread,process,timm')
    p.add_argument('--epochs', type=int, default=0, help='further epochs per run after the first, timed alone: steady img/s')
    p.add_argument('--old', help="another source tree (its extension built): its thread and process modes run too, as 'thread-old' and 'process-old'")
    a = p.parse_args(argv)
    from timmdata.tools.bench import bench_root
    root = str(bench_root(a.root))
    kinds = a.contenders.split(',') + ([f'{k}-old' for k in ('thread', 'process')] if a.old else [])
    res = {k: [] for k in kinds}
    env = dict(os.environ, PYTHONWARNINGS='ignore')
    old_env = dict(env, PYTHONPATH=str(Path(a.old).resolve())) if a.old else None
    for r in range(a.rounds):
        for k in kinds:
            old = k.endswith('-old')
            out = subprocess.run([sys.executable, '-c', CHILD, root, k.removesuffix('-old'), str(a.workers), str(a.batch_size),
                                  str(a.epochs)], capture_output=True, text=True, env=old_env if old else env,
                                 cwd=old_env['PYTHONPATH'] if old else None)
            if out.returncode: raise SystemExit(f'{k} failed:\n{out.stderr[-3000:]}')
            res[k].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f'round {r + 1} {k:8s} {res[k][-1]}', file=sys.stderr, flush=True)
    med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]} for k, v in res.items()}
    base = med.get('process')
    print(f'{med[kinds[0]]["n"]:.0f} images an epoch, {a.workers} workers, batch {a.batch_size}, {os.cpu_count()} CPUs, '
          f'{a.rounds} rounds alternating (medians; the machine may be shared: noisy)')
    print(f'{"":12s} {"img/s":>8s} {"first batch s":>14s} {"total RSS MB":>13s} {"total PSS MB":>13s} {"CPU ms/img":>11s}'
          + (f' {"steady img/s":>13s}' if a.epochs else ''))
    for k, m in med.items():
        print(f'{k:12s} {m["ips"]:8.0f} {m["first"]:14.2f} {m["rss"]:13.0f} {m["pss"]:13.0f} {m["cpu_ms"]:11.2f}'
              + (f' {m["steady"]:13.0f}' if a.epochs else ''))
    if base:
        for k, m in med.items():
            if k == 'process': continue
            print(f'{k} / process: throughput {m["ips"] / base["ips"]:.2f}x, first batch {m["first"] / base["first"]:.2f}x the time, '
                  f'RSS {m["rss"] / base["rss"]:.2f}x, PSS {m["pss"] / base["pss"]:.2f}x, CPU per image {m["cpu_ms"] / base["cpu_ms"]:.2f}x'
                  + (f', steady throughput {m["steady"] / base["steady"]:.2f}x' if a.epochs else ''))

if __name__ == '__main__': main()
