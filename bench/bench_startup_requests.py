"""Benchmark for issues 44 and 57: requests a training stream makes to storage before its first batch, at 250 and 2,000 shards.

    python bench/bench_startup_requests.py [--shards 250 2000] [--per-shard 2] [--workers 2] [--out bench/results/x.txt]

Writes tiny WebDataset shards (2 samples of one small JPEG each, `_info.json` with shard lengths) and serves them from
a local HTTP server that answers ranged reads (206) and counts every request by method. For each shard count, a fresh
process state (a fresh index folder, no cache) builds `create_dataset('wds/...', is_training=True)` and
`create_loader(..., num_workers=2)`, and the requests are counted until the first batch arrives, in three cases:

- `cold`: no index anywhere (other tools' shards: img2dataset, webdataset's ShardWriter, a Hugging Face repository): the
  order planned from `_info.json`'s shard lengths, a shard's headers scanned when a worker first reads from it, kept in
  the node's index folder (issue 57; before it, a HEAD and a scan of every shard in every process that built the dataset);
- `warm`: the node's scans already kept by an earlier run (the same index_dir): only the samples' reads;
- `dataset index`: the dataset-level index (`timmdata index SRC`, `_timmdata_dataset_index.json` beside `_info.json`):
  fetched once, no per-shard request.

Counts, not times: they do not depend on the machine's load. Prints each count, the split by method, and the ratios.
"""
from __future__ import annotations
import argparse, collections, functools, http.server, io, json, os, shutil, sys, tarfile, tempfile, threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    "Serves a folder; answers ranged GETs (206) as object stores do; counts every request by method in `server.counts`."

    def log_message(self, *a):
        pass

    def _count(self, method):
        with self.server.lock:
            self.server.counts[method] += 1

    def do_HEAD(self):
        self._count('HEAD')
        return super().do_HEAD()

    def do_GET(self):
        rng, path = self.headers.get('Range'), self.translate_path(self.path)
        self._count('GET range' if rng else 'GET')
        if not rng or not os.path.isfile(path):
            return super().do_GET()
        a, b = map(int, rng.split('=', 1)[1].split('-'))
        with open(path, 'rb') as f:
            f.seek(a)
            data = f.read(b + 1 - a)
        self.send_response(206)
        self.send_header('Content-Length', str(len(data)))
        self.send_header('Content-Range', f'bytes {a}-{a + len(data) - 1}/{os.path.getsize(path)}')
        self.end_headers()
        self.wfile.write(data)


class CountingServer:
    "A threaded HTTP server over `folder` on 127.0.0.1 with request counts (`counts`, `total()`, `reset()`)."

    def __init__(self, folder):
        self.srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(CountingHandler, directory=str(folder)))
        self.srv.counts, self.srv.lock = collections.Counter(), threading.Lock()
        self.url = f'http://127.0.0.1:{self.srv.server_port}'
        threading.Thread(target=self.srv.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True).start()

    def snapshot(self) -> dict:
        with self.srv.lock:
            return dict(self.srv.counts)

    def reset(self):
        with self.srv.lock:
            self.srv.counts.clear()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def write_tiny_shards(root: Path, n_shards: int, per_shard: int = 2, name: str = 'tiny') -> list:
    "`n_shards` shards of `per_shard` samples (one 32x24 JPEG, `.cls` = index % 10) and `_info.json` with shard lengths."
    from timmdata.tools.sample_data import make_sample_image
    buf = io.BytesIO()
    make_sample_image(0, 0, (32, 24)).save(buf, 'JPEG', quality=80)
    jpg = buf.getvalue()
    root.mkdir(parents=True, exist_ok=True)
    names = []
    for s in range(n_shards):
        names.append(f'{name}-train-{s:06d}.tar')
        with tarfile.open(root / names[-1], 'w', format=tarfile.USTAR_FORMAT) as t:
            for i in range(s * per_shard, (s + 1) * per_shard):
                for ext, data in (('jpg', jpg), ('cls', str(i % 10).encode())):
                    ti = tarfile.TarInfo(f'{i:08d}.{ext}')
                    ti.size, ti.mtime = len(data), 0
                    t.addfile(ti, io.BytesIO(data))
    split = {'name': 'train', 'num_samples': n_shards * per_shard, 'filenames': names, 'shard_lengths': [per_shard] * n_shards}
    (root / '_info.json').write_text(json.dumps({'name': name, 'num_classes': 10, 'splits': {'train': split}}))
    return names


def requests_to_first_batch(srv: CountingServer, index_dir: str, workers: int = 2, batch_size: int = 4) -> dict:
    "Requests `srv` answered from building the dataset to the first batch of a 2-worker training loader."
    import warnings
    from timmdata.dataset_factory import create_dataset
    from timmdata.loader import create_loader
    srv.reset()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # the hint that a dataset index would help
        ds = create_dataset('wds/tiny', root=srv.url, split='train', is_training=True, batch_size=batch_size, index_dir=index_dir)
        loader = create_loader(ds, (3, 24, 24), batch_size, is_training=True, num_workers=workers, device='cpu',
                               persistent_workers=False)
        it = iter(loader)
        next(it)
        counts = srv.snapshot()
        del it
    return counts


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--shards', type=int, nargs='+', default=[250, 2000])
    ap.add_argument('--per-shard', type=int, default=2)
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--out', default=None, help='also write the table to this file')
    a = ap.parse_args(argv)
    from timmdata.index.dataset_index import write_dataset_index, DATASET_INDEX_FILE
    tmp = Path(tempfile.mkdtemp())
    rows, lines = {}, []
    try:
        for n in a.shards:
            root = tmp / f's{n}'
            write_tiny_shards(root, n, a.per_shard)
            srv = CountingServer(root)
            try:
                cold = requests_to_first_batch(srv, str(tmp / f'idx{n}'), a.workers)
                warm = requests_to_first_batch(srv, str(tmp / f'idx{n}'), a.workers)
                write_dataset_index(str(root), progress=False)
                new = requests_to_first_batch(srv, str(tmp / f'idx{n}-new'), a.workers)
                (root / DATASET_INDEX_FILE).unlink()
            finally:
                srv.close()
            rows[n] = dict(cold=cold, warm=warm, dataset_index=new)
            for k, c in rows[n].items():
                lines.append(f'{n:6d} shards  {k:14s} {sum(c.values()):6d} requests  ' +
                             ', '.join(f'{m} {v}' for m, v in sorted(c.items())))
        lo, hi = min(a.shards), max(a.shards)
        lines.append('')
        for k in ('cold', 'warm', 'dataset_index'):
            t_lo, t_hi = sum(rows[lo][k].values()), sum(rows[hi][k].values())
            lines.append(f'{k:14s} {hi} / {lo} shards: {t_hi / t_lo:5.2f}x the requests')
        for n in a.shards:
            t = {k: sum(c.values()) for k, c in rows[n].items()}
            lines.append(f'{n:6d} shards: cold / dataset index {t["cold"] / t["dataset_index"]:6.1f}x, '
                         f'warm / dataset index {t["warm"] / t["dataset_index"]:6.1f}x')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    head = (f'requests before the first batch: create_dataset(wds, is_training=True) + create_loader({a.workers} workers), '
            f'{a.per_shard} samples per shard, ranged reads, counting HTTP server on 127.0.0.1')
    text = '\n'.join([head] + lines)
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(a.out) or '.', exist_ok=True)
        Path(a.out).write_text(text + '\n')
    return rows


if __name__ == '__main__':
    main()
