"""How many workers? A grid of loader settings against `num_workers='auto'` and timm's default (issue 43), in one run,
contenders alternating.

    python bench/bench_knobs.py --data /tmp/knobs-data --json bench/results/knobs_DATE.json > bench/results/knobs_DATE.txt
    python bench/bench_knobs.py --data /tmp/knobs-data --combos train:none,train:sleep,store:sleep \
        --grid process:0:2,process:1:2,process:2:2,process:4:2,thread:2:2 --seconds 2.5

The first is the grid (9 pairs x 11 contenders, about 17 minutes on 2 quiet cores, a minute more to make the 2,000
images and the store the first time); the second a check of about 3 minutes on the same data.

Each contender is a fresh Python process that builds `create_loader(..., device='cpu')` over generated 500x375 photos
(workload 'train': the default training pipeline from the JPEGs; 'eval': the eval pipeline; 'store': training from a
decode-once store built by `timmdata.store.builder.build_cache`) and runs it with a model step in the training thread
after each batch: 'none', 'sleep' (30 ms: a GPU step, which leaves the CPU free) or 'cpu' (a small conv net's forward
and backward on the batch, on one torch thread: a CPU-bound step in the training thread; on torch's default of a thread
per core its threads and the loader's fight for the cores, and on this machine the step swung from 14 to 200 ms with
the neighbours' load). Epochs follow one another as in training.

A grid setting (`mode:workers:prefetch`; workers 0 is the main process) runs `--warm` batches, then is measured for
`--seconds` of wall time (whole batches, across epochs): the steady state. The 'auto' loader (num_workers, worker_mode
and prefetch_factor 'auto', its default windows) runs until its search is decided (its cost: batches and seconds, and
the seconds over what those batches take at its steady rate), then `--warm` batches, then the same measurement.

Per (workload, step): images/s, the consumer's wait for the workers (a share of the wall time: its wait inside next()
less the device step, which on the CPU runs in the consumer's thread whatever the workers), the cores the process tree
used (its CPU seconds over the wall seconds) and images/s per core used (on a shared machine a contender that ran while
the neighbours took a core shows as fewer cores, not as a worse setting), and the memory the tree grew by
(`timmdata.engine.tune.process_memory`: the PSS of its anonymous and shared-memory pages; library pages left out, their
PSS moves with every other process on the machine mapping the same files; the whole PSS is kept as `pss` in the JSON),
each against the best grid setting; then the issue's answers: where loading is the bottleneck (no grid setting kept the
wait under 2%), auto's steady images/s against the best grid setting's (bar: 0.95x); where the model is, auto's workers
against the fewest of the grid settings under 2%; auto's memory against its budget; against timm's default (4 worker
processes, look-ahead 2) the cores and memory saved. `--json PATH` keeps everything for the picture (`plot_knobs.py`).

The default grid: processes x0, x1, x2, x4 and threads x1, x2 at look-ahead 2; look-ahead 1 and 4 at process x2, and 4
at process x1 and thread x2. Left out of the full 5 x 2 x 3 grid, and why (2 cores): 3 workers and threads x4 (more
workers than cores only share the two; one interpreter's lock for the threads), look-ahead 1 and 4 elsewhere
(look-ahead only absorbs bursts: with the workers busy all along it adds nothing; the counts that can win are 1 and 2)."""
import argparse, atexit, json, os, random, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

