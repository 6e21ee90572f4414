"""Parquet read by position (nbs/parquet/26d_source.ipynb), in one run: one training epoch of the same images (by
default ImageNet's most common size and encoding: 500x375 baseline JPEGs made by `timmdata.make_sample_dataset`,
quality 90; `--size 160` for small 160x120 ones, where a request's cost around the bytes weighs most) with the
same train transform through create_loader, read from (1) the image folder, (2) Parquet files in the Hub's layout read
by timmdata with the index (`parquet/`, local), (3) the same files over a loopback HTTP server that answers ranged reads
(a separate process), (4) `hfds/` and (5) `hfids/` (Hugging Face `datasets` over the same files), (6) WebDataset shards
with their dataset index, and (7) `timm hfids/`: timm's own `create_dataset('hfids/...')` and `create_loader` over the
same files, what a timm user streaming Parquet from the Hub runs today. Medians over `--epochs` epochs after a warm-up, the sources alternating; prints images/s, the
ratio to the folder, CPU ms per image of the loader's processes, and the CPU the HTTP server (a separate Python
process sharing the machine's cores) spent an image; then, over HTTP, the bytes fetched per image (row groups of 100 rows and one row
group a file, with and without the index) and the requests made before the first batch (4 files and 64 files).

    python bench/bench_parquet.py --n 1000 --epochs 4 --workers 2
    python bench/bench_parquet.py --n 1000 --epochs 4 --workers 2 --size 160   # small images
"""

import argparse, atexit, io, json, os, shutil, subprocess, sys, tempfile, time, urllib.request, warnings
from pathlib import Path
from timmdata import create_dataset, create_loader, make_sample_dataset
from timmdata.parquet.source import write_parquet_index, write_sample_parquet
from _common import alternate_epochs, free_port, print_rates, proc_cpu, train_loaders

PY_SERVER = r'''
import http.server, json, os, sys, threading
log = [0, 0]
class H(http.server.SimpleHTTPRequestHandler):
    disable_nagle_algorithm, wbufsize = True, 1 << 16  # headers and body in one write: no 40 ms delayed-ACK stall a request
    protocol_version = 'HTTP/1.1'  # connections kept open, as a web server or object store keeps them
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == '/_stats':
            body = json.dumps(log).encode(); self.send_response(200); self.send_header('Content-Length', str(len(body)))
            self.end_headers(); self.wfile.write(body); log[:] = [0, 0]; return
        path = self.translate_path(self.path)
        if not os.path.isfile(path): return super().do_GET()
        size, rng = os.path.getsize(path), self.headers.get('Range')
        a, b = (0, size - 1) if not rng else rng.split('=', 1)[1].split('-')
        a, b = (max(0, size - int(b)), size - 1) if a == '' else (int(a), min(int(b), size - 1))  # bytes=-n: the tail
        with open(path, 'rb') as f: f.seek(a); data = f.read(b + 1 - a)
        log[0] += 1; log[1] += len(data)
        self.send_response(206 if rng else 200); self.send_header('Content-Length', str(len(data)))
        if rng: self.send_header('Content-Range', f'bytes {a}-{a + len(data) - 1}/{size}')
        self.end_headers(); self.wfile.write(data); self.wfile.flush()
class S(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # Python's default backlog of 5 drops connections when 8 reads are in flight (1 s retries)
    def handle_error(self, *a): pass  # a client closing its kept connection is not news
S(('127.0.0.1', int(sys.argv[2])), lambda *a: H(*a, directory=sys.argv[1])).serve_forever()
'''

