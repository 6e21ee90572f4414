"""Training images/s from an S3 bucket, 20 ms added to each request, against the same files on disk, with the S3 server
on a core of its own: what the read-ahead gives when the server's CPU is not taken from the loader.

bench_object_store.py's part c runs moto's S3 server on the loader's cores, and its CPU (about 3 ms a request) is then
the ceiling. Here s3rver (`make s3rver`: an S3 server for Node.js, under 1 ms a request) runs pinned to the last CPU,
the latency added inside it (a timer: no proxy, no CPU spent waiting), and this process and its DataLoader workers run
pinned to the other CPUs; the local read runs on those same CPUs.

Each source: create_loader's training pipeline at 224 (random resized crop, flip; decode included), `--workers` (2)
persistent workers, batch 64, CPU output, the default read-ahead. Shards with their dataset index and Parquet files with
theirs, for two sets: `--n` small generated JPEGs (96x72, 2.7 KB on average: bench_object_store.py's part c) and
`--n-large` generated 500x375 JPEGs (53 KB); the shards also with the node cache (`cache_dir=`: each shard downloaded
whole once, in the warm-up epoch, then read from the local disk). Steady state: a warm-up epoch (dropped), then the median of `--epochs`
timed epochs; the sources alternate within each epoch, who goes first rotating. For each source: images/s, its ratio to
the same set read from disk (goal: >= 0.9x), the loader's CPU milliseconds per image (this process and its workers:
the object-store client's requests included), how busy each side's CPUs were, and the requests an image cost the
server (counted inside it), and the bytes it sent over the images' bytes (a tar shard's span holds its headers too).
Then what one ranged GET of an image's size costs this process's CPU alone (no loader), 32 in flight: obstore called
from 32 threads, obstore's async API on one event loop, timmdata's `object_range` from 32 threads, and
`object_get_many` (what the readers call: one event loop a process, the bytes handed over once), 32 reads a call.

    make s3rver && python bench/bench_object_store_cores.py      # about 4 minutes on 2 cores
    python bench/bench_object_store_cores.py --quick              # a smaller run: to try it out, not for figures
    python bench/bench_object_store_cores.py --out bench/results/NAME/README.txt   # also writes the output
"""

import os

CPUS = sorted(os.sched_getaffinity(0))
if len(CPUS) >= 2:  # before torch starts threads: they and the workers inherit this process's CPUs
    os.sched_setaffinity(0, CPUS[:-1])

import argparse, atexit, functools, shutil, statistics, subprocess, sys, tempfile, time, warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # the timmdata of this tree
sys.path.insert(0, str(HERE))
from _common import Report, free_port, in_turn, paired, proc_cpu, whole_batches
from bench_object_store import make_set
from timmdata import create_dataset, create_loader
from timmdata.core.settings import set_environment
from timmdata.index.span_reader import READ_AHEAD_STORE
from timmdata.net.object_store import REQUESTS, object_get_many, object_range, put_object
from timmdata.tools.bench import time_epoch, worker_pids

S3RVER = ROOT / '.venv' / 's3rver' / 'node_modules'
BUCKET = 'timmdata-bench'
REPORT = Report()  # what is printed, kept for --out
say = REPORT.say


def busy() -> dict:
    "{cpu: busy seconds so far} from /proc/stat (all but idle and iowait)."
    out = {}
    for line in open('/proc/stat'):
        name, *f = line.split()
        if name.startswith('cpu') and name != 'cpu':
            f = [int(x) for x in f]
            out[int(name[3:])] = (sum(f) - f[3] - f[4]) / os.sysconf('SC_CLK_TCK')
    return out


