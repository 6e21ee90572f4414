"""Datasets over a server that ignores HTTP Range requests: Python's own `http.server`, which answers a ranged GET with
the whole file (200). WebDataset shards with their dataset index (`timmdata shards`) and Parquet files (with the
index `timmdata index` writes, and without it) are read whole (`timmdata.sources.whole_files`): every sample once an
epoch, the same batches as a local read of the same files, each file fetched once into the node cache where there is
one, and one warning a run naming the server, with DataLoader workers or without. Where a file cannot be read whole,
the error says what to do for the source at hand (a Parquet source never hears of `wds/`).

The runs are made in a child process, as a user runs them: its DataLoader workers warn on its stderr, which is
counted (under pytest a worker's warnings would go to the parent's recorder, and be lost)."""
import functools, http.server, json, subprocess, sys, threading
from pathlib import Path

import pytest

pytest.importorskip('pyarrow')
from _helpers import remote_test_datasets
from timmdata import create_dataset, create_loader
from timmdata.sources import whole_files
from timmdata.sources.shard_io import ShardError

N = 24  # samples, one a class: a batch's labels say which samples it holds
BATCH = 8
WARNING = 'answers Range requests with the whole file'


class Plain(http.server.SimpleHTTPRequestHandler):
    "Python's http.server as `python -m http.server` runs it (a Range request answered 200, the whole file), counting GETs by (path, ranged)."

    def log_message(self, *a):
        pass

    def do_GET(self):
        with self.server.lock:
            self.server.gets.append([self.path, self.headers.get('Range') is not None])
        return super().do_GET()


def serve(folder):
    "A `Plain` server for `folder` in a thread: (server, base URL)."
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(Plain, directory=str(folder)))
    srv.gets, srv.lock = [], threading.Lock()
    threading.Thread(target=srv.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True).start()
    return srv, f'http://127.0.0.1:{srv.server_port}'


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    "The sample-data generator's images (24 classes of one image), as tar shards with their dataset index and as Parquet files with and without an index."
    return remote_test_datasets(tmp_path_factory.mktemp('norange'), N, plain=False)


RUNS = r'''
import functools, hashlib, http.server, json, sys, threading, warnings
sys.path.insert(0, sys.argv[3])
from test_http_no_range import BATCH, serve
from timmdata import create_dataset, create_loader

root, cases = sys.argv[1], json.loads(sys.argv[2])
KIND = {'shards': ('wds/pets', 'shards', 'train'), 'parquet': ('parquet/x', 'pq', 'train'),
        'parquet without its index': ('parquet/x', 'pq_plain', 'data/train-{00000..00002}-of-00003.parquet')}


out = []
for src, workers, cache, n in cases:
    srv, base = serve(root)  # a server of its own: each case is the run's first meeting with it
    name, folder, split = KIND[src]
    kw = {'cache_dir': f'{root}/cache-{len(out)}'} if cache else {}
    got, local, after = [], [], []
    for r, into in ((f'{base}/{folder}', got), (f'{root}/{folder}', local)):
        ds = create_dataset(name, root=r, split=split, is_training=True, batch_size=BATCH, **(kw if into is got else {}))
        dl = create_loader(ds, (3, 24, 24), BATCH, is_training=True, num_workers=workers, seed=0, device='cpu')
        for e in range(n):
            dl.set_epoch(e)
            into.append([[y.tolist(), hashlib.sha256(x.numpy().tobytes()).hexdigest()] for x, y in dl])
            after.append(len(srv.gets))
    out.append({'port': srv.server_port, 'got': got, 'local': local, 'gets': srv.gets, 'after': after[:n]})
    srv.shutdown()
    srv.server_close()
print(json.dumps(out))
'''


