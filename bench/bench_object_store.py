"""Datasets in an S3 bucket against the same files over HTTP and on disk, in one run: a real S3 server on this machine
(moto's, `timmdata.net.local_s3.LocalS3`, behind its proxy that counts each request and can add a latency to each) and
a counting HTTP server on 127.0.0.1 that answers ranged reads (bench_startup_requests.py's), serving the same files.

a. Requests before the first batch: `create_dataset(..., is_training=True)` and `create_loader` without workers and
   with 2, over shards with their dataset index (and Parquet files with theirs), each in a fresh index folder, counted
   from building the dataset to the first batch; over `s3://` and over `http://`. The count is split into what the
   stream reads to start (the dataset's files: `_info.json`, the index and its parts; listings, HEADs) and the samples'
   ranged reads made by then. Goal: the same as HTTP. With 2 workers both depend on timing (each worker reads the
   index's part for a shard when it first meets it, and keeps `READ_AHEAD` reads in flight).
b. Bytes fetched over `s3://` in `--epochs` + 1 training epochs (2 persistent workers, no node cache): the bytes the
   proxy sent back for GETs (each ranged GET's range, capped at the object's size; a whole GET the object's size),
   against the images' own bytes (the JPEG files an epoch reads, each once). An epoch's bytes are counted from the end
   of the one before (a persistent worker done with its share reads the next epoch's first batch ahead). Shards with
   their index and Parquet files with theirs (image column uncompressed), `--n-bytes` generated 500x375 JPEGs
   (53 KB on average). Goal: <= 1.1x.
c. Training images/s: `--n` small generated JPEGs (`--size`, default 96x72) as shards with their index (and as
   Parquet files with theirs), create_loader's training pipeline at 224 (random resized crop, flip; decode included),
   2 persistent workers, batch 64, CPU output, the default read-ahead; from the bucket with `--latency` seconds (20 ms)
   added to each request, against the same files read from the disk. Steady state: a warm-up epoch (dropped), then the
   median of `--epochs` (3) timed epochs; the sources alternate within each epoch, who goes first rotating. Goal:
   >= 0.9x local. To say what holds it: the shards read from the bucket with no latency added, the CPU each process
   used (the S3 server, this process: the proxy's threads and the loop, the workers), the read-ahead's bound
   (workers x READ_AHEAD requests in flight / latency); then ranged GETs from this process alone (no loader), 1 and
   16 at a time, through the proxy, straight to the S3 server, and through the proxy with TCP_NODELAY set on its
   connections (each answer sent at once), and the loader again through that proxy.

    python bench/bench_object_store.py                    # about 4 minutes on 2 cores
    python bench/bench_object_store.py --quick            # a smaller run: to try it out, not for figures
    python bench/bench_object_store.py --out bench/results/NAME/README.txt   # also writes the output, the command first
"""

from __future__ import annotations
import argparse, atexit, functools, os, random, re, shutil, statistics, sys, tempfile, time, warnings
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the timmdata of this tree
sys.path.insert(0, str(HERE))
from bench_startup_requests import CountingHandler, CountingServer
from _common import Report, in_turn, paired, proc_cpu, whole_batches
from timmdata import create_dataset, create_loader, make_sample_dataset, write_shards
from timmdata.index.span_reader import (
    READ_AHEAD_STORE as READ_AHEAD,
)  # what a worker keeps in flight from an object store
from concurrent.futures import ThreadPoolExecutor
from timmdata.net.local_s3 import LocalS3
from timmdata.net.object_store import configure_store, object_range
from timmdata.parquet.source import write_parquet_index, write_sample_parquet
from timmdata.tools.bench import time_epoch, worker_pids

REPORT = Report()  # what is printed, kept for --out
say = REPORT.say


