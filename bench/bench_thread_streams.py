"""Loader threads against worker processes, map-style and stream, with and without a model step, on the GIL build and
the free-threaded one: steady images/s, the first batch and where the time goes, alternating in one run.

    python bench/bench_thread_streams.py [--images 640] [--rounds 3] [--epochs 3] [--workers 2] [--batch-size 64]
        [--size 224] [--sources map,stream] [--steps none,sleep:30,cpu] [--pythons gil,ft] [--gil .venv/bin/python]
        [--ft .ft/venv/bin/python] [--torch-threads 1] [--order global|shards] [--no-index] [--json FILE]
        [--tree-sources map,stream]

Writes --images generated 500x375 photos (`timmdata.tools.sample_data`, ten classes) into a scratch folder, and the same
photos as WebDataset shards (`timmdata shards`, 50 a shard, with the dataset index unless --no-index). Then, for each
round, each contender (interpreter, source, step, mode, in that nesting; the two modes next to each other) is a fresh
Python process of that interpreter (this script again, `--one`) that builds
`create_loader(DATASET, 224, 64, is_training=True, num_workers=2, device='cpu', worker_mode=MODE, seed=0)` (the default
training pipeline: RandomResizedCrop, flip, colour jitter on the batch; the prefetcher's float conversion and
normalisation on the CPU; persistent workers in the process mode) over `ImageDataset(folder)` ('map') or
`IterableImageDataset(shards, reader='wds/bench', is_training=True, batch_size=64)` ('stream'), and runs 1 + --epochs
epochs; after each batch, in the training thread, the model step: 'none'; 'sleep:MS' (MS ms of sleep: a GPU step, which
leaves the CPU free); 'cpu' (a small conv net's forward and backward on the batch, on --torch-threads torch threads: a
CPU-bound step). Printed per contender, the median over rounds of:
- img/s: each steady epoch's images over its wall time (epochs 1..--epochs: the warm-up epoch 0, with worker start, the
  first batch and the files paged in, left out), the median of those epochs;
- first s: from the create_loader call to the first batch in hand (worker start included; imports and the dataset's
  construction, the same in both modes, not);
- step ms: the model step's mean time during the steady epochs; CPU ms/img: the process's and its workers' user+system
  CPU over the steady epochs, per image;
- the loader's stage figures (`loader.stats()`, over the steady epochs), ms per batch: the workers' per-sample work
  (read + decode + ops, summed over the workers: CPU time in processes, wall time in threads, where it includes waiting
  for the GIL and the cores), their collate, the device step (float, normalise, jitter: training thread), and the
  consumer's wait for a batch.
Then thread / process for each (interpreter, source, step): img/s and first batch, against the goals (img/s >= 1.0x,
first batch <= 0.34x). `--pythons gil@TREE` (or ft@TREE) adds that interpreter running the timmdata package of the
source tree TREE (PYTHONPATH=TREE; e.g. a copy with a change), its contenders among the others, over --tree-sources.
`--json FILE` writes every run's numbers (steady_s: the steady epochs' wall time; loop_s: from create_loader to the
last batch). The machine may be shared with other work: compare within one run (contenders alternate), not across
runs. `--one DATA SOURCE MODE STEP` runs one contender in this process and prints its JSON (DATA: a folder with folder/
and shards/ as this script writes them; for a profiler: `py-spy record -- python bench/bench_thread_streams.py --one ...`)."""

import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGES = ('work', 'collate', 'device', 'consumer_wait')


