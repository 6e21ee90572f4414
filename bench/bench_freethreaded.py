"""Free-threaded Python against the GIL build, thread workers against worker processes, in one run (issue 58).

    python bench/bench_freethreaded.py [--n 500] [--rounds 2] [--workers 2] [--gil .venv/bin/python] [--ft .ft/venv/bin/python]

Each run is a fresh process of one interpreter (the GIL build: the project's .venv; the free-threaded one: .ft/venv,
made by `make ft-python`) that builds `create_loader(..., device='cpu', num_workers=W, worker_mode=M, seed=0)` over
generated 500x375 photos (the default training pipeline with color_jitter 0.4, or the default eval pipeline) and runs
three epochs (a warm-up, a timed one, one whose memory is read);
after each batch a model step in the training thread: 'none', or 'cpu' (a small conv net's forward and
backward on the batch, on one torch thread: a CPU-bound step). Contenders alternate (interpreter, pipeline, step,
mode) within each round. Printed, medians over the rounds:
- img/s: images of the second epoch over its wall time (nothing else read during it);
- CPU ms/img: user + system CPU of the process and its workers over the second epoch, per image (/proc/PID/stat; the
  workers found through the loader: on Python 3.14 they start by forkserver and are the server's children, not ours);
- PSS MB: the largest proportional set size of the process and its workers over the third epoch (shared pages
  divided among the processes that map them: /proc/PID/smaps_rollup); loader MB: the largest anonymous and shared-memory
  PSS (Pss_Anon + Pss_Shmem: the heaps and the batches in shared memory, not the libraries' pages, which other
  processes mapping the same files share) less the process's own just before create_loader (the interpreter, torch,
  timmdata and the model: the same in both modes; with the libraries, most of the total);
  RSS MB: the resident sizes summed at that moment (pages shared by the forked workers counted in each);
- first batch s: from create_loader to the first batch in hand; step ms: the model step's mean time during loading.
Then the ratios: thread / process on each interpreter, and free-threaded / GIL for each mode, with the issue's goals
(free-threaded, 2 workers: thread >= 1.25x process img/s with the CPU step and >= 1.0x without, PSS <= 0.5x).
`--json FILE` writes every run's numbers. The machine may be shared: compare within one run (contenders alternate)."""
import argparse, atexit, json, os, shutil, statistics, subprocess, sys, tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r'''
import json, os, sys, time, warnings
warnings.simplefilter('ignore')
import torch
from timmdata import ImageDataset, create_loader
root, mode, pipe, step, workers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
if mode == 'fork':  # worker processes started by fork, whatever the interpreter's default (forkserver on 3.14)
    import multiprocessing; multiprocessing.set_start_method('fork', force=True); mode = 'process'
torch.set_num_threads(1)  # the model step on one core: the workers have the other (2 cores)
net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 5, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2),
                          torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
def model_step(x):
    if step == 'cpu': net(x).sum().backward()
from timmdata.core.torch_compat import loader_worker_pids
def kids():  # this process's children (a forkserver among them), and the loader's workers: under forkserver (Python 3.14's default) they are the server's children
    try: ks = {int(p) for p in open(f'/proc/{os.getpid()}/task/{os.getpid()}/children').read().split()}
    except OSError: ks = set()
    return sorted(ks | set(loader_worker_pids(ld) if 'ld' in globals() else ()))
TICK = os.sysconf('SC_CLK_TCK')
def cpu_of(pid):
    try: f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    except OSError: return 0.0
    return (int(f[11]) + int(f[12])) / TICK  # utime, stime
def cpu():  # this process, its live workers, and the workers that ended (waited for)
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return cpu_of(os.getpid()) + sum(cpu_of(k) for k in kids()) + r.ru_utime + r.ru_stime
def smaps(pid, *keys):
    try: return sum(int(l.split()[1]) * 1024 for l in open(f'/proc/{pid}/smaps_rollup') if l.split(':')[0] in keys)
    except OSError: return 0
def pss(pid): return smaps(pid, 'Pss')
def own(pid): return smaps(pid, 'Pss_Anon', 'Pss_Shmem')  # the heap and shared memory: no library or file pages
x0 = torch.randn(64, 3, 224, 224)
for _ in range(2): model_step(x0)
del x0
base = own(os.getpid())  # the process before the loader: the interpreter, torch, timmdata, the model and its step
t0 = time.perf_counter()
ld = create_loader(ImageDataset(root), 224, 64, is_training=pipe == 'train', num_workers=workers, device='cpu',
                   worker_mode=mode, seed=0, color_jitter=0.4 if pipe == 'train' else None)
first, steps, n, wall, c_last, mem, rss, main, anon = None, [], 0, 0.0, 0.0, 0, 0, 0, 0
for epoch in range(3):  # 0: warm-up; 1: timed, nothing else read; 2: the memory read after each batch, not timed
    ld.set_epoch(epoch); e0, c0 = time.perf_counter(), cpu()
    for x, y in ld:
        if first is None: first = time.perf_counter() - t0
        s0 = time.perf_counter(); model_step(x); steps.append(time.perf_counter() - s0)
        if epoch == 1:
            n += len(x)
        if epoch == 2:  # reading smaps_rollup costs ms a process: it would slow the processes' epoch more than the threads'
            m0, ks = pss(os.getpid()), kids()
            if m0 + sum(pss(k) for k in ks) > mem:
                mem, main = m0 + sum(pss(k) for k in ks), m0
                rss = smaps(os.getpid(), 'Rss') + sum(smaps(k, 'Rss') for k in ks)
            anon = max(anon, own(os.getpid()) + sum(own(k) for k in ks))
    if epoch == 1: wall, c_used = time.perf_counter() - e0, cpu() - c0
gil = sys._is_gil_enabled() if hasattr(sys, '_is_gil_enabled') else True
print(json.dumps(dict(ips=n / wall, cpu_ms=c_used / n * 1e3, pss=mem / 2**20, base=base / 2**20, loader=(anon - base) / 2**20,
                      main=main / 2**20, rss=rss / 2**20, first=first, step=sum(steps) / len(steps) * 1e3,
                      gil=gil, version=sys.version.split()[0])))
'''