CHILD = r'''
import json, os, sys, time, warnings
warnings.simplefilter('ignore')
import torch
from timmdata import ImageDataset, create_loader
from timmdata.core.stages import waits
a = json.loads(sys.argv[1])
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 5, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2),
                          torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
if a['step'] == 'cpu':
    torch.set_num_threads(1)  # the training thread alone: with torch's thread a core, its threads and the workers fight
def step(x):
    if a['step'] == 'cpu': net(x).sum().backward()
    elif a['step'] == 'sleep': time.sleep(0.03)
sys.path.insert(0, '__BENCH__')  # bench/: the shared helpers
from _common import proc_cpu, pss
def kids():
    me = os.getpid()
    return [int(p) for t in os.listdir(f'/proc/{me}/task') for p in open(f'/proc/{me}/task/{t}/children').read().split()]
from timmdata.engine.tune import process_memory
def tree_pss():  # the whole PSS, library pages too: it moves with the other processes on the machine mapping them
    return pss(os.getpid()) + sum(pss(k) for k in kids())
def tree_mem():  # the loader's own: anonymous and shared-memory pages (heap, stacks, batches in /dev/shm), PSS
    return process_memory(os.getpid()) + sum(process_memory(k) for k in kids())
def tree_cpu():
    return {p: proc_cpu(p) for p in [os.getpid()] + kids()}
base, base_pss = tree_mem(), tree_pss()
s = a['setting']
kw = dict(num_workers='auto', worker_mode='auto', prefetch_factor='auto') if s == 'auto' else \
     dict(worker_mode=s[0], num_workers=s[1], prefetch_factor=s[2] if s[1] else None)
clock = time.perf_counter
t0 = clock()
ld = create_loader(ImageDataset(a['root']), 224, a['bs'], is_training=a['pipe'] != 'eval', device='cpu', seed=0, **kw)
def stream():
    epoch = 0
    while True:
        ld.set_epoch(epoch); epoch += 1
        yield from ld
batches = stream()
def run(n):
    for _ in range(n):
        x, y = next(batches); step(x)
out = dict(batches_per_epoch=len(ld))
if s == 'auto':
    n = 0
    while not ld.tuning()['done']:
        run(1); n += 1
        if n >= 5000: ld.decide()  # never reached on this grid; a bound all the same
    out.update(search_batches=n, search_s=clock() - t0, cost=ld.tuning()['cost'])
run(a['warm'])
cpu0, st0, m0, images, nb = tree_cpu(), ld.stats().snapshot(), clock(), 0, 0
while clock() - m0 < a['seconds'] or nb < 8:
    x, y = next(batches); step(x); images += len(x); nb += 1
wall = clock() - m0
cpu1 = tree_cpu()
w = ld.stats().since(st0)
ww, (wait, own) = max(w.wall, 1e-9), waits(w)  # the wait for the workers, a perfect loader's step (as the tuner's)
out.update(ips=images / wall, wall=wall, batches=nb, stall=min(wait / ww, 1.0),
           device=w.t['device'] / ww, ideal_ips=images / max(own, 1e-9),
           cores=sum(cpu1[p] - cpu0[p] for p in cpu1 if p in cpu0) / wall, mem=tree_mem() - base, pss=tree_pss() - base_pss,
           load=os.getloadavg()[0])
if s == 'auto':
    t = ld.tuning()
    out.update(chosen=t['chosen'], budget=t['budget'], trials=t['trials'], why=t['why'], searches=t['searches'])
print(json.dumps(out), flush=True)
os._exit(0)  # the loader's workers end with the process
'''.replace('__BENCH__', str(Path(__file__).resolve().parent))

TIMM_DEFAULT = ('process', 4, 2)
IMAGENET = 1_281_167  # images in an ImageNet-1k training epoch: the search's cost against a realistic first epoch