def one(a):
    "One contender in this process: its JSON on the last line of stdout."
    import warnings

    warnings.simplefilter('ignore')
    import torch
    from timmdata import ImageDataset, IterableImageDataset, create_loader
    from timmdata.core.torch_compat import loader_worker_pids

    data, source, mode, step = a.one
    torch.set_num_threads(a.torch_threads)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 5, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10),
    )  # fmt: skip
    nap = float(step.split(':')[1]) / 1e3 if step.startswith('sleep') else 0.0

    def model_step(x):
        if step == 'cpu':
            net(x).sum().backward()
        elif nap:
            time.sleep(nap)

    x0 = torch.randn(a.batch_size, 3, a.size, a.size)
    for _ in range(2):
        model_step(x0)
    del x0
    tick = os.sysconf('SC_CLK_TCK')

    def cpu_of(pid):
        try:
            with open(f'/proc/{pid}/stat') as fh:
                f = fh.read().rsplit(')', 1)[1].split()
        except OSError:
            return 0.0
        return (int(f[11]) + int(f[12])) / tick

    def cpu(ld):  # this process and the loader's live workers (under forkserver they are the server's children)
        return cpu_of(os.getpid()) + sum(cpu_of(k) for k in loader_worker_pids(ld))

    if source == 'map':
        ds = ImageDataset(str(Path(data) / 'folder'))
    else:
        ds = IterableImageDataset(
            str(Path(data) / 'shards'), reader='wds/bench', is_training=True, batch_size=a.batch_size, order=a.order
        )
    t0 = time.perf_counter()
    ld = create_loader(
        ds, (3, a.size, a.size), a.batch_size, is_training=True, num_workers=a.workers, device='cpu',
        worker_mode=mode, seed=0,
    )  # fmt: skip
    first, rates, steps, cpus, base = None, [], [], [], None
    for e in range(a.epochs + 1):
        if e == 1:
            t1 = time.perf_counter()
        ld.set_epoch(e)
        if e == 1:
            base = ld.stats().snapshot()
        e0, c0, n = time.perf_counter(), cpu(ld), 0
        for x, y in ld:
            if first is None:
                first = time.perf_counter() - t0
            s0 = time.perf_counter()
            model_step(x)
            if e:
                steps.append(time.perf_counter() - s0)
            n += len(x)
            c1 = cpu(ld)  # while the workers live (read after each batch: the last one is the epoch's)
        if e:
            rates.append(n / (time.perf_counter() - e0))
            cpus.append((c1 - c0) / n * 1e3)
    steady_s, loop_s = time.perf_counter() - t1, time.perf_counter() - t0
    st = ld.stats().since(base)
    t, b = st.t, max(st.batches, 1)
    stages = {
        'work': (t['read'] + t['decode'] + t['ops']) / b * 1e3,
        'collate': t['collate'] / b * 1e3,
        'device': t['device'] / b * 1e3,
        'consumer_wait': t['consumer_wait'] / b * 1e3,
    }
    gil = sys._is_gil_enabled() if hasattr(sys, '_is_gil_enabled') else True
    print(
        json.dumps(
            {
                'ips': statistics.median(rates),
                'epochs': rates,
                'first': first,
                'step': statistics.mean(steps) * 1e3,
                'cpu_ms': statistics.median(cpus),
                'stages': stages,
                'batches': st.batches,
                'images': st.images,
                'steady_s': steady_s,
                'loop_s': loop_s,
                'version': sys.version.split()[0],
                'gil': gil,
            }
        )
    )


def child_args(a) -> list:
    return [
        '--workers', str(a.workers), '--batch-size', str(a.batch_size), '--epochs', str(a.epochs), '--size',
        str(a.size), '--torch-threads', str(a.torch_threads), '--order', a.order,
    ]  # fmt: skip