def make_set(root: Path, n: int, size: tuple) -> dict:
    "`n` generated JPEGs of `size` (10 classes) as shards with their dataset index (4 or more shards) and as 4 Parquet files with their index; {'wds': folder, 'pq': folder, 'image_bytes': the JPEGs' bytes, 'n': images}."
    photos = make_sample_dataset(root / 'photos', n_train=max(1, n // 10), n_val=0, size=size, quality=90)
    files = sorted((photos / 'train').rglob('*.JPEG'))
    classes = sorted({f.parent.name for f in files})
    write_shards(photos, root / 'wds', shard_size=max(1, len(files) // 8), split='train', progress=False)
    samples = [(f.read_bytes(), classes.index(f.parent.name)) for f in files]
    write_sample_parquet(root / 'pq', samples, classes, files=4, row_group_size=64)
    write_parquet_index(root / 'pq')
    return dict(wds=root / 'wds', pq=root / 'pq', image_bytes=sum(len(b) for b, _ in samples), n=len(files))


class LoggingHandler(CountingHandler):
    "bench_startup_requests.py's counting handler that also logs each request as (method, path, Range), as LocalS3's `log`."

    def _count(self, method):
        super()._count(method)
        with self.server.lock:
            self.server.log.append((self.command, self.path, self.headers.get('Range')))


def logging_server(folder) -> CountingServer:
    srv = CountingServer(folder)
    srv.srv.RequestHandlerClass = functools.partial(LoggingHandler, directory=str(folder))
    srv.srv.log = []
    return srv


class Bucket:
    "The LocalS3 bucket with the sets uploaded, and the sizes of its objects (to count the bytes the proxy sends)."

    def __init__(self, s3: LocalS3):
        self.s3, self.sizes = s3, {}

    def upload(self, folder: Path, prefix: str) -> str:
        for f in folder.rglob('*'):
            if f.is_file():
                self.sizes[f'/{self.s3.bucket}/{prefix}/{f.relative_to(folder).as_posix()}'] = f.stat().st_size
        return self.s3.upload(folder, prefix)


def split_log(log: list, sizes: Optional[dict] = None) -> dict:
    "A log of (method, path, Range) split: {'start': requests other than a data file's (.tar, .parquet) ranged GETs (the dataset's files, listings, HEADs), 'samples': those, 'sample_bytes', 'start_bytes' (the bytes sent back: a range capped at the object's size, a whole GET the object's size; `sizes`: path -> size), 'lists', 'heads', 'gets'}."
    sizes = sizes or {}
    out = dict(start=0, samples=0, sample_bytes=0, start_bytes=0, lists=0, heads=0, gets=0, ranged=0)
    for method, path, rng in log:
        key = path.split('?', 1)[0]
        if method == 'HEAD':
            out['start'] += 1
            out['heads'] += 1
            continue
        if method != 'GET':
            continue
        if '?' in path:  # a listing (?list-type=2&prefix=...)
            out['start'] += 1
            out['lists'] += 1
            continue
        size = sizes.get(key, 0)
        n = size
        if rng:
            a, b = re.fullmatch(r'bytes=(\d+)-(\d*)', rng).groups()
            n = max(0, min(int(b) + 1 if b else size, size) - int(a))
        if rng and key.endswith(('.tar', '.parquet')):
            out['samples'] += 1
            out['sample_bytes'] += n
        else:
            out['start'] += 1
            out['gets'] += 1
            out['ranged'] += bool(rng)
            out['start_bytes'] += n
    return out


def loader_for(name: str, root: str, a, workers: int = 2, **kw):
    ds = create_dataset(name, root=root, split='train', is_training=True, batch_size=a.batch_size, **kw)
    return ds, create_loader(
        ds, (3, 224, 224), a.batch_size, is_training=True, num_workers=workers, persistent_workers=True, device='cpu'
    )


def first_batch(name: str, root: str, a, index_dir: str, workers: int):
    "Build the dataset and a training loader, take the first batch, stop."
    _, dl = loader_for(name, root, a, workers=workers, index_dir=index_dir)
    it = iter(dl)
    next(it)
    del it
    getattr(dl, 'shutdown', lambda: None)()


def part_requests(bucket: Bucket, srv: CountingServer, tmp: Path, a):
    s3 = bucket.s3
    say('\na. Requests before the first batch (create_dataset + create_loader, a fresh index folder each)')
    say(f'   {"format":<24}{"workers":>8}{"over":>6}{"to start":>10}{"samples read":>14}{"all":>6}   to start: what')
    res = {}
    for fmt, name, folder in (('shards + dataset index', 'wds/x', 'wds'), ('Parquet + index', 'parquet/x', 'pq')):
        for workers in (0, 2):
            counts = {}
            for over in ('http', 's3'):
                log = srv.srv.log if over == 'http' else s3.log
                log.clear()
                root = f'{srv.url}/bytes/{folder}' if over == 'http' else s3.url(f'bytes/{folder}')
                first_batch(name, root, a, str(tmp / f'idx-{over}-{folder}-{workers}'), workers)
                c = counts[over] = split_log(list(log))
                what = (
                    f'{c["gets"] - c["ranged"]} whole GETs, {c["ranged"]} ranged GETs of the index, {c["heads"]} '
                    f'HEADs, {c["lists"]} listings'
                )
                say(
                    f'   {fmt if (over, workers) == ("http", 0) else "":<24}{workers if over == "http" else "":>8}'
                    f'{over:>6}{c["start"]:>10}{c["samples"]:>14}{c["start"] + c["samples"]:>6}   {what}'
                )
            res[(fmt, workers)] = counts
    say(
        '   (to start: the requests that are not a sample\'s read: the dataset\'s files; samples read: the ranged reads '
        'made by the first batch, read-ahead included. With 2 workers both depend on timing: each worker reads the '
        'index\'s part for a shard when it first meets it, and keeps READ_AHEAD reads in flight)'
    )
    for (fmt, workers), c in res.items():
        s, h = c['s3']['start'], c['http']['start']
        say(f'   {fmt}, {workers} workers: s3 / http requests to start {s / max(h, 1):.2f}x (goal: the same as HTTP)')
    return res


def part_bytes(bucket: Bucket, sets: dict, a):
    s3 = bucket.s3
    big = sets['bytes']
    epochs = a.epochs + 1
    say(
        f'\nb. Bytes fetched over s3:// against the images\' bytes: {epochs} training epochs, 2 persistent workers, '
        f'no node cache'
    )
    say(
        f'   {big["n"]} generated 500x375 JPEGs, {big["image_bytes"] / big["n"] / 1e3:.1f} KB on average, '
        f'{big["image_bytes"] / 1e6:.2f} MB an epoch. An epoch\'s bytes are counted from the end of the one before: a '
        f'persistent worker done with its share reads the next epoch\'s first samples ahead'
    )
    say(
        f'   {"format":<24}{"first epoch":>12}{"then (median)":>15}{"all epochs":>12}   '
        f'each epoch (fetched / images\' bytes; sample reads)'
    )
    res = {}
    for fmt, name, folder in (('shards + dataset index', 'wds/x', 'wds'), ('Parquet + index', 'parquet/x', 'pq')):
        s3.log.clear()
        ds, dl = loader_for(name, s3.url(f'bytes/{folder}'), a)
        per, at = [], 0
        for e in range(epochs):
            ds.set_epoch(e)
            n = sum(len(y) for _, y in dl)
            if n != big['n']:
                raise RuntimeError(f'{fmt}: epoch {e} gave {n} images, not {big["n"]}')
            log = list(s3.log)
            got, at = split_log(log[at:], bucket.sizes), len(log)
            per.append(((got['sample_bytes'] + got['start_bytes']) / big['image_bytes'], got['samples']))
        getattr(dl, 'shutdown', lambda: None)()
        whole = sum(r for r, _ in per) / epochs
        later = statistics.median(r for r, _ in per[1:])
        res[fmt] = (later, whole)
        say(
            f'   {fmt:<24}{per[0][0]:>11.3f}x{later:>14.3f}x{whole:>11.3f}x   '
            + ', '.join(f'{r:.3f}x {k}' for r, k in per)
        )
    small = sets['rate']
    say(
        f'   (the first epoch also reads the index and, at its end, the next epoch\'s first samples; a shard\'s sample '
        f'also holds 3 tar headers and its .cls member, 1.5 KB or more, which its read fetches with it: against the '
        f'{small["image_bytes"] / small["n"] / 1e3:.1f} KB images of c., '
        f'{(small["image_bytes"] / small["n"] + 1536) / (small["image_bytes"] / small["n"]):.1f}x or more)'
    )
    return res


def part_rate(bucket: Bucket, sets: dict, a):
    s3 = bucket.s3
    small = sets['rate']
    say(
        f'\nc. Training images/s: {small["n"]} generated {a.size[0]}x{a.size[1]} JPEGs '
        f'({small["image_bytes"] / small["n"] / 1e3:.1f} KB on average), 224 px training pipeline, '
        f'{a.workers} workers, batch {a.batch_size}, CPU output; a warm-up epoch, then the median of {a.epochs} epochs'
    )
    lat = a.latency
    sources = {  # name -> (dataset name, root, latency added to each request)
        'shards local': ('wds/x', str(small['wds']), None),
        f'shards s3 +{lat * 1e3:.0f}ms': ('wds/x', s3.url('rate/wds'), lat),
        'shards s3 +0ms': ('wds/x', s3.url('rate/wds'), 0.0),
        'Parquet local': ('parquet/x', str(small['pq']), None),
        f'Parquet s3 +{lat * 1e3:.0f}ms': ('parquet/x', s3.url('rate/pq'), lat),
    }
    loaders = {k: loader_for(n, r, a, workers=a.workers) for k, (n, r, _) in sources.items()}
    rates, cpu, reqs, names = {k: [] for k in loaders}, {}, {}, list(loaders)
    for e in range(a.epochs + 1):
        for name in in_turn(names, e):
            ds, dl = loaders[name]
            s3.latency = sources[name][2] or 0.0
            ds.set_epoch(e)
            pids = {'S3 server (moto)': s3._proc.pid, 'this process (proxy, loop)': os.getpid()}
            pids.update({f'worker {i}': p for i, p in enumerate(worker_pids(dl))})
            before = {k: proc_cpu(p) for k, p in pids.items()}
            s3.log.clear()
            n, dt = time_epoch(dl)
            if n != small['n']:
                raise RuntimeError(f'{name}: the epoch gave {n} images, not {small["n"]}')
            if e:
                rates[name].append(n / dt)
                for k, p in pids.items():
                    cpu.setdefault(name, {}).setdefault(k, []).append((proc_cpu(p) - before[k]) / dt)
                reqs[name] = len(s3.log)
    s3.latency = 0.0
    say(f'   {"source":<20}{"images/s":>10}{"x local":>9}{"paired":>8}{"GETs/epoch":>12}   timed epochs (images/s)')
    res = {}
    for name, r in rates.items():
        base = rates[name.split()[0] + ' local']
        m = statistics.median(r)
        p = paired(r, base)
        res[name] = m / statistics.median(base)
        g = reqs.get(name, 0) if sources[name][2] is not None else '-'
        say(f'   {name:<20}{m:>10.0f}{res[name]:>9.2f}{p:>8.2f}{g:>12}   ' + ' '.join(f'{x:.0f}' for x in r))
    say('   CPU cores used during the epochs (each process, median over the timed epochs):')
    for name in rates:
        if sources[name][2] is None:
            continue
        say(f'   {name:<20}' + ', '.join(f'{k} {statistics.median(v):.2f}' for k, v in cpu[name].items()))
    s3_fast = statistics.median(rates['shards s3 +0ms'])
    say(
        f'   the read-ahead\'s bound with +{lat * 1e3:.0f}ms: {a.workers} workers x {READ_AHEAD} requests in flight '
        f'/ {lat * 1e3:.0f} ms = {a.workers * READ_AHEAD / lat:.0f} requests/s at most (one request an image: '
        f'{a.workers * READ_AHEAD / lat:.0f} images/s); the local server\'s own ceiling (+0ms): {s3_fast:.0f} images/s; '
        f'local: {statistics.median(rates["shards local"]):.0f} images/s'
    )
    for _, dl in loaders.values():
        getattr(dl, 'shutdown', lambda: None)()
    return res


def request_rate(bucket: Bucket, url: str, size: int, threads: int, n: int = 600) -> tuple:
    "(requests/s, the S3 server's CPU ms a request, this process's) of `n` ranged GETs of 3,000 bytes of `url`, `threads` at a time, from this process (no loader)."
    s3, rng = bucket.s3, random.Random(0)
    reqs = [rng.randrange(0, max(1, size - 3000)) for _ in range(n)]
    c0, t = (proc_cpu(s3._proc.pid), proc_cpu(os.getpid())), time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda o: object_range(url, o, 3000), reqs))
    dt = time.perf_counter() - t
    c1 = (proc_cpu(s3._proc.pid), proc_cpu(os.getpid()))
    return n / dt, (c1[0] - c0[0]) / n * 1e3, (c1[1] - c0[1]) / n * 1e3


def part_why(bucket: Bucket, sets: dict, a):
    "What holds c.: the S3 server's own rate, the proxy's, and the loader through a proxy that sends each answer at once."
    s3, small = bucket.s3, sets['rate']
    key = f'rate/wds/{min(p.name for p in small["wds"].glob("*.tar"))}'
    url, size = s3.url(key), bucket.sizes[f'/{s3.bucket}/{key}']
    say(
        f'\nWhat holds c.: ranged GETs of 3,000 bytes from this process (threads, no loader), 1 and '
        f'{a.workers * READ_AHEAD} in flight ({a.workers} workers x READ_AHEAD)'
    )
    say(f'   {"path":<44}{"in flight":>10}{"requests/s":>12}{"server ms/req":>15}{"proxy+client ms/req":>21}')
    prefix = f's3://{s3.bucket}'
    rows = (
        ('proxy (as LocalS3 runs it: TCP_NODELAY), +0ms', s3.endpoint, 0.0, True),
        (f'proxy (TCP_NODELAY), +{a.latency * 1e3:.0f}ms', s3.endpoint, a.latency, True),
        ('the S3 server alone (no proxy)', f'http://127.0.0.1:{s3.port}', 0.0, True),
        ("proxy with Nagle's algorithm on, +0ms", s3.endpoint, 0.0, False),
    )
    for k, (what, endpoint, lat, nodelay) in enumerate(rows):
        s3._proxy.RequestHandlerClass.disable_nagle_algorithm = nodelay  # each new connection's setting
        configure_store(prefix, endpoint_url=endpoint, region=f'us-east-{k + 1}')  # new clients: new connections
        s3.latency = lat
        for threads in (1, a.workers * READ_AHEAD):
            r, server, here = request_rate(bucket, url, size, threads, n=100 if threads == 1 else 600)
            say(f'   {what if threads == 1 else "":<44}{threads:>10}{r:>12.0f}{server:>15.2f}{here:>21.2f}')
    s3.latency = 0.0
    say(
        f'   the loader through the proxy with TCP_NODELAY (each connection made after it is set), shards, '
        f'+{a.latency * 1e3:.0f}ms against local, a warm-up epoch then the median of {a.epochs}:'
    )
    configure_store(prefix, endpoint_url=s3.endpoint, region='us-east-9')
    loaders = {
        'shards local': (loader_for('wds/x', str(small['wds']), a, workers=a.workers), None),
        f'shards s3 +{a.latency * 1e3:.0f}ms nodelay': (
            loader_for('wds/x', s3.url('rate/wds'), a, workers=a.workers),
            a.latency,
        ),
    }
    rates = {k: [] for k in loaders}
    for e in range(a.epochs + 1):
        for name in in_turn(list(loaders), e):
            (ds, dl), lat = loaders[name]
            s3.latency = lat or 0.0
            ds.set_epoch(e)
            n, dt = time_epoch(dl)
            if e:
                rates[name].append(n / dt)
    s3.latency = 0.0
    base = statistics.median(rates['shards local'])
    for name, r in rates.items():
        say(
            f'   {name:<34}{statistics.median(r):>8.0f} images/s{statistics.median(r) / base:>7.2f}x local   '
            + ' '.join(f'{x:.0f}' for x in r)
        )
    for (_, dl), _ in loaders.values():
        getattr(dl, 'shutdown', lambda: None)()
    s3._proxy.RequestHandlerClass.disable_nagle_algorithm = True  # as LocalS3 runs it
    return statistics.median(rates[f'shards s3 +{a.latency * 1e3:.0f}ms nodelay']) / base


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--n', type=int, default=2240, help='images of the throughput set (c)')
    ap.add_argument('--size', type=int, nargs=2, default=[96, 72], help="the throughput set's images, width height")
    ap.add_argument('--n-bytes', type=int, default=1280, help='500x375 images of the requests and bytes set (a, b)')
    ap.add_argument('--epochs', type=int, default=3, help='timed epochs after the warm-up one (c)')
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--latency', type=float, default=0.02, help='seconds added to each S3 request (c)')
    ap.add_argument('--quick', action='store_true', help='640 and 320 images, 2 timed epochs: to try it out')
    ap.add_argument('--out', default=None, help='also write the output here, the command on its first line')
    a = ap.parse_args()
    if a.quick:
        a.n, a.n_bytes, a.epochs = 640, 320, 2
    a.size = tuple(a.size)
    a.n, a.n_bytes = (whole_batches(k, a.batch_size) for k in (a.n, a.n_bytes))  # an epoch is each image once
    tmp = Path(tempfile.mkdtemp(prefix='bench_object_store_'))
    atexit.register(shutil.rmtree, tmp, True)
    t0 = time.time()
    sets = {'bytes': make_set(tmp / 'bytes', a.n_bytes, (500, 375)), 'rate': make_set(tmp / 'rate', a.n, a.size)}
    say(
        f'LocalS3 (moto\'s S3 server and the counting proxy) and a counting HTTP server on 127.0.0.1, the same files; '
        f'{os.cpu_count()} CPUs; timmdata READ_AHEAD {READ_AHEAD}'
    )
    with LocalS3() as s3, warnings.catch_warnings():
        warnings.simplefilter('ignore')
        bucket = Bucket(s3)
        for k in ('bytes', 'rate'):
            for f in ('wds', 'pq'):
                bucket.upload(sets[k][f], f'{k}/{f}')
        srv = logging_server(tmp)
        try:
            req = part_requests(bucket, srv, tmp, a)
        finally:
            srv.close()
        byt = part_bytes(bucket, sets, a)
        rate = part_rate(bucket, sets, a)
        why = part_why(bucket, sets, a)
    say('\nGoals:')
    for (fmt, workers), c in req.items():
        fixed = [(c[o]['gets'] - c[o]['ranged'], c[o]['heads'], c[o]['lists']) for o in ('s3', 'http')]
        # the start-up's own requests (the dataset's files: whole GETs, HEADs, listings) must be the same; the index's
        # parts are read as the first batch's reads meet shards: more with more reads in flight (an object store keeps
        # READ_AHEAD_STORE a worker, http READ_AHEAD), so they are shown, not compared
        met = fixed[0] == fixed[1]
        say(
            f'   a. {fmt}, {workers} workers: to start, s3 {c["s3"]["start"]} vs http {c["http"]["start"]} (whole GETs, '
            f'HEADs, listings: {fixed[0]} vs {fixed[1]}; the index\'s parts: {c["s3"]["ranged"]} vs '
            f'{c["http"]["ranged"]}, as the first batch\'s reads met shards, more reads in flight over s3): {"met" if met else "MISSED"}'
        )
    for fmt, (r, whole) in byt.items():
        say(
            f'   b. {fmt}: fetched {r:.3f}x the images\' bytes an epoch after the first, {whole:.3f}x over all '
            f'(<= 1.10x): {"met" if max(r, whole) <= 1.1 else "MISSED"}'
        )
    for name, r in rate.items():
        if 'ms' in name and '+0ms' not in name:
            say(f'   c. {name}: {r:.2f}x local (>= 0.90x): {"met" if r >= 0.9 else "MISSED"}')
    say(f'   c. shards s3 through the proxy with TCP_NODELAY: {why:.2f}x local')
    say(f'({time.time() - t0:.0f} s)')
    REPORT.write(a.out)


if __name__ == '__main__':
    main()