def start_s3rver(folder: Path, latency: float) -> tuple:
    "(process, endpoint): s3rver on 127.0.0.1 with `latency` seconds added to each request, pinned to the last CPU."
    if not (S3RVER / 's3rver').is_dir():
        sys.exit('bench_object_store_cores.py: s3rver is not installed: run `make s3rver` (needs Node.js and npm)')
    port = free_port()
    pin = (lambda: os.sched_setaffinity(0, CPUS[-1:])) if len(CPUS) >= 2 else None
    proc = subprocess.Popen(
        ['node', str(HERE / 's3rver_latency.js'), str(port), str(folder), str(latency * 1e3), BUCKET],
        env={**os.environ, 'NODE_PATH': str(S3RVER)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        preexec_fn=pin,
    )
    atexit.register(proc.kill)
    if proc.stdout.readline().strip() != b'ready':
        sys.exit('bench_object_store_cores.py: s3rver did not start')
    return proc, f'http://127.0.0.1:{port}'


def upload(folder: Path, prefix: str) -> str:
    for f in sorted(folder.rglob('*')):
        if f.is_file():
            put_object(f's3://{BUCKET}/{prefix}/{f.relative_to(folder).as_posix()}', f.read_bytes())
    return f's3://{BUCKET}/{prefix}'


def served(endpoint: str, what: str = 'requests') -> int:
    "The requests s3rver has served so far ('requests'), or the bytes of its GETs' bodies ('bytes')."
    import urllib.request

    return int(urllib.request.urlopen(f'{endpoint}/__{what}', timeout=10).read())


def loader_for(name: str, root: str, a, **kw):
    ds = create_dataset(name, root=root, split='train', is_training=True, batch_size=a.batch_size, **kw)
    return ds, create_loader(
        ds, (3, 224, 224), a.batch_size, is_training=True, num_workers=a.workers, persistent_workers=True, device='cpu'
    )


def run_sources(makers: dict, rounds: int, n: int, server_pid: int, endpoint: str) -> dict:
    """{name: {'rate': [...], 'ms': [...], 'loader_cpus': [...], 'server_cpus': [...], 'gets': [...]}}, one timed epoch a
    round. Each round makes each source's loader in turn (who goes first rotating), runs a warm-up epoch and a timed
    one, and shuts it down: no other loader's workers read ahead meanwhile."""
    keys = ('rate', 'ms', 'loader_cpus', 'server_cpus', 'gets', 'bytes')
    out, names = {k: {x: [] for x in keys} for k in makers}, list(makers)
    for e in range(rounds):
        for name in in_turn(names, e):
            ds, dl = makers[name]()
            for k in (2 * e, 2 * e + 1):  # the warm-up epoch, then the timed one
                ds.set_epoch(k)
                pids = [os.getpid(), *worker_pids(dl)]
                q0, c0, b0, s0 = served(endpoint), sum(proc_cpu(p) for p in pids), busy(), proc_cpu(server_pid)
                y0 = served(endpoint, 'bytes')
                got, dt = time_epoch(dl)
                c1, b1, s1, q1 = sum(proc_cpu(p) for p in pids), busy(), proc_cpu(server_pid), served(endpoint)
                y1 = served(endpoint, 'bytes')
                if got != n:
                    raise RuntimeError(f'{name}: the epoch gave {got} images, not {n}')
            getattr(dl, 'shutdown', lambda: None)()
            r = out[name]
            r['rate'].append(got / dt)
            r['ms'].append((c1 - c0) / got * 1e3)
            r['loader_cpus'].append(sum(b1[c] - b0[c] for c in CPUS[:-1]) / dt)
            r['server_cpus'].append((s1 - s0) / dt)
            r['gets'].append(q1 - q0)
            r['bytes'].append(y1 - y0)
    return out


def request_ways(url: str, size: int, store, flight: int = 32) -> dict:
    """{path: fn(starts) -> bytes read}: ranged GETs of `size` bytes at each of `starts`, `flight` in flight, four ways:
    obstore from `flight` threads, obstore's async API on one event loop, timmdata's `object_range` from threads, and
    `object_get_many` (what the readers call: one event loop a process), `flight` reads a call."""
    import asyncio, obstore

    key = url.split('/', 3)[3]

    def threads(fn):  # each read a call, from `flight` threads
        def run(starts):
            with ThreadPoolExecutor(flight) as ex:
                return sum(ex.map(fn, starts))

        return run

    def one_loop(starts):  # obstore's async API on one event loop, `flight` at a time
        async def run():
            sem = asyncio.Semaphore(flight)

            async def one(a):
                async with sem:
                    return len(await obstore.get_range_async(store, key, start=a, end=a + size))

            return sum(await asyncio.gather(*(one(a) for a in starts)))

        return asyncio.run(run())

    def get_many(starts):  # the readers' path: `flight` reads a call
        calls = (
            object_get_many([(url, a, size) for a in starts[k : k + flight]]) for k in range(0, len(starts), flight)
        )
        return sum(len(b) for got in calls for _, b in got)

    return {
        'obstore.get_range, threads': threads(lambda a: len(obstore.get_range(store, key, start=a, end=a + size))),
        'obstore async, 1 loop': one_loop,
        'timmdata object_range, threads': threads(lambda a: len(object_range(url, a, size)[1])),
        'timmdata object_get_many': get_many,
    }


def spread_starts(n: int) -> list:
    "`n` read offsets in a 5 MB object, never neighbours: one request a read."
    return [(i * 7919 * 1000) % 4_000_000 for i in range(n)]


def request_cpu(url: str, size: int, n: int, store, rounds: int = 3, flight: int = 32) -> dict:
    """{path: (requests/s, this process's CPU ms a request)} of `n` ranged GETs of `size` bytes, `flight` in flight
    (`request_ways`): the median of `rounds`, the paths alternating. The CPU is the whole process's (the client's own
    threads included), over the requests sent (timmdata's paths count theirs: reads that lie close would be one)."""
    starts = spread_starts(n)
    ways = request_ways(url, size, store, flight)
    got = {name: [] for name in ways}
    for _ in range(rounds):
        for name, fn in ways.items():
            g, c, t = REQUESTS['get'], time.process_time(), time.perf_counter()
            total = fn(starts)
            if total != n * size:
                raise RuntimeError(f'{name}: {total} bytes, not {n * size}')
            sent = REQUESTS['get'] - g if name.startswith('timmdata') else n
            got[name].append((sent / (time.perf_counter() - t), (time.process_time() - c) / sent * 1e3))
    return {name: tuple(statistics.median(x[i] for x in r) for i in (0, 1)) for name, r in got.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--n', type=int, default=2240, help='small 96x72 images')
    ap.add_argument('--n-large', type=int, default=1280, help='500x375 images')
    ap.add_argument('--epochs', type=int, default=5, help='rounds: each a warm-up epoch and a timed one per source')
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--latency', type=float, default=0.02, help='seconds added to each S3 request')
    ap.add_argument('--quick', action='store_true', help='640 and 320 images, 2 timed epochs: to try it out')
    ap.add_argument('--out', default=None, help='also write the output here, the command on its first line')
    a = ap.parse_args()
    if a.quick:
        a.n, a.n_large, a.epochs = 640, 320, 2
    a.n, a.n_large = (whole_batches(k, a.batch_size) for k in (a.n, a.n_large))  # an epoch is each image once
    tmp = Path(tempfile.mkdtemp(prefix='bench_object_store_cores_'))
    atexit.register(shutil.rmtree, tmp, True)
    t0 = time.time()
    warnings.simplefilter('ignore')
    sets = {'96x72': make_set(tmp / 'small', a.n, (96, 72)), '500x375': make_set(tmp / 'large', a.n_large, (500, 375))}
    proc, endpoint = start_s3rver(tmp / 's3rver', a.latency)
    set_environment(
        {
            'AWS_ACCESS_KEY_ID': 'S3RVER',  # s3rver's own keys: it checks each request's signature
            'AWS_SECRET_ACCESS_KEY': 'S3RVER',
            'AWS_REGION': 'us-east-1',
            'AWS_ENDPOINT_URL': endpoint,
        }
    )
    loader_cpus = ','.join(map(str, CPUS[:-1])) if len(CPUS) >= 2 else 'all'
    say(
        f's3rver (Node.js) on 127.0.0.1 with {a.latency * 1e3:.0f} ms added to each request, pinned to CPU {CPUS[-1]}; '
        f'this process and its {a.workers} workers pinned to CPU {loader_cpus}; {len(CPUS)} CPUs; READ_AHEAD '
        f'{READ_AHEAD_STORE} a worker'
    )
    results = {}
    for label, s in sets.items():
        roots = {f: upload(s[f], f'{label}/{f}') for f in ('wds', 'pq')}
        say(
            f'\n{s["n"]} generated {label} JPEGs ({s["image_bytes"] / s["n"] / 1e3:.1f} KB on average); the median of '
            f'{a.epochs} rounds (each: a new loader, a warm-up epoch, a timed one)'
        )
        sources = {
            'shards local': ('wds/x', str(s['wds']), {}),
            'shards s3': ('wds/x', roots['wds'], {}),
            'shards s3 cache': ('wds/x', roots['wds'], {'cache_dir': str(tmp / f'cache_{label}')}),
            'Parquet local': ('parquet/x', str(s['pq']), {}),
            'Parquet s3': ('parquet/x', roots['pq'], {}),
        }
        makers = {k: functools.partial(loader_for, name, root, a, **kw) for k, (name, root, kw) in sources.items()}
        got = run_sources(makers, a.epochs, s['n'], proc.pid, endpoint)
        say(
            f'   {"source":<16}{"images/s":>10}{"x local":>9}{"paired":>8}{"CPU ms/img":>12}{"loader CPUs":>13}'
            f'{"server CPU":>12}{"GETs/image":>12}{"bytes/image":>12}   each round (images/s)'
        )
        for name, r in got.items():
            base = got[name.split()[0] + ' local']
            m, ratio = statistics.median(r['rate']), statistics.median(r['rate']) / statistics.median(base['rate'])
            p = paired(r['rate'], base['rate'])
            results[(label, name)] = (ratio, statistics.median(r['ms']) - statistics.median(base['ms']))
            say(
                f'   {name:<16}{m:>10.0f}{ratio:>9.2f}{p:>8.2f}{statistics.median(r["ms"]):>12.3f}'
                f'{statistics.median(r["loader_cpus"]):>13.2f}{statistics.median(r["server_cpus"]):>12.2f}'
                f'{statistics.median(r["gets"]) / s["n"]:>12.2f}{statistics.median(r["bytes"]) / s["image_bytes"]:>12.2f}   '
                + ' '.join(f'{x:.0f}' for x in r['rate'])
            )
    import obstore.store

    store = obstore.store.S3Store(
        BUCKET,
        endpoint=endpoint,
        access_key_id='S3RVER',
        secret_access_key='S3RVER',
        region='us-east-1',
        client_options={'allow_http': True},
    )
    put_object(f's3://{BUCKET}/bench/blob', os.urandom(4_100_000))
    say(
        f'\nOne ranged GET from this process alone (no loader; the client call only), 32 in flight, {a.latency * 1e3:.0f} '
        f'ms added; the median of 3 rounds, the paths alternating:'
    )
    say(f'   {"size":>9}  {"path":<32}{"requests/s":>12}{"CPU ms/request":>16}')
    for size in (3_000, 53_000):
        for name, (rate, ms) in request_cpu(f's3://{BUCKET}/bench/blob', size, 600 if a.quick else 1000, store).items():
            say(f'   {size:>9,}  {name:<32}{rate:>12.0f}{ms:>16.3f}')
    say('\nGoals (images/s from the bucket >= 0.9x the same files on disk, the server on a CPU of its own):')
    for (label, name), (ratio, extra) in results.items():
        if 's3' in name:
            say(
                f'   {label} {name}: {ratio:.2f}x local, {extra:+.3f} CPU ms an image against local: '
                f'{"met" if ratio >= 0.9 else "MISSED"}'
            )
    say(f'({time.time() - t0:.0f} s)')
    REPORT.write(a.out)


if __name__ == '__main__':
    main()