def run(python, data, source, mode, step, a) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHON_GIL', 'PYTHONPATH')}
    python, _, tree = str(python).partition('@')
    if tree:  # another timmdata tree, found before the installed one
        env['PYTHONPATH'] = tree
    cmd = [str(python), str(Path(__file__).resolve()), '--one', str(data), source, mode, step, *child_args(a)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO, env=env, check=False)
    if out.returncode:
        raise SystemExit(f'{python} {source} {mode} {step} failed:\n{out.stderr[-3000:]}')
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_data(a) -> Path:
    from timmdata.tools.sample_data import make_sample_dataset
    from timmdata.tools.shards import write_shards

    tmp = Path(tempfile.mkdtemp(prefix='bench_thread_streams_'))
    per_class = max(1, a.images // 10)
    root = make_sample_dataset(tmp / 'sample', n_train=per_class, n_val=1, size=(500, 375))
    (tmp / 'folder').symlink_to(root / 'train')
    write_shards(root / 'train', tmp / 'shards', shard_size=50, progress=False)
    if a.no_index:
        for f in (tmp / 'shards').glob('_timmdata_dataset_index*'):
            f.unlink()
    return tmp


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--images', type=int, default=640, help='generated 500x375 photos (ten classes)')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--epochs', type=int, default=3, help='steady epochs timed, after one warm-up epoch')
    p.add_argument('--workers', type=int, default=2)
    p.add_argument('--batch-size', type=int, default=64)
    p.add_argument('--size', type=int, default=224)
    p.add_argument('--sources', default='map,stream', help="'map' (ImageDataset over a folder), 'stream' (shards)")
    p.add_argument('--steps', '--step', default='none,sleep:30,cpu', help="model steps: none, sleep:MS, cpu")
    p.add_argument(
        '--pythons', default='gil,ft',
        help="'gil', 'ft' (left out with a note where it is missing); KIND@TREE: that interpreter with the timmdata "
        "package of the source tree TREE first on its path (e.g. a change to compare, in the same run)",
    )  # fmt: skip
    p.add_argument('--tree-sources', default='map,stream', help='the sources run for a KIND@TREE interpreter')
    p.add_argument('--gil', default=str(REPO / '.venv/bin/python'), help='the GIL build')
    p.add_argument('--ft', default=str(REPO / '.ft/venv/bin/python'), help='the free-threaded build (make ft-python)')
    p.add_argument('--torch-threads', type=int, default=1, help="torch's threads in each run (the cpu step's)")
    p.add_argument('--order', default='global', choices=('global', 'shards'))
    p.add_argument('--no-index', action='store_true', help='delete the dataset index: each shard parsed front to back')
    p.add_argument('--json', help='write every run here')
    p.add_argument('--one', nargs=4, metavar=('DATA', 'SOURCE', 'MODE', 'STEP'), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        return one(a)
    for s in a.steps.split(','):
        if not (s in ('none', 'cpu') or (s.startswith('sleep:') and s[6:].replace('.', '', 1).isdigit())):
            raise SystemExit(f"--steps: each step is none, sleep:MS or cpu; got {s!r}")
    pys = {}
    for k in a.pythons.split(','):
        kind, _, tree = k.partition('@')
        path = {'gil': a.gil, 'ft': a.ft}[kind]
        if tree and not (Path(tree) / 'timmdata' / '__init__.py').exists():
            raise SystemExit(f'--pythons {k}: {tree} holds no timmdata package')
        if Path(path).exists():
            pys[k] = path + (f'@{Path(tree).resolve()}' if tree else '')
        else:
            print(f'--{k} {path}: no such interpreter, left out' + (' (make ft-python)' if k == 'ft' else ''))
    data = make_data(a)
    try:
        n_img = a.images // 10 * 10
        print(
            f'{n_img} photos 500x375, RandomResizedCrop {a.size}, batch {a.batch_size}, {a.workers} workers, '
            f'{os.cpu_count()} CPUs, torch threads {a.torch_threads}; 1 warm-up + {a.epochs} steady epochs a run, '
            f'{a.rounds} rounds, contenders alternating, medians',
            flush=True,
        )
        sources, steps, modes = a.sources.split(','), a.steps.split(','), ('thread', 'process')
        tree_sources = a.tree_sources.split(',')
        cons = [
            (py, src, st, m)
            for py in pys for src in sources for st in steps for m in modes
            if '@' not in py or src in tree_sources
        ]  # fmt: skip
        res = {c: [] for c in cons}
        t_start = time.time()
        for r in range(a.rounds):
            for c in cons:
                res[c].append(run(pys[c[0]], data, c[1], c[3], c[2], a))
                print(f'round {r + 1} {" ".join(c)}: {json.dumps(res[c][-1])}', file=sys.stderr, flush=True)
            print(
                f'round {r + 1}/{a.rounds} done, {time.time() - t_start:.0f} s, load average {os.getloadavg()[0]:.1f}',
                file=sys.stderr, flush=True,
            )  # fmt: skip
        med = {}
        for c, rs in res.items():
            med[c] = {k: statistics.median(v[k] for v in rs) for k in ('ips', 'first', 'step', 'cpu_ms')}
            med[c].update({k: statistics.median(v['stages'][k] for v in rs) for k in STAGES})
        w = max(6, *map(len, pys))
        for py in pys:
            v = res[next(c for c in cons if c[0] == py)][0]
            print(f'{py}: Python {v["version"]}, GIL {"on" if v["gil"] else "off"}')
        print(
            f'{"python":{w}s} {"source":6s} {"step":8s} {"mode":8s} {"img/s":>7s} {"first s":>7s} {"step ms":>7s} '
            f'{"CPU ms/img":>10s} | ms/batch: {"work":>6s} {"collate":>7s} {"device":>6s} {"wait":>6s}'
        )
        for c, m in med.items():
            print(
                f'{c[0]:{w}s} {c[1]:6s} {c[2]:8s} {c[3]:8s} {m["ips"]:7.0f} {m["first"]:7.2f} {m["step"]:7.1f} '
                f'{m["cpu_ms"]:10.2f} |           {m["work"]:6.1f} {m["collate"]:7.1f} {m["device"]:6.1f} '
                f'{m["consumer_wait"]:6.1f}'
            )
        print('\nthread / process (goals: img/s >= 1.0x, first batch <= 0.34x):')
        for py in pys:
            for src in sources:
                for st in steps:
                    if (py, src, st, 'thread') not in med:
                        continue
                    t, q = med[(py, src, st, 'thread')], med[(py, src, st, 'process')]
                    ri, rf = t['ips'] / q['ips'], t['first'] / q['first']
                    print(
                        f'  {py:{w}s} {src:6s} step {st:8s}: img/s {ri:.2f}x ({"met" if ri >= 1.0 else "NOT met"}), '
                        f'first batch {rf:.2f}x ({"met" if rf <= 0.34 else "NOT met"})'
                    )
        print(f'load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)')
        if a.json:
            Path(a.json).write_text(json.dumps({'|'.join(c): rs for c, rs in res.items()}, indent=1))
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == '__main__':
    main()