# A file server as a web server or object store is one: kept connections, a request parsed by a few byte searches, the
# body sent by sendfile (no copy through Python). On a machine of 2 cores its CPU is the loader's loss: ~4x less than
# http.server's (the line after the table says how much each spent)
SERVER = r'''
import json, os, socket, sys, threading
root, log = sys.argv[1], [0, 0]
def handle(c):
    try: serve(c)
    except OSError: pass  # a client that went away
    finally: c.close()
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf, fds = b'', {}
    if True:
        while True:
            while b'\r\n\r\n' not in buf:
                got = c.recv(65536)
                if not got: return
                buf += got
            head, _, buf = buf.partition(b'\r\n\r\n')
            lines = head.split(b'\r\n')
            path = lines[0].split(b' ')[1].decode()
            if path == '/_stats':
                body = json.dumps(log).encode(); log[:] = [0, 0]
                c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n' % len(body) + body); continue
            rng = next((l[6:].strip() for l in lines[1:] if l[:6].lower() == b'range:'), None)
            head_only = lines[0].startswith(b'HEAD ')  # fsspec (hfids/ over http) asks a file's size first
            full = os.path.join(root, path.lstrip('/'))  # a benchmark's server: its only client is the benchmark
            try:
                fd = fds[full] if full in fds else fds.setdefault(full, os.open(full, os.O_RDONLY))
            except OSError:
                c.sendall(b'HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n'); continue
            size = os.fstat(fd).st_size
            a, b = rng.split(b'=', 1)[1].split(b'-') if rng else (b'0', b'%d' % (size - 1))
            a, b = (max(0, size - int(b)), size - 1) if a == b'' else (int(a), min(int(b), size - 1))  # bytes=-n: the tail
            n = b + 1 - a
            c.send((b'HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\n' % (a, b, size) if rng else
                    b'HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\n') + b'Content-Length: %d\r\n\r\n' % n, 0 if head_only else socket.MSG_MORE)
            sent = n if head_only else 0
            while sent < n: sent += os.sendfile(c.fileno(), fd, a + sent, n - sent)
            log[0] += 1; log[1] += 0 if head_only else n
s = socket.create_server(('127.0.0.1', int(sys.argv[2])), backlog=128)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
'''


SERVERS = {}  # url: the server's pid


def serve(folder, code: str = SERVER) -> str:
    port = free_port()
    p = subprocess.Popen([sys.executable, '-c', code, str(folder), str(port)])
    atexit.register(p.terminate)
    SERVERS[f'http://127.0.0.1:{port}'] = p.pid
    for _ in range(100):
        try:
            urllib.request.urlopen(f'http://127.0.0.1:{port}/_stats').read()
            break
        except OSError:
            time.sleep(0.05)
    return f'http://127.0.0.1:{port}'


def stats(url) -> tuple:
    "(requests, bytes) the server answered since it was last asked (and reset)."
    return tuple(json.loads(urllib.request.urlopen(url + '/_stats').read()))


