"""What the benchmarks share (`bench_streaming.py`, `bench_elastic.py`, `bench_cache.py`, `bench_eval.py`,
`bench_object_store.py`, `bench_object_store_cores.py`, `model_alone.py`): a local HTTP server for a folder of shards,
one timed epoch (with the CPU seconds of the loader's processes), training loaders over several sources, the timing
loop that alternates the sources epoch by epoch (so that a machine's drift hits them all alike: `in_turn`) and prints
medians and ratios, timed rounds of a step (`timed_rounds`), image counts rounded to whole batches (`whole_batches`),
and the output written for `--out` with the command that made it (`Report`, `write_json`).
Run a benchmark as `python bench/NAME.py`: its folder is then on the import path."""
import json, math, os, shlex, socket, statistics, subprocess, sys, time
from pathlib import Path
from contextlib import contextmanager
from typing import Optional


def command() -> str:
    "The command that ran this benchmark, as typed from the repository's root: `python bench/NAME.py ARGS`."
    return ' '.join(['python', f'bench/{Path(sys.argv[0]).name}', *map(shlex.quote, sys.argv[1:])])


class Report:
    "The lines a benchmark prints (`say`), kept for `--out` (`write`): the file starts with the command that made them."

    def __init__(self):
        self.lines = []

    def say(self, *parts):
        "Print a line and keep it."
        line = ' '.join(str(p) for p in parts)
        print(line, flush=True)
        self.lines.append(line)

    def write(self, out):
        "Write the command, a blank line and every line said to `out` (its folder made); nothing when `out` is None."
        if out:
            os.makedirs(os.path.dirname(out) or '.', exist_ok=True)
            Path(out).write_text(command() + '\n\n' + '\n'.join(self.lines) + '\n')


def write_json(out, res: dict):
    "Write the results `res` as JSON to `out` (its folder made), with the command that made them under 'command'."
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps({'command': command(), **res}, indent=1))


def whole_batches(
    n: int,  # images wanted
    batch_size: int,  # the loader's batch
    classes: int = 10,  # the generated sets' classes, each the same number of images
) -> int:
    "`n` rounded up to whole batches of whole classes: an epoch then reads each image once, no short or dropped batch."
    step = classes * batch_size // math.gcd(classes, batch_size)
    return -(-n // step) * step


def in_turn(names: list, r: int) -> list:
    "The sources' order in round `r`: who goes first rotates from round to round, so no seat is favoured."
    return names[r % len(names):] + names[:r % len(names)]


def paired(rates: list, base: list) -> float:
    "The median of the per-round ratios `rates[i] / base[i]` (each round over the base's of the same round: drift between rounds cancels)."
    return statistics.median(x / y for x, y in zip(rates, base, strict=True))


def timed_rounds(
    step,  # step(): one unit of the work timed (a training step, a batch)
    rounds: int,  # timed rounds
    steps: int = 1,  # steps a round
    sync=lambda: None,  # called before and after each round's steps (a device's synchronize)
) -> list:
    "The wall seconds of each of `rounds` rounds of `steps` calls of `step()`."
    out = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        out.append(time.perf_counter() - t0)
    return out


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
    from timmdata import create_loader  # here: the helpers above serve scripts that time no loader (model_alone.py)

    return {name: (ds, create_loader(ds, a.input_size, a.batch_size, is_training=True, num_workers=a.workers,
                                     persistent_workers=True, device='cpu'))
            for name, ds in ((name, make()) for name, make in sources.items())}


def alternate_epochs(loaders: dict, epochs: int, cpu: Optional[dict] = None) -> dict:
    "{name: images/s of each timed epoch}: epoch 0 warms up (workers, page cache, a cache to fill), then `epochs` timed ones; the sources alternate within each epoch, who goes first rotating from epoch to epoch. `cpu`, a dict: filled with {name: CPU ms per image of the process and its workers, each timed epoch} (load moves it far less than images/s)."
    rates, names = {k: [] for k in loaders}, list(loaders)
    for e in range(epochs + 1):
        for name in in_turn(names, e):
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
        m, p = statistics.median(r), paired(r, rates[base])
        c = f'{statistics.median(cpu[name]):>12.3f}{statistics.median(cpu[base]) / statistics.median(cpu[name]):>10.3f}' if cpu else ''
        print(f'{name:<20}{m:>20.0f}{m / b:>10.2f}{p:>8.3f}{c}   ' + ' '.join(f'{x:.0f}' for x in r))