def run_cases(root, cases):
    "Run `cases` [(source, workers, cache, epochs)] in a child process: (its results, its stderr)."
    p = subprocess.run([sys.executable, '-c', RUNS, str(root), json.dumps(cases), str(Path(__file__).parent)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def check_epochs(case):
    "Every sample once an epoch, and the batches of a local read of the same files (labels and pixels), as many."
    got, local = case['got'], case['local']
    assert len(got) == len(local) and len(got[0]) == N // BATCH
    for g, l in zip(got, local, strict=True):
        assert sorted(y for ys, _ in g for y in ys) == list(range(N))
        assert g == l


def file_gets(case, ends=('.tar', '.parquet')) -> dict:
    "{file: [whole GETs, ranged GETs]} of the files ending in `ends` that the server was asked for."
    out = {}
    for path, ranged in case['gets']:
        if path.endswith(ends):
            out.setdefault(path, [0, 0])[ranged] += 1
    return out


def said(stderr, case) -> int:
    "How many times the run warned about this case's server."
    return stderr.count(f'http://127.0.0.1:{case["port"]} {WARNING}')


def check_gets(case, src, workers, cache, epochs):
    "What the server was asked: every data file; each file whole once with a node cache (else at most once a process an epoch, once in all in one process); ranged reads only before the run knew the server (none after the first epoch)."
    gets = file_gets(case)
    assert len(gets) == (4 if src == 'shards' else 3), case['gets']  # every file asked for
    processes = max(1, workers) * epochs + 1  # each worker of each epoch, and the main process (Parquet's footers)
    for path, (whole, ranged) in gets.items():
        if cache or workers == 0:  # a node cache: one download for the node; one process: each file once (held)
            assert whole == 1, (src, path, whole)
        else:
            assert 1 <= whole <= processes, (src, path, whole)
    if src == 'shards':  # the dataset index: its table (a GET read to the table's end), then its spans' lines from the whole file
        (whole, _), = file_gets(case, ('_timmdata_dataset_index.json',)).values()
        assert whole <= 1 + (1 if cache or workers == 0 else processes), whole
    ranged = [sum(r for _, r in case['gets'][:k]) for k in case['after']]
    assert len(ranged) == epochs and ranged[-1] == ranged[0], ranged  # the run knows the server: no ranged try after epoch 1


@pytest.mark.slow
def test_read_whole_in_one_process(data):
    "Shards with their dataset index and Parquet with its index over Python's http.server, read in the main process for 2 epochs: the local batches, each file fetched once, one warning."
    cases = [['shards', 0, False, 2], ['parquet', 0, False, 2]]
    results, stderr = run_cases(data, cases)
    for (src, workers, cache, epochs), case in zip(cases, results, strict=True):
        check_epochs(case)
        check_gets(case, src, workers, cache, epochs)
        assert said(stderr, case) == 1, (src, stderr[-2000:])
    assert stderr.count(WARNING) == len(cases)  # nothing else said it
    for line in (ln for ln in stderr.splitlines() if WARNING in ln):  # said at the user's line, not the library's
        assert '/timmdata/' not in line.split(': UserWarning')[0], line


@pytest.mark.slow
def test_read_whole_with_workers_and_a_node_cache(data):
    "The same and Parquet without its index, with 2 DataLoader workers (a worker process each an epoch: the run warns once), then with a node cache over 2 epochs: each file fetched once for the node."
    cases = [[src, 2, False, 1] for src in ('shards', 'parquet', 'parquet without its index')]
    cases += [['parquet without its index', 0, False, 2]]
    cases += [[src, 2, True, 2] for src in ('shards', 'parquet', 'parquet without its index')]
    results, stderr = run_cases(data, cases)
    assert len(results) == len(cases)
    for (src, workers, cache, epochs), case in zip(cases, results, strict=True):
        check_epochs(case)
        check_gets(case, src, workers, cache, epochs)
        # with a node cache and Parquet's index nothing is read by byte ranges (each file read from its copy): nothing to say
        assert said(stderr, case) == (0 if cache and src == 'parquet' else 1), (src, workers, cache, stderr[-2000:])
    assert stderr.count(WARNING) == len(cases) - 1  # nothing else said it


def _too_big(folder, name, **kw) -> str:
    "The error of a stream over a server of its own whose files are over what a process holds in memory (set to 1,000 bytes)."
    srv, base = serve(folder)
    try:
        with pytest.warns(UserWarning, match=WARNING):
            ds = create_dataset(name, root=base, split='train', is_training=True, batch_size=BATCH, **kw)
            with pytest.raises(ShardError) as e:
                next(iter(create_loader(ds, (3, 24, 24), BATCH, is_training=True, num_workers=0, device='cpu')))
    finally:
        srv.shutdown()
        srv.server_close()
    return str(e.value)


@pytest.mark.slow
def test_errors_say_what_to_do_for_the_source(data, monkeypatch):
    "A file too large to hold in memory is named with the bound and the advice of its own source: Parquet's never names wds/ or order='shards'; the shards' names what the API has, and it holds (order='shards' reads them)."
    monkeypatch.setattr(whole_files, 'WHOLE_BYTES', 1000)
    msg = _too_big(data / 'pq', 'parquet/x')
    assert 'over the 1,000 a process holds in memory' in msg and 'pass cache_dir=' in msg, msg
    assert 'wds/' not in msg and "order='shards'" not in msg and '.parquet' in msg, msg
    msg = _too_big(data / 'shards', 'wds/pets')
    assert 'over the 1,000 a process holds in memory' in msg and 'pass cache_dir=' in msg and "order='shards'" in msg, msg
    assert 'wds/' not in msg, msg
    srv, base = serve(data / 'shards')
    try:  # order='shards' streams each shard front to back: no ranged read, every sample
        ds = create_dataset('wds/pets', root=base, split='train', is_training=True, batch_size=BATCH, order='shards')
        ys = [y for _, y in create_loader(ds, (3, 24, 24), BATCH, is_training=True, num_workers=0, device='cpu')]
        assert sorted(sum((y.tolist() for y in ys), [])) == list(range(N)) and not any(r for _, r in srv.gets)
    finally:
        srv.shutdown()
        srv.server_close()
