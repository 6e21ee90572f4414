"""How many workers? A grid of loader settings against `num_workers='auto'` and timm's default (issue 43), in one run,
contenders alternating.

    python bench/bench_knobs.py [--n 256] [--batch-size 32] [--rounds 1] [--combos train:none,train:sleep,...]

Each contender is a fresh Python process that builds `create_loader(..., device='cpu')` over generated 500x375 photos
(workload 'train': the default training pipeline from the JPEGs; 'eval': the eval pipeline; 'store': training from a
decode-once store built by `timmdata.store.builder.build_cache`) and runs epochs with a model step in the training thread after
each batch: 'none', 'sleep' (30 ms: a GPU step, which leaves the CPU free) or 'cpu' (a small conv net's forward and
backward on the batch: a CPU-bound step). A grid setting runs one warm-up epoch and two measured ones; the 'auto'
loader (num_workers, worker_mode and prefetch_factor 'auto'; windows of 6 batches after 2 to settle) runs until its
search is done (its first-epochs cost: the time and batches until then), then two measured epochs.
Printed per (workload, step): images/s of the measured epochs, the consumer's wait as a share of the wall time, the
PSS of the process tree at the end (shared pages divided among the processes), and each against the best grid
setting; then the answers the issue asks: auto against the best grid setting where loading is the bottleneck, auto's
workers against the fewest grid workers with < 2% wait where the model is, its memory against its budget, and the
cores and memory saved against timm's default (4 worker processes). `--json PATH` keeps the rows for the picture."""
import argparse, json, os, random, statistics, subprocess, sys, tempfile, time
from pathlib import Path

CHILD = r'''
import json, os, sys, time, warnings
warnings.simplefilter('ignore')
import torch
from timmdata import ImageDataset, create_loader
a = json.loads(sys.argv[1])
net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 5, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2),
                          torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
def step(x):
    if a['step'] == 'cpu': net(x).sum().backward()
    elif a['step'] == 'sleep': time.sleep(0.03)
sys.path.insert(0, '__BENCH__')  # bench/: the shared helpers
from _common import pss
def tree():
    me = os.getpid()
    kids = [int(p) for t in os.listdir(f'/proc/{me}/task') for p in open(f'/proc/{me}/task/{t}/children').read().split()]
    return pss(me) + sum(pss(k) for k in kids)
base = tree()
s = a['setting']
kw = dict(num_workers='auto', worker_mode='auto', prefetch_factor='auto') if s == 'auto' else \
     dict(worker_mode=s[0], num_workers=s[1], prefetch_factor=s[2] if s[1] else None)
t0 = time.perf_counter()
ld = create_loader(ImageDataset(a['root']), 224, a['bs'], is_training=a['pipe'] != 'eval', device='cpu', seed=0, **kw)
if s == 'auto': ld.settle, ld.window = 2, 6
epoch, tune_s, tune_batches, nb = 0, None, None, 0
def run_epoch():
    global epoch, nb
    ld.set_epoch(epoch); epoch += 1
    for x, y in ld:
        step(x); nb += 1
while True:  # warm-up (and the search)
    run_epoch()
    if s != 'auto' or ld.tuning()['done'] or epoch >= 12: break
if s == 'auto':
    if not ld.tuning()['done']: ld.decide()
    tune_s, tune_batches = time.perf_counter() - t0, nb
st = ld.stats(); st.reset()
mem = 0
for _ in range(2):
    run_epoch(); mem = max(mem, tree() - base)
out = dict(ips=st.images / st.wall, stall=st.t['consumer_wait'] / st.wall, mem=mem, tune_s=tune_s, tune_batches=tune_batches)
if s == 'auto':
    t = ld.tuning(); out.update(chosen=t['chosen'], budget=t['budget'], trials=len(t['trials']), why=t['why'])
print(json.dumps(out))
'''.replace('__BENCH__', str(Path(__file__).resolve().parent))


