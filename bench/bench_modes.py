"""Thread workers against worker processes with a model step in the training thread, and the CPU path's batch ring
against plain per-batch shared memory (issue 41), alternating in one run.

    python bench/bench_modes.py [--n 1000] [--rounds 3] [--workers 2]

Each run is a fresh Python process that builds `create_loader(..., device='cpu', num_workers=W, worker_mode=M)` over
generated 500x375 photos (the default training pipeline, or the default eval pipeline), runs two epochs and, after each
batch, a model step in the training thread: 'cpu' (a small conv net's forward and backward on the batch, torch's
threads: a CPU-bound step), 'sleep' (30 ms: a GPU step, which leaves the CPU free), or 'none'. Printed per contender
(medians over rounds): img/s of the second epoch, the model step's mean time against the same step timed alone before
the loader starts (its slowdown), the first batch's time, and the PSS of the process tree at the end (shared pages
divided among the processes: /proc/*/smaps_rollup). `--ring`: also the process mode with `collate_fn=fast_collate`
(each batch a fresh shared-memory block, no ring) against the default (the ring), step 'none'."""
import argparse, atexit, json, os, shutil, statistics, subprocess, sys, tempfile
from pathlib import Path

CHILD = r'''
import json, os, sys, time, warnings
warnings.simplefilter('ignore')
import torch
from timmdata import ImageDataset, create_loader
from timmdata.batch.collate import fast_collate
root, mode, pipe, step, ring, workers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == '1', int(sys.argv[6])
net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 5, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2),
                          torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
def model_step(x):
    if step == 'cpu':
        net(x).sum().backward()
    elif step == 'sleep':
        time.sleep(0.03)
x0 = torch.randn(64, 3, 224, 224)
for _ in range(2): model_step(x0)
t0 = time.perf_counter(); [model_step(x0) for _ in range(5)]; alone = (time.perf_counter() - t0) / 5
kw = {} if ring else dict(collate_fn=fast_collate)
t0 = time.perf_counter()
ld = create_loader(ImageDataset(root), 224, 64, is_training=pipe == 'train', num_workers=workers, device='cpu',
                   worker_mode=mode, seed=0, **kw)
first, steps, n, wall = None, [], 0, 0.0
for epoch in range(2):
    ld.set_epoch(epoch); e0 = time.perf_counter()
    for x, y in ld:
        if first is None: first = time.perf_counter() - t0
        s0 = time.perf_counter(); model_step(x); steps.append(time.perf_counter() - s0)
        if epoch == 1: n += len(x)
    if epoch == 1: wall = time.perf_counter() - e0
sys.path.insert(0, '__BENCH__')  # bench/: the shared helpers
from _common import pss
kids = [int(p) for p in open(f'/proc/{os.getpid()}/task/{os.getpid()}/children').read().split()]
mem = pss(os.getpid()) + sum(pss(k) for k in kids)
print(json.dumps(dict(ips=n / wall, step=sum(steps) / len(steps), alone=alone, first=first, pss=mem)))
'''.replace('__BENCH__', str(Path(__file__).resolve().parent))


def run(root, mode, pipe, step, ring, workers):
    out = subprocess.run([sys.executable, '-c', CHILD, str(root), mode, pipe, step, '1' if ring else '0', str(workers)],
                         capture_output=True, text=True, timeout=600)
    if out.returncode: raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--n', type=int, default=1000, help='training images (500x375 JPEGs, generated)')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--workers', type=int, default=2)
    p.add_argument('--steps', default='none,sleep,cpu')
    p.add_argument('--pipes', default='train,eval')
    p.add_argument('--ring', action='store_true', help='also the process mode without the ring (fast_collate)')
    p.add_argument('--root', help='an image folder (default: generated)')
    a = p.parse_args()
    root = a.root
    if root is None:
        from timmdata import make_sample_dataset
        tmp = Path(tempfile.mkdtemp())
        atexit.register(shutil.rmtree, tmp, True)  # the generated images go when the run ends
        root = make_sample_dataset(tmp / 's', n_train=a.n // 10, n_val=1, size=(500, 375)) / 'train'
    cons = [(m, pi, st, True) for pi in a.pipes.split(',') for st in a.steps.split(',') for m in ('thread', 'process')]
    if a.ring:
        cons += [c for pi in a.pipes.split(',') for c in (('process', pi, 'none', True), ('process', pi, 'none', False))
                 if c not in cons]
    res = {c: [] for c in cons}
    for r in range(a.rounds):
        for c in cons:
            res[c].append(run(root, *c, a.workers))
        print(f'round {r + 1}/{a.rounds} done, load average {os.getloadavg()[0]:.1f}', file=sys.stderr)
    med = {c: {k: statistics.median(v[k] for v in rs) for k in rs[0]} for c, rs in res.items()}
    print(f'{"mode":8s} {"pipeline":6s} {"step":5s} {"ring":4s} {"img/s":>7s} {"step ms":>8s} {"alone ms":>8s} '
          f'{"slowdown":>8s} {"first s":>7s} {"PSS MB":>7s}')
    for c, m in med.items():
        print(f'{c[0]:8s} {c[1]:6s} {c[2]:5s} {"yes" if c[3] else "no":4s} {m["ips"]:7.0f} {m["step"] * 1e3:8.1f} '
              f'{m["alone"] * 1e3:8.1f} {m["step"] / max(m["alone"], 1e-9):8.2f} {m["first"]:7.2f} {m["pss"] / 2**20:7.0f}')
    print('\nthread / process (same pipeline and step):')
    for pi in a.pipes.split(','):
        for st in a.steps.split(','):
            t, pr = med[('thread', pi, st, True)], med[('process', pi, st, True)]
            print(f'  {pi:5s} step {st:5s}: img/s {t["ips"] / pr["ips"]:.2f}x, model step {t["step"] / pr["step"]:.2f}x, '
                  f'first batch {t["first"] / pr["first"]:.2f}x, PSS {t["pss"] / pr["pss"]:.2f}x')
    if a.ring:
        print('\nring / no ring (process mode, step none):')
        for pi in a.pipes.split(','):
            r1, r0 = med[('process', pi, 'none', True)], med[('process', pi, 'none', False)]
            print(f'  {pi:5s}: img/s {r1["ips"] / r0["ips"]:.2f}x, PSS {r1["pss"] / r0["pss"]:.2f}x')
    print(f'load average at the end: {os.getloadavg()[0]:.1f} (2 cores)')


if __name__ == '__main__':
    main()
