"""Two versions of timmdata against each other, alternating in one run: did a change make loading slower?

Each round runs `timmdata bench` (train and eval, timmdata against timm) and `bench/bench_timm1031.py` (NaFlex and
scheduled batching) once with the OLD source tree first on `PYTHONPATH` and once with the NEW one, in turn, so both
see the same machine load. It prints, per pipeline, the median images/s of each version, and the median ratio
new/old of the timmdata/timm ratios (timm's loader, run in the same process, is the yardstick that cancels load).

    git worktree add /tmp/old <rev>   # the version to compare against (its compiled extension copied in)
    python bench/bench_revs.py --old /tmp/old --new . [--rounds 3]

`--cpu PIPELINES` (issue 41: the machine is shared, and wall-clock images/s moves by more than 3% with its load)
measures, for timmdata's loader alone, the **CPU seconds per image of the loader's process tree** (user + system of
the process, its live workers and the reaped ones, from /proc), which other processes' load disturbs far less, and its
wall-clock images/s: each pipeline in a fresh child process per tree and round (trees alternating, as above), one
warm-up epoch, then `--cpu-epochs` measured epochs. Pipelines: `bench:train`, `bench:eval` (`timmdata bench`'s
loaders, on the sample dataset), `bench:store` (its training loader on an image store built from the same images),
`1031:naflex`, `1031:scheduled` (bench_timm1031's timmdata loaders), `modes:thread-train`, `modes:process-train`,
`modes:thread-eval`, `modes:process-eval` (bench_modes's loaders: create_loader with that worker_mode, no model step).
`--benches ''` skips the timm-normalised runs.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile
from pathlib import Path

def run_one(tree: Path, out: Path, which: str, workers: int) -> dict:
    "Runs one benchmark with `tree` first on PYTHONPATH; returns {pipeline: (timmdata img/s, timm img/s)}."
    env = {**os.environ, 'PYTHONPATH': str(tree)}
    if which == 'bench':
        cli = 'timmdata.tools.cli' if (tree / 'timmdata' / 'tools' / 'cli.py').exists() else 'timmdata.cli'  # before issue 42
        cmd = [sys.executable, '-m', cli, 'bench', '--quick', '--contenders', 'timmdata,timm', '--no-progress',
               '--workers', str(workers), '--out', str(out)]
    else:
        cmd = [sys.executable, str(tree / 'bench' / 'bench_timm1031.py'), '--epochs', '2', '--workers', str(workers),
               '--out', str(out)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tree)
    res = json.loads((out / 'bench.json' if which == 'bench' else out).read_text())  # bench writes a folder, 1031 a file
    return {k: (v['timmdata'], v['timm']) for k, v in _rates(res, which).items()}

def _rates(res: dict, which: str) -> dict:
    "Median images/s per pipeline and contender from either benchmark's JSON."
    if which == 'bench':  # {'pipelines': {pipeline: {'img_per_s': {contender: median img/s}}}}
        return {f'bench {p}': r['img_per_s'] for p, r in res['pipelines'].items()}
    return {f'1031 {p}': r['median'] for p, r in res['pipelines'].items()}

CHILD = r'''
import importlib.util, json, os, sys, time, warnings
warnings.simplefilter('ignore')
tree, which, pipe, workers, epochs, store = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
TICK = os.sysconf('SC_CLK_TCK')

def tree_cpu() -> float:
    "CPU seconds (user + system) of this process, its reaped children and its live descendants (/proc)."
    procs = {}
    for d in os.listdir('/proc'):
        if not d.isdigit(): continue
        try: f = open(f'/proc/{d}/stat').read().rsplit(')', 1)[1].split()
        except OSError: continue  # gone meanwhile
        procs[int(d)] = (int(f[1]), sum(int(v) for v in f[11:15]))  # ppid; utime + stime + cutime + cstime
    total, todo = 0, [os.getpid()]
    while todo:
        p = todo.pop()
        total += procs.get(p, (0, 0))[1]
        todo += [c for c, (pp, _) in procs.items() if pp == p]
    return total / TICK

try: from timmdata.tools.bench import LOADERS, bench_root
except ImportError: from timmdata.bench import LOADERS, bench_root  # a tree from before the packages (issue 42)
root = bench_root(None)
if which == 'bench':
    ld = LOADERS['timmdata'](store if pipe == 'store' else root, pipe != 'eval', 64, workers)
    count = lambda b: len(b[1])
elif which == '1031':
    spec = importlib.util.spec_from_file_location('b1031', os.path.join(tree, 'bench', 'bench_timm1031.py'))
    mod = importlib.util.module_from_spec(spec); sys.path.insert(0, os.path.join(tree, 'bench')); spec.loader.exec_module(mod)
    import contextlib, io
    with contextlib.redirect_stdout(io.StringIO()): ld = mod.PIPELINES[pipe]('timmdata', root, 32, workers)
    count = mod.images
else:
    from timmdata import ImageDataset, create_loader
    mode, p = pipe.split('-')
    ld = create_loader(ImageDataset(str(root)), 224, 64, is_training=p == 'train', num_workers=workers, device='cpu',
                       worker_mode=mode, seed=0)
    count = lambda b: len(b[1])
n = wall = cpu = 0.0
for ep in range(epochs + 1):  # epoch 0 warms up (workers start, caches fill)
    if callable(getattr(ld, 'set_epoch', None)): ld.set_epoch(ep)
    elif callable(getattr(getattr(ld, 'dataset', None), 'set_epoch', None)): ld.dataset.set_epoch(ep)
    c0, t0, k = tree_cpu(), time.perf_counter(), 0
    for b in ld: k += count(b)
    t1, c1 = time.perf_counter(), tree_cpu()
    if ep: n, wall, cpu = n + k, wall + t1 - t0, cpu + c1 - c0
print(json.dumps({'images': n, 'wall': wall, 'cpu': cpu}))
'''


def run_cpu(tree: Path, pipeline: str, workers: int, epochs: int, store: Path) -> tuple:
    "(images/s, CPU seconds per image of the loader's process tree) of timmdata's loader for `pipeline` with `tree` first on PYTHONPATH."
    which, pipe = pipeline.split(':')
    env = {**os.environ, 'PYTHONPATH': str(tree)}
    out = subprocess.run([sys.executable, '-c', CHILD, str(tree), which, pipe, str(workers), str(epochs), str(store)],
                         env=env, check=True, capture_output=True, text=True, cwd=tree).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r['images'] / r['wall'], r['cpu'] / r['images']


def cpu_rounds(trees: dict, pipelines: list, rounds: int, workers: int, epochs: int):
    "The `--cpu` comparison: per pipeline, medians over rounds of each tree's img/s and CPU ms per image, and new/old."
    from timmdata.tools.bench import bench_root
    from timmdata.store.builder import build_cache
    seen = {}  # (pipeline, version) -> list of (img/s, cpu s per image)
    with tempfile.TemporaryDirectory() as d:
        store, root = Path(d) / 'store', bench_root(None)  # the sample dataset, made here once when missing
        if any(p.endswith(':store') for p in pipelines):  # one store, read by both trees
            build_cache(root, store, max_size=256, num_workers=workers, overwrite=True)
        for r in range(rounds):
            for pl in pipelines:
                for v in (('old', 'new') if r % 2 == 0 else ('new', 'old')):
                    seen.setdefault((pl, v), []).append(run_cpu(trees[v], pl, workers, epochs, store))
            print(f'round {r + 1}/{rounds} done, load average {os.getloadavg()[0]:.1f} (2 cores, shared)', flush=True)
    print(f"\n{'pipeline':22s} {'old img/s':>9s} {'new img/s':>9s} {'new/old':>7s}   {'old CPU ms/img':>14s} "
          f"{'new CPU ms/img':>14s} {'new/old':>7s}  (medians of {rounds} rounds; CPU new/old > 1: new costs more)")
    for pl in pipelines:
        old, new = seen[(pl, 'old')], seen[(pl, 'new')]
        ips = statistics.median(n[0] / o[0] for o, n in zip(old, new, strict=True))
        cpu = statistics.median(n[1] / o[1] for o, n in zip(old, new, strict=True))
        print(f"{pl:22s} {statistics.median(x[0] for x in old):9.0f} {statistics.median(x[0] for x in new):9.0f} "
              f"{ips:7.3f}   {statistics.median(x[1] for x in old) * 1e3:14.3f} "
              f"{statistics.median(x[1] for x in new) * 1e3:14.3f} {cpu:7.3f}")
    return seen


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--old', required=True, help='source tree of the version to compare against')
    p.add_argument('--new', default='.', help='source tree of the new version')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--workers', type=int, default=2)
    p.add_argument('--benches', default='bench,1031')
    p.add_argument('--cpu', default='', help="comma-separated pipelines for the CPU-time comparison (see above); '' none")
    p.add_argument('--cpu-epochs', type=int, default=2, help='measured epochs per run of the CPU-time comparison')
    a = p.parse_args(argv)
    trees = {'old': Path(a.old).resolve(), 'new': Path(a.new).resolve()}
    if a.cpu:
        cpu_rounds(trees, a.cpu.split(','), a.rounds, a.workers, a.cpu_epochs)
    if not a.benches:
        return
    seen = {}  # (pipeline, version) -> list of (timmdata, timm)
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            for which in a.benches.split(','):
                for v in (('old', 'new') if r % 2 == 0 else ('new', 'old')):
                    for k, pair in run_one(trees[v], Path(d) / f'{v}-{which}-{r}', which, a.workers).items():
                        seen.setdefault((k, v), []).append(pair)
            print(f'round {r + 1}/{a.rounds} done', flush=True)
    for k in sorted({k for k, _ in seen}):
        old, new = seen[(k, 'old')], seen[(k, 'new')]
        ratio = statistics.median((n[0] / n[1]) / (o[0] / o[1]) for o, n in zip(old, new, strict=True))
        print(f"{k:16s} old {statistics.median(x[0] for x in old):6.0f} img/s   new {statistics.median(x[0] for x in new):6.0f} img/s"
              f"   new/old (timm-normalised) {ratio:.3f}")

if __name__ == '__main__': main()