def run(python, root, mode, pipe, step, workers):
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHON_GIL', 'PYTHONPATH')}
    out = subprocess.run([str(python), '-c', CHILD, str(root), mode, pipe, step, str(workers)], capture_output=True,
                         text=True, timeout=900, cwd=REPO, env=env)
    if out.returncode: raise SystemExit(f'{python} {mode} {pipe} {step} failed:\n{out.stderr[-2000:]}')
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--n', type=int, default=500, help='training images (500x375 JPEGs, generated)')
    p.add_argument('--rounds', type=int, default=2)
    p.add_argument('--workers', type=int, default=2)
    p.add_argument('--steps', default='none,cpu')
    p.add_argument('--pipes', default='train,eval')
    p.add_argument('--gil', default=str(REPO / '.venv/bin/python'), help='the GIL build (empty: left out)')
    p.add_argument('--ft', default=str(REPO / '.ft/venv/bin/python'), help='the free-threaded build (make ft-python)')
    p.add_argument('--root', help='an image folder (default: generated)')
    p.add_argument('--json', help='write every run here')
    p.add_argument('--modes', default='thread,process', help="'thread', 'process' (the interpreter's start method: forkserver from Python 3.14), 'fork' (processes started by fork)")
    a = p.parse_args(argv)
    pys = {k: v for k, v in (('gil', a.gil), ('ft', a.ft)) if v}
    for k, v in pys.items():
        if not Path(v).exists(): raise SystemExit(f'--{k} {v}: no such interpreter' + (' (make ft-python)' if k == 'ft' else ''))
    root = a.root
    if root is None:
        from timmdata import make_sample_dataset
        tmp = Path(tempfile.mkdtemp())
        atexit.register(shutil.rmtree, tmp, True)  # the generated images go when the run ends
        root = make_sample_dataset(tmp / 's', n_train=a.n // 10, n_val=1, size=(500, 375)) / 'train'
    pipes, steps = a.pipes.split(','), a.steps.split(',')
    modes = a.modes.split(',')
    cons = [(py, pi, st, m) for pi in pipes for st in steps for py in pys for m in modes]
    res = {c: [] for c in cons}
    for r in range(a.rounds):
        for c in cons:
            res[c].append(run(pys[c[0]], root, c[3], c[1], c[2], a.workers))
            print(f'round {r + 1} {c}: {res[c][-1]}', file=sys.stderr, flush=True)
        print(f'round {r + 1}/{a.rounds} done, load average {os.getloadavg()[0]:.1f}', file=sys.stderr, flush=True)
    keys = ('ips', 'cpu_ms', 'pss', 'loader', 'rss', 'first', 'step')
    med = {c: {k: statistics.median(v[k] for v in rs) for k in keys} for c, rs in res.items()}
    ver = {py: res[next(c for c in cons if c[0] == py)][0] for py in pys}
    print(f'{a.n // 10 * 10} images, {a.workers} workers, batch 64, 224 px, {os.cpu_count()} CPUs, {a.rounds} rounds '
          f'alternating, medians; ' + ', '.join(f'{py}: Python {v["version"]}, GIL {"on" if v["gil"] else "off"}' for py, v in ver.items()))
    print(f'{"python":6s} {"pipeline":8s} {"step":5s} {"mode":8s} {"img/s":>7s} {"CPU ms/img":>10s} {"PSS MB":>7s} '
          f'{"loader MB":>9s} {"RSS MB":>7s} {"first s":>7s} {"step ms":>8s}')
    for c, m in med.items():
        print(f'{c[0]:6s} {c[1]:8s} {c[2]:5s} {c[3]:8s} {m["ips"]:7.0f} {m["cpu_ms"]:10.2f} {m["pss"]:7.0f} {m["loader"]:9.0f} {m["rss"]:7.0f} {m["first"]:7.2f} '
              f'{m["step"]:8.1f}')
    for other in [m for m in modes if m != 'thread' and 'thread' in modes]:
      print(f'\nthread / {other} (img/s, CPU per image, PSS, the loader\'s PSS, RSS, first batch):')
      for py in pys:
        for pi in pipes:
            for st in steps:
                t, q = med[(py, pi, st, 'thread')], med[(py, pi, st, other)]
                print(f'  {py:4s} {pi:5s} step {st:5s}: img/s {t["ips"] / q["ips"]:.2f}x, CPU/img {t["cpu_ms"] / q["cpu_ms"]:.2f}x, '
                      f'PSS {t["pss"] / q["pss"]:.2f}x, loader {t["loader"] / q["loader"]:.2f}x, RSS {t["rss"] / q["rss"]:.2f}x, '
                      f'first batch {t["first"] / q["first"]:.2f}x')
    if len(pys) == 2:
        print('\nfree-threaded / GIL (same pipeline, step and mode):')
        for pi in pipes:
            for st in steps:
                for m in modes:
                    f, g = med[('ft', pi, st, m)], med[('gil', pi, st, m)]
                    print(f'  {pi:5s} step {st:5s} {m:8s}: img/s {f["ips"] / g["ips"]:.2f}x, CPU/img {f["cpu_ms"] / g["cpu_ms"]:.2f}x, '
                          f'PSS {f["pss"] / g["pss"]:.2f}x')
    if 'ft' in pys and {'thread', 'process'} <= set(modes):
        print('\ngoals (free-threaded, thread / process):')
        for pi in pipes:
            for st in steps:
                t, q = med[('ft', pi, st, 'thread')], med[('ft', pi, st, 'process')]
                need = 1.25 if st == 'cpu' else 1.0
                fast, small = t['ips'] / q['ips'] >= need, t['pss'] / q['pss'] <= 0.5
                print(f'  {pi:5s} step {st:5s}: img/s {t["ips"] / q["ips"]:.2f}x (goal >= {need}x: {"met" if fast else "NOT met"}), '
                      f'PSS {t["pss"] / q["pss"]:.2f}x (goal <= 0.5x: {"met" if small else "NOT met"}; the loader\'s own '
                      f'{t["loader"] / q["loader"]:.2f}x, RSS {t["rss"] / q["rss"]:.2f}x)')
    print(f'load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)')
    if a.json:
        Path(a.json).write_text(json.dumps({'|'.join(c): rs for c, rs in res.items()}, indent=1))


if __name__ == '__main__':
    main()