def run(args: dict) -> dict:
    out = subprocess.run([sys.executable, '-c', CHILD, json.dumps(args)], capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def label(s) -> str:
    return 'auto' if s == 'auto' else f'{s[0][:4]} w={s[1]} pf={s[2]}' if s[1] else 'main process (w=0)'


def summarise(rows: dict, target: float = 0.02) -> dict:
    "One (workload, step)'s contenders (label: list of runs) -> medians per contender and the issue's answers."
    med = statistics.median
    R = {k: dict(setting=v[0]['setting'], **{f: med([x[f] for x in v]) for f in ('ips', 'stall', 'mem', 'pss', 'cores', 'ideal_ips')})
         for k, v in rows.items()}
    grid = [k for k in R if k != 'auto']
    best = max(grid, key=lambda k: R[k]['ips'])
    under = [k for k in grid if R[k]['stall'] < target and R[k]['setting'][1] > 0]
    au = rows['auto'][-1]  # the last round's decision and search
    A = R['auto'] | dict(chosen=au['chosen'], budget=au['budget'], why=au['why'], trials=au['trials'])
    steady_bps = A['ips'] / au['bs']
    cost = au['cost']  # the tuner's own clock: from its first pass's start (the loader built) to the decision
    A['search'] = dict(batches=cost['batches'], seconds=cost['seconds'], wall_s=au['search_s'],
                       extra_s=cost['seconds'] - cost['batches'] / steady_bps,
                       epochs=cost['batches'] / au['batches_per_epoch'])
    A['search']['of_imagenet_epoch'] = A['search']['extra_s'] / (IMAGENET / A['ips'])
    ideal = med([r['ideal_ips'] for r in R.values()])  # the model and device step alone: a perfect loader's images/s
    ans = dict(best=best, vs_best=A['ips'] / R[best]['ips'], bound='model' if under else 'loading', ideal_ips=ideal,
               best_vs_ideal=R[best]['ips'] / ideal,
               fewest_under=min((R[k]['setting'][1] for k in under), default=None),
               auto_workers=A['chosen']['num_workers'], within_budget=A['mem'] <= A['budget']['memory'])
    td = R.get(label(TIMM_DEFAULT))
    if td:
        ans['vs_timm'] = dict(ips=A['ips'] / td['ips'], workers_saved=TIMM_DEFAULT[1] - A['chosen']['num_workers'],
                              cores_saved=td['cores'] - A['cores'], mem_saved=td['mem'] - A['mem'])
    R['auto'] = A
    return dict(rows=R, answers=ans)


def report(combo: str, S: dict):
    "The text for one (workload, step)."
    R, ans = S['rows'], S['answers']
    A, best = R['auto'], R[S['answers']['best']]
    pipe, step = combo.split(':')
    print(f'\n## workload {pipe}, model step {step}: {ans["bound"]} is the bottleneck (a perfect loader: '
          f'{ans["ideal_ips"]:.0f} img/s, the model and device steps alone; the best grid setting reaches '
          f'{ans["best_vs_ideal"]:.2f}x that)')
    print(f'{"setting":20s} {"img/s":>7s} {"x best":>7s} {"wait":>6s} {"cores":>6s} {"img/s/core":>10s} {"MB":>6s}')
    for k in sorted(R, key=lambda k: -R[k]['ips']):
        r = R[k]  # img/s per core used: on a shared machine, a contender that got fewer cores shows here, not in img/s
        print(f'{k:20s} {r["ips"]:7.0f} {r["ips"] / best["ips"]:7.2f} {r["stall"]:6.1%} {r["cores"]:6.2f} '
              f'{r["ips"] / max(r["cores"], 1e-9):10.0f} {r["mem"] / 2**20:6.0f}')
    ch, se = A['chosen'], A['search']
    print(f"auto chose {ch['worker_mode']} x{ch['num_workers']}, look-ahead {ch['prefetch_factor']} ({A['why']})")
    print(f"auto's search: {len(A['trials'])} settings, {se['batches']} batches ({se['epochs']:.1f} epochs of this "
          f"bench), {se['seconds']:.1f} s ({se['wall_s']:.1f} s with building the first loader), {se['extra_s']:+.1f} s over "
          f"the same batches at its steady rate, first batches' worker start included "
          f"({se['of_imagenet_epoch']:.2%} of an ImageNet epoch at that rate)")
    bar = 'meets' if ans['vs_best'] >= 0.95 else 'BELOW'
    line = f"auto's steady img/s / the best grid setting's ({ans['best']}): {ans['vs_best']:.2f}x"
    if ans['bound'] == 'loading':
        line += f' ({bar} the 0.95x bar: loading is the bottleneck)'
    else:
        ok = 'meets' if ans['auto_workers'] <= ans['fewest_under'] else 'MORE'
        line += (f"; the model is the bottleneck: fewest grid workers with < 2% wait {ans['fewest_under']}, auto's "
                 f"{ans['auto_workers']} ({ok})")
    print(line)
    print(f"auto's memory {A['mem'] / 2**20:.0f} MB, its budget {A['budget']['memory'] / 2**20:.0f} MB: "
          f"{'within' if ans['within_budget'] else 'OVER'}")
    if 'vs_timm' in ans:
        v = ans['vs_timm']
        print(f"against timm's default (process x4, look-ahead 2): {v['ips']:.2f}x the images/s with "
              f"{v['workers_saved']} fewer workers, {v['cores_saved']:+.2f} cores and {v['mem_saved'] / 2**20:+.0f} MB "
              f"of memory saved (positive: auto uses less)")


def overview(summary: dict):
    "One line per (workload, step): the answers side by side."
    print('\n## In one table')
    print(f'{"workload/step":14s} {"bound":8s} {"auto chose":14s} {"auto/best":>9s} {"search s":>8s} {"extra s":>7s} '
          f'{"fewest<2%":>9s} {"budget":>7s} {"vs timm x":>9s} {"cores saved":>11s} {"MB saved":>8s}')
    for c, S in summary.items():
        a, A = S['answers'], S['rows']['auto']
        ch, v = A['chosen'], a.get('vs_timm', {})
        print(f"{c:14s} {a['bound']:8s} {ch['worker_mode'][:4] + ' x' + str(ch['num_workers']) + ' pf' + str(ch['prefetch_factor']):14s} "
              f"{a['vs_best']:9.2f} {A['search']['seconds']:8.1f} {A['search']['extra_s']:7.1f} "
              f"{str(a['fewest_under']):>9s} {'within' if a['within_budget'] else 'OVER':>7s} "
              f"{v.get('ips', float('nan')):9.2f} {v.get('cores_saved', float('nan')):11.2f} "
              f"{v.get('mem_saved', float('nan')) / 2**20:8.0f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--n', type=int, default=2000,
                   help="training images (500x375 JPEGs, generated): each epoch's first batch waits for a whole batch to "
                        'be made, whatever the setting; 62 batches an epoch keep that near 1.5%% of the time')
    p.add_argument('--batch-size', type=int, default=32)
    p.add_argument('--rounds', type=int, default=1, help='each contender runs once a round; the order is new each round')
    p.add_argument('--seconds', type=float, default=4.0, help='wall seconds of the steady-state measurement')
    p.add_argument('--warm', type=int, default=6, help='batches before the measurement (after the search, for auto)')
    p.add_argument('--combos', default=','.join(f'{w}:{s}' for w in ('train', 'eval', 'store') for s in ('none', 'sleep', 'cpu')))
    p.add_argument('--grid', default='process:0:2,process:1:2,process:2:2,process:4:2,process:1:4,process:2:1,'
                                      'process:2:4,thread:1:2,thread:2:2,thread:2:4')
    p.add_argument('--json', help='write the rows and the answers here (for the picture)')
    p.add_argument('--data', help='a folder for the generated images and store, kept and used again (default: a new temporary one)')
    a = p.parse_args()
    from timmdata import make_sample_dataset
    from timmdata.store.builder import build_cache
    t0 = time.time()
    tmp = Path(a.data) if a.data else Path(tempfile.mkdtemp())
    if not a.data: atexit.register(shutil.rmtree, tmp, True)  # a temporary work folder goes when the run ends
    root, store = tmp / 's' / 'train', tmp / 'store'
    if not (tmp / 'made.json').exists() or json.loads((tmp / 'made.json').read_text()) != a.n:
        make_sample_dataset(tmp / 's', n_train=a.n // 10, n_val=1, size=(500, 375))
        build_cache(root, store, progress=False, num_workers=2)
        (tmp / 'made.json').write_text(json.dumps(a.n))  # a folder made for these images, kept by --data
    grid = [(m, int(w), int(f)) for m, w, f in (g.split(':') for g in a.grid.split(','))]
    combos = a.combos.split(',')
    rows = {c: {} for c in combos}
    rng = random.Random(0)
    print(f'# bench_knobs: {a.n} images 500x375, batch {a.batch_size}, 224 px, device cpu, {os.cpu_count()} cores, '
          f'rounds {a.rounds}, steady state over {a.seconds:g} s after {a.warm} batches; load average at the start '
          f'{os.getloadavg()[0]:.1f}; data made in {time.time() - t0:.0f} s')
    print('# ' + ' '.join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]))
    for r in range(a.rounds):
        for c in combos:
            pipe, step = c.split(':')
            order = grid + ['auto']
            rng.shuffle(order)  # alternating: a (workload, step)'s contenders back to back, in a new order each round
            for s in order:
                src = str(store if pipe == 'store' else root)
                res = run(dict(root=src, pipe=pipe, step=step, bs=a.batch_size, setting=s, warm=a.warm,
                               seconds=a.seconds))
                rows[c].setdefault(label(s), []).append(res | dict(setting=s, bs=a.batch_size))
                extra = f", chose {res['chosen']} after {res['search_batches']} batches" if s == 'auto' else ''
                print(f'  [{time.time() - t0:6.0f} s] {c} {label(s)}: {res["ips"]:.0f} img/s, wait {res["stall"]:.0%}, '
                      f'cores {res["cores"]:.2f}, load {res["load"]:.1f}{extra}', file=sys.stderr, flush=True)
    summary = {c: summarise(rows[c]) for c in combos}
    for c in combos:
        report(c, summary[c])
    overview(summary)
    print(f'\n# {time.time() - t0:.0f} s in all; load average at the end {os.getloadavg()[0]:.1f}')
    if a.json:
        meta = dict(argv=sys.argv[1:], n=a.n, batch_size=a.batch_size, rounds=a.rounds, seconds=a.seconds,
                    cores=os.cpu_count(), date=time.strftime('%Y-%m-%d %H:%M'))
        Path(a.json).write_text(json.dumps(dict(meta=meta, combos=summary, runs=rows), indent=1))


if __name__ == '__main__':
    main()
