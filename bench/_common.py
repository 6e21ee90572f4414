"""What the benchmarks share (`bench_streaming.py`, `bench_elastic.py`, `bench_cache.py`, `bench_eval.py`): a local HTTP
server for a folder of shards, one timed epoch (with the CPU seconds of the loader's processes), training loaders over several sources, and the timing loop that
alternates the sources epoch by epoch (so that a machine's drift hits them all alike) and prints medians and ratios.
Run a benchmark as `python bench/NAME.py`: its folder is then on the import path."""
import os, socket, statistics, subprocess, sys, time
from contextlib import contextmanager
from typing import Optional
from timmdata import create_loader


def pss(pid: int) -> int:
    "Proportional set size of process `pid` in bytes (0 when it is gone): its share of the memory it uses."
    try:
        for line in open(f'/proc/{pid}/smaps_rollup'):
            if line.startswith('Pss:'): return int(line.split()[1]) * 1024
    except OSError: return 0
    return 0


def free_port() -> int:
    "A TCP port free on this machine now."
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


@contextmanager
def http_server(folder):
    "`python -m http.server` for `folder` on 127.0.0.1 (a separate process, as a real server is): yields its base URL."
    port = free_port()
    server = subprocess.Popen([sys.executable, '-m', 'http.server', str(port), '--bind', '127.0.0.1', '--directory',
                               str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # listening by then
        yield f'http://127.0.0.1:{port}'
    finally:
        server.terminate(); server.wait()


def epoch(loader) -> tuple:
    "One epoch of `loader`: (images, seconds)."
    t0, n = time.perf_counter(), 0
    for x, y in loader: n += len(y)
    return n, time.perf_counter() - t0


def proc_cpu(pid: int) -> float:
    "CPU seconds (user + system) a live process has used so far; 0 when it is gone (Linux /proc)."
    try: f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    except OSError: return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')


def epoch_cpu(loader) -> tuple:
    "One pass of `loader` (timmdata.tools.bench's time_epoch): (images, wall seconds, CPU seconds of this process, of its workers)."
    from timmdata.tools.bench import time_epoch, worker_pids
    me, workers = os.getpid(), worker_pids(loader)  # persistent workers: the same processes before and after
    before = {p: proc_cpu(p) for p in workers + [me]}
    n, dt = time_epoch(loader)
    after = {p: proc_cpu(p) for p in before}
    return n, dt, after[me] - before[me], sum(after[p] - before[p] for p in workers)


def train_loaders(sources: dict, a) -> dict:
    "{name: (dataset, create_loader's training loader over it)} for `sources` ({name: a function making the dataset}); `a`: the run's arguments."
    return {name: (ds, create_loader(ds, a.input_size, a.batch_size, is_training=True, num_workers=a.workers,
                                     persistent_workers=True, device='cpu'))
            for name, ds in ((name, make()) for name, make in sources.items())}


def alternate_epochs(loaders: dict, epochs: int, cpu: Optional[dict] = None) -> dict:
    "{name: images/s of each timed epoch}: epoch 0 warms up (workers, page cache, a cache to fill), then `epochs` timed ones; the sources alternate within each epoch, who goes first rotating from epoch to epoch. `cpu`, a dict: filled with {name: CPU ms per image of the process and its workers, each timed epoch} (load moves it far less than images/s)."
    rates, names = {k: [] for k in loaders}, list(loaders)
    for e in range(epochs + 1):
        for name in names[e % len(names):] + names[:e % len(names)]:  # who goes first rotates: no seat favoured
            ds, loader = loaders[name]
            if hasattr(ds, 'set_epoch'): ds.set_epoch(e)
            got, t, main_cpu, workers_cpu = epoch_cpu(loader)
            if e:
                rates[name].append(got / t)
                if cpu is not None: cpu.setdefault(name, []).append(1000 * (main_cpu + workers_cpu) / got)
    return rates


def print_rates(rates: dict, base: str, ratio: str, epochs: str = 'epochs (images/s)', cpu: Optional[dict] = None):
    "Each source's median images/s, its ratio to source `base` (headed `ratio`), the median of its per-round ratios (`paired`: each timed epoch over `base`'s epoch of the same round, so drift between rounds cancels), and every timed epoch's rate; with `cpu` (`alternate_epochs`'), each source's median CPU ms per image and `base`'s over it (above 1: cheaper than `base`)."
    b = statistics.median(rates[base])
    extra = f'{"CPU ms/img":>12}{"base/this":>10}' if cpu else ''
    print(f'{"source":<20}{"images/s (median)":>20}{ratio:>10}{"paired":>8}{extra}   {epochs}')
    for name, r in rates.items():
        m, paired = statistics.median(r), statistics.median(x / y for x, y in zip(r, rates[base], strict=True))
        c = f'{statistics.median(cpu[name]):>12.3f}{statistics.median(cpu[base]) / statistics.median(cpu[name]):>10.3f}' if cpu else ''
        print(f'{name:<20}{m:>20.0f}{m / b:>10.2f}{paired:>8.3f}{c}   ' + ' '.join(f'{x:.0f}' for x in r))
