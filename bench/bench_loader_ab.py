"""The default loader's CPU per image with worker processes, two source trees alternating in one run (issue 60).

`bench_train.py --old` compares trees with no workers (every stage in one process); this compares them as the peers
benchmark runs the loader: `create_loader` defaults, 2 worker processes, batch 64, device cpu, colour jitter off, on
the photographic set (`timmdata.tools.photos`) or a folder given. Each round runs tree A, then tree B, each in a fresh
process with that tree first on PYTHONPATH (its extension built): one warm-up epoch, then --epochs timed epochs. The
figure is the CPU time of the whole process tree (the main process and its workers, user + system, from psutil) per
image, which moves less with the machine's load than images/s; the medians and their ratio A/B are printed.

    python bench/bench_loader_ab.py --a OLD_TREE --b . [--pipeline train|eval] [--rounds 5] [--epochs 3] [--root DIR]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import json, sys, time, psutil
from timmdata import create_dataset, create_loader
train, root, epochs = sys.argv[1] == 'train', sys.argv[2], int(sys.argv[3])
ds = create_dataset('', root=root, is_training=train)
ld = create_loader(ds, (3, 224, 224), 64, is_training=train, num_workers=2, color_jitter=None, device='cpu')
me = psutil.Process()
def cpu():
    t = me.cpu_times(); s = t.user + t.system
    for c in me.children(recursive=True):
        try:
            ct = c.cpu_times(); s += ct.user + ct.system
        except psutil.Error:
            pass
    return s
for x in ld: pass
c0, w0, n = cpu(), time.time(), 0
for e in range(epochs):
    for x, y in ld: n += len(x)
print(json.dumps(dict(ms=(cpu() - c0) / n * 1e3, ips=n / (time.time() - w0))))
'''


def run(tree: str, a) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    p = subprocess.run([sys.executable, '-c', CHILD, a.pipeline, a.root, str(a.epochs)], env=env, capture_output=True,
                       text=True, cwd='/tmp')
    if p.returncode:
        sys.exit(f'bench_loader_ab: tree {tree} failed: {p.stderr.strip().splitlines()[-1:]}')
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--a', required=True, help='source tree A (e.g. a worktree of the version before)')
    ap.add_argument('--b', default='.', help='source tree B (default: this one)')
    ap.add_argument('--pipeline', default='train', choices=('train', 'eval'))
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--root', default=None, help='image folder with class subfolders (default: the photographic set)')
    a = ap.parse_args(argv)
    if a.root is None:
        from timmdata.tools.photos import make_photo_set
        a.root = str(make_photo_set(Path('/tmp/timmdata_photos_1500'), n=1500) / 'train')
    ra, rb = [], []
    print(f'{a.pipeline}, {a.root}, 2 workers, batch 64, {a.epochs} timed epochs a run; load: {os.getloadavg()}')
    for r in range(a.rounds):
        ra.append(run(a.a, a))
        rb.append(run(a.b, a))
        print(f'round {r}: A {ra[-1]["ms"]:.3f} ms/img {ra[-1]["ips"]:.0f} img/s   B {rb[-1]["ms"]:.3f} ms/img '
              f'{rb[-1]["ips"]:.0f} img/s', flush=True)
    ma, mb = (statistics.median(x['ms'] for x in rs) for rs in (ra, rb))
    ia, ib = (statistics.median(x['ips'] for x in rs) for rs in (ra, rb))
    print(f'median CPU ms/img: A {ma:.3f}, B {mb:.3f}, A/B {ma / mb:.3f}; median img/s A {ia:.0f}, B {ib:.0f}, '
          f'B/A {ib / ia:.3f}; load after: {os.getloadavg()}')


if __name__ == '__main__':
    main()