def run(args: dict) -> dict:
    out = subprocess.run([sys.executable, '-c', CHILD, json.dumps(args)], capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def label(s) -> str:
    return 'auto' if s == 'auto' else f'{s[0][:4]} w={s[1]} pf={s[2]}'


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--n', type=int, default=256, help='training images (500x375 JPEGs, generated)')
    p.add_argument('--batch-size', type=int, default=32)
    p.add_argument('--rounds', type=int, default=1)
    p.add_argument('--combos', default='train:none,train:sleep,train:cpu,eval:none,store:none,store:sleep')
    p.add_argument('--grid', default='process:1:2,process:2:2,process:4:2,thread:1:2,thread:2:2,thread:4:2,'
                                      'process:2:4,thread:2:4,process:0:2')
    p.add_argument('--json', help='write the rows here (for the picture)')
    a = p.parse_args()
    from timmdata import make_sample_dataset
    from timmdata.store.builder import build_cache
    tmp = Path(tempfile.mkdtemp())
    root = make_sample_dataset(tmp / 's', n_train=a.n // 10, n_val=1, size=(500, 375)) / 'train'
    store = tmp / 'store'
    build_cache(root, store, progress=False, num_workers=2)
    grid = [(m, int(w), int(f)) for m, w, f in (g.split(':') for g in a.grid.split(','))]
    timm_default = ('process', 4, 2)
    combos = [tuple(c.split(':')) for c in a.combos.split(',')]
    rows = {c: {} for c in combos}
    rng = random.Random(0)
    print(f'# bench_knobs: {a.n} images 500x375, batch {a.batch_size}, 224 px, device cpu, {os.cpu_count()} cores '
          f'(a machine shared with other agents: absolute numbers move with their load), rounds {a.rounds}')
    t0 = time.time()
    for r in range(a.rounds):
        for c in combos:
            order = grid + ['auto']
            rng.shuffle(order)  # alternating: each (workload, step) runs its contenders back to back, in a new order each round
            for s in order:
                pipe, step = c
                src = str(store if pipe == 'store' else root)
                res = run(dict(root=src, pipe=pipe, step=step, bs=a.batch_size, setting=s))
                rows[c].setdefault(label(s), []).append(res | dict(setting=s))
                print(f'  [{time.time() - t0:6.0f} s] {pipe}/{step} {label(s)}: {res["ips"]:.0f} img/s, wait {res["stall"]:.0%}',
                      file=sys.stderr, flush=True)
    med = statistics.median
    summary = {}
    for c in combos:
        pipe, step = c
        R = {k: dict(ips=med([x['ips'] for x in v]), stall=med([x['stall'] for x in v]), mem=med([x['mem'] for x in v]),
                     setting=v[0]['setting'], last=v[-1]) for k, v in rows[c].items()}
        best = max((k for k in R if k != 'auto'), key=lambda k: R[k]['ips'])
        print(f'\n## workload {pipe}, model step {step}')
        print(f'{"setting":22s} {"img/s":>7s} {"x best":>7s} {"wait":>6s} {"MB":>6s}')
        for k in sorted(R, key=lambda k: -R[k]['ips']):
            print(f'{k:22s} {R[k]["ips"]:7.0f} {R[k]["ips"] / R[best]["ips"]:7.2f} {R[k]["stall"]:6.1%} {R[k]["mem"] / 2**20:6.0f}')
        au = R['auto']['last']
        ch, bud = au['chosen'], au['budget']
        keep = [k for k in R if k != 'auto' and R[k]['stall'] < 0.02]
        fewest = min((R[k]['setting'][1] for k in keep), default=None)
        td = R.get(label(timm_default))
        print(f"auto chose {ch} ({au['why']}); search: {au['tune_batches']} batches, {au['tune_s']:.1f} s, "
              f"{au['trials']} settings")
        print(f"auto / best grid ({best}): {R['auto']['ips'] / R[best]['ips']:.2f}x; grid settings with < 2% wait: "
              f"{len(keep)} (fewest workers: {fewest}); auto's workers: {ch['num_workers']}")
        print(f"auto's memory {R['auto']['mem'] / 2**20:.0f} MB, its budget {bud['memory'] / 2**20:.0f} MB: "
              f"{'within' if R['auto']['mem'] <= bud['memory'] else 'OVER'}")
        if td:
            print(f"against timm's default (process, 4 workers): {R['auto']['ips'] / td['ips']:.2f}x the images/s, "
                  f"{ch['num_workers']} workers instead of 4, {R['auto']['mem'] / 2**20:.0f} MB instead of "
                  f"{td['mem'] / 2**20:.0f} MB")
        summary[f'{pipe}:{step}'] = {k: {kk: vv for kk, vv in v.items() if kk != 'last'} | (
            dict(chosen=ch) if k == 'auto' else {}) for k, v in R.items()}
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1))


if __name__ == '__main__':
    main()
