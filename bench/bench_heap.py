"""Page faults and CPU time per image in the workers of a training loader on a store, with and without timmdata's
steady worker heap (`timmdata.loader.steady_heap`), each measured in a fresh process: workers inherit malloc's state
from the process that forks them, so only a fresh process shows what a training script sees.

    python bench/bench_heap.py [--store data/sample_store] [--runs 3]

Each run: a training loader (RandomResizedCrop 224, flip, jitter 0.4, batch 64, 2 workers, CPU output, main
process on one torch thread as the other benchmarks run it), 3 warm-up epochs (workers start, the store's pages get
mapped), then 3 measured epochs. The figures vary with the machine and its load, so they are printed here and
asserted nowhere (no test in `make test` counts page faults)."""
import argparse, json, os, subprocess, sys
from pathlib import Path


def _proc_stat(pid: int) -> tuple:
    "(minor page faults, user seconds, system seconds) of a process, from /proc."
    f = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    tick = os.sysconf('SC_CLK_TCK')
    return int(f[7]), int(f[11]) / tick, int(f[12]) / tick


def measure(store, steady: bool, warmup: int = 3, epochs: int = 3) -> dict:
    "In this process: per image in the workers, page faults and user/system CPU milliseconds."
    import torch
    import timmdata.loader as L
    from timmdata import ImageDataset, create_loader
    from timmdata.tools.bench import worker_pids
    if not steady: L.steady_heap = lambda: False  # forked workers inherit the patched module (worker_init looks it up)
    torch.set_num_threads(1)
    ld = create_loader(ImageDataset(str(store)), (3, 224, 224), 64, is_training=True, num_workers=2, device='cpu')
    for _ in range(warmup):
        for x, y in ld: pass
    pids = worker_pids(ld)
    before, n = [_proc_stat(p) for p in pids], 0
    for _ in range(epochs):
        for x, y in ld: n += len(x)
    d = [sum(a[k] - b[k] for a, b in zip([_proc_stat(p) for p in pids], before)) for k in range(3)]
    return {'faults_per_image': d[0] / n, 'user_ms_per_image': d[1] / n * 1e3, 'sys_ms_per_image': d[2] / n * 1e3}


def measure_fresh(store, steady: bool, timeout: int = 300) -> dict:
    "`measure` in a fresh Python process."
    out = subprocess.run([sys.executable, __file__, '--store', str(store), '--one', 'steady' if steady else 'plain'],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode: raise RuntimeError(f'bench_heap.py failed:\n{out.stderr[-2000:]}')
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--store', default='data/sample_store', help='a store made by `timmdata cache` (default: data/sample_store)')
    p.add_argument('--runs', type=int, default=3, help='fresh processes per setting, alternating')
    p.add_argument('--one', choices=('steady', 'plain'), help=argparse.SUPPRESS)  # internal: one measurement, as JSON
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's timmdata, installed or not
    if a.one: print(json.dumps(measure(a.store, a.one == 'steady'))); return
    for r in range(a.runs):
        for steady in (True, False):
            m = measure_fresh(a.store, steady)
            print(f"run {r}: {'with' if steady else 'without'} steady_heap: {m['faults_per_image']:5.1f} page faults, "
                  f"user {m['user_ms_per_image']:.3f} ms, system {m['sys_ms_per_image']:.3f} ms per image (workers)", flush=True)


if __name__ == '__main__': main()