def timm_hfids(tmp: Path, a, n: int) -> tuple:
    "(dataset, loader): timm's `create_dataset('hfids/...')` (Hugging Face streaming) and timm's `create_loader` over it."
    import timm.data as td
    import torch

    ds = td.create_dataset(
        'hfids/' + str(tmp / 'pq'), root=str(tmp / 'hf_cache_timm'), split='train', is_training=True,
        batch_size=a.batch_size, num_samples=n,
    )  # fmt: skip
    return ds, td.create_loader(
        ds, a.input_size, a.batch_size, is_training=True, num_workers=a.workers, persistent_workers=True,
        device=torch.device('cpu'),
    )  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--n', type=int, default=1000, help='images (10 classes)')
    ap.add_argument('--epochs', type=int, default=2)
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--batch-size', type=int, default=32)
    ap.add_argument('--size', type=int, default=500, help='image width (height 3/4 of it): 500 (ImageNet\'s most common size) or 160 (small)')
    ap.add_argument('--skip-hf', action='store_true', help='leave out hfds/ and hfids/')
    a = ap.parse_args()
    a.input_size = (3, 224, 224)  # what timmdata.tools.bench.time_epoch checks
    tmp = Path(tempfile.mkdtemp(prefix='bench_parquet_'))
    atexit.register(shutil.rmtree, tmp, True)
    os.environ['XDG_CACHE_HOME'] = str(tmp / 'node')  # the node's kept footers: this run's own (workers inherit it)
    photos = make_sample_dataset(tmp / 'photos', n_train=a.n // 10, n_val=0, size=(a.size, a.size * 3 // 4))
    files = sorted((photos / 'train').rglob('*.JPEG'))
    classes = sorted({f.parent.name for f in files})
    samples = [(f.read_bytes(), classes.index(f.parent.name)) for f in files]
    img_bytes = sum(len(b) for b, _ in samples) / len(samples)
    t0 = time.perf_counter()
    write_sample_parquet(tmp / 'pq', samples, classes, files=4, row_group_size=100)  # the Hub's old row groups
    write_parquet_index(tmp / 'pq')
    print(
        f'{len(samples)} images of {a.size}x{a.size * 3 // 4} (timmdata.make_sample_dataset, JPEG quality 90), {img_bytes:,.0f} bytes on average; Parquet written and indexed in {time.perf_counter() - t0:.1f} s'
    )
    from timmdata.tools.shards import shards_main

    shards_main(
        [str(photos), str(tmp / 'wds'), '--split', 'train', '--shard-size', str(max(1, a.n // 4)), '--no-progress']
    )
    subprocess.run(
        [sys.executable, '-m', 'timmdata.tools.cli', 'index', str(tmp / 'wds'), '--no-progress'],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    url, url_py, url_hf = serve(tmp / 'pq'), serve(tmp / 'pq', PY_SERVER), None
    common = dict(split='train', is_training=True, batch_size=a.batch_size)
    sources = {
        'folder': lambda: create_dataset('', root=str(photos), split='train', is_training=True),
        'parquet local': lambda: create_dataset('parquet/x', root=str(tmp / 'pq'), **common),
        'parquet HTTP': lambda: create_dataset('parquet/x', root=url, **common),
        'parquet http.server': lambda: create_dataset('parquet/x', root=url_py, **common),
        'wds shards': lambda: create_dataset('wds/x', root=str(tmp / 'wds'), **common),
    }
    if not a.skip_hf:
        # datasets (5.x) sleeps 5 s at the end of each streamed pass, after its reading threads (a guard against an arrow
        # crash at their shutdown): a pause an epoch of 1,000 images would measure and one of ImageNet's would not.
        # Left out here, for every Hugging Face source: their steady state
        import datasets.config

        datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN = 0
        sources['hfds/'] = lambda: create_dataset(
            'hfds/' + str(tmp / 'pq'), root=str(tmp / 'hf_cache'), split='train', is_training=True
        )
        sources['hfids/'] = lambda: create_dataset(
            'hfids/' + str(tmp / 'pq'), root=str(tmp / 'hf_cache'), num_samples=len(samples), **common
        )
        url_hf = serve(tmp / 'pq')  # a server of its own: each server's CPU is one reader's
        remote = [f'{url_hf}/data/{p.name}' for p in sorted((tmp / 'pq' / 'data').glob('*.parquet'))]
        sources['hfids/ HTTP'] = lambda: create_dataset(  # datasets' streaming of the same files from the server
            'hfids/parquet', root=str(tmp / 'hf_cache'), num_samples=len(samples), data_files={'train': remote}, **common
        )
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        loaders = train_loaders(sources, a)
        if not a.skip_hf:  # what a timm user runs today: timm's own hfids/ reader and loader (timm's defaults)
            loaders['timm hfids/'] = timm_hfids(tmp, a, len(samples))
        for name in [
            k for k in loaders if k.startswith(('hf', 'timm'))
        ]:  # one epoch first: a source that fails is left out, said why
            try:
                sum(len(y) for _, y in loaders[name][1])
            except Exception as e:
                print(f'{name} left out: {type(e).__name__}: {str(e).splitlines()[-1][:300]}')
                getattr(loaders.pop(name)[1], 'shutdown', lambda: None)()
        cpu, server0 = {}, {u: proc_cpu(p) for u, p in SERVERS.items()}
        rates = alternate_epochs(loaders, a.epochs, cpu)
        server = {u: proc_cpu(p) - server0[u] for u, p in SERVERS.items()}  # the warm-up epoch's too
    print_rates(rates, 'folder', 'x folder', cpu=cpu)
    print(
        'the HTTP servers (separate Python processes on the same cores) spent '
        + ' and '.join(
            f'{1000 * server[u] / ((a.epochs + 1) * len(samples)):.3f} ms CPU an image ({k})'
            for u, k in ((url, 'sendfile'), (url_py, 'http.server'))
        )
        + (
            f'; hfids/ HTTP\'s sendfile server {1000 * server[url_hf] / ((a.epochs + 1) * len(samples)):.3f} ms'
            if 'hfids/ HTTP' in rates
            else ''
        )
    )
    import statistics as st

    m = {k: st.median(v) for k, v in rates.items()}
    print(
        f"parquet HTTP / parquet local: {m['parquet HTTP'] / m['parquet local']:.2f}x "
        f"(http.server: {m['parquet http.server'] / m['parquet local']:.2f}x); "
        + '; '.join(
            f"parquet local / {k}: {m['parquet local'] / m[k]:.2f}x"
            for k in ('hfds/', 'hfids/', 'timm hfids/', 'wds shards')
            if k in m
        )
        + (f"; parquet HTTP / hfids/ HTTP: {m['parquet HTTP'] / m['hfids/ HTTP']:.2f}x" if 'hfids/ HTTP' in m else '')
    )
    for _, loader in loaders.values():
        getattr(loader, 'shutdown', lambda: None)()
    if not a.skip_hf and 'hfids/' not in rates:  # hfids/ in this process (its DataLoader workers split its files again)
        w = a.workers
        a.workers = 0
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            two = train_loaders({k: sources[k] for k in ('parquet local', 'hfids/')}, a)
            cpu0 = {}
            r0 = alternate_epochs(two, a.epochs, cpu0)
        print('\nin the main process (num_workers=0):')
        print_rates(r0, 'hfids/', 'x hfids/', cpu=cpu0)
        a.workers = w
    # bytes fetched per image over HTTP: row groups of 100 rows and one row group a file, with the index and without
    print(f'\n{"over HTTP, one epoch in process":<44}{"bytes/img":>10}{"x image":>9}{"requests":>10}')
    for rows in (100, len(samples)):
        d = tmp / f'rg{rows}'
        write_sample_parquet(d, samples, classes, files=4, row_group_size=rows)
        for index in (True, False):
            if index:
                write_parquet_index(d)
            else:
                os.remove(d / '_timmdata_parquet_index.bin')
            u = serve(d)
            stats(u)
            pat = (
                'data/train-*.parquet' if index else 'data/train-{00000..00003}-of-00004.parquet'
            )  # no index: named files
            ds = create_dataset('parquet/x', root=u, **dict(common, split=pat))
            n = sum(
                len(y)
                for _, y in create_loader(ds, a.input_size, a.batch_size, is_training=True, num_workers=0, device='cpu')
            )
            req, got = stats(u)
            print(
                f'{f"row groups of {rows} rows, " + ("index" if index else "no index (row groups)"):<44}{got / n:>10,.0f}{got / n / img_bytes:>9.2f}{req:>10}'
            )
    # requests before the first batch: with the index, and without it (each file's footer: the first process of a
    # node reads it, one request a file; the next one reads the node's kept copy): 4 files and 64
    print(f'\n{"requests before the first batch":<44}{"files":>6}{"opening":>10}{"first batch":>14}')
    for nf in (4, 64):
        d = tmp / f'files{nf}'
        write_sample_parquet(d, samples, classes, files=nf, row_group_size=100)
        write_parquet_index(d)
        u = serve(d)
        named = f'data/train-{{{0:05d}..{nf - 1:05d}}}-of-{nf:05d}.parquet'
        for case, kw in (
            ('index', dict(common)),
            ('no index, a node\'s first process', dict(common, split=named, use_index=False)),
            ('no index, its next process', dict(common, split=named, use_index=False)),
        ):
            stats(u)
            ds = create_dataset('parquet/x', root=u, **kw)
            opened = stats(u)[0]
            next(iter(create_loader(ds, a.input_size, a.batch_size, is_training=True, num_workers=0, device='cpu')))
            print(f'{case:<44}{nf:>6}{opened:>10}{stats(u)[0]:>14}')
    print('(the first batch\'s reads: with the index 2 x 32 images sent, fewer requests where close ones are one; without it, the row groups they fall in)')

if __name__ == '__main__':
    main()
