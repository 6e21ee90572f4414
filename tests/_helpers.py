"""Helpers shared by several test files (a module of their own beside `_datasets.py`, so spawned processes and every
test file import one copy): run a loader over epochs with a cut and a resume, compare two runs' batches exactly, a
free TCP port for a process group, shards in timm's wds layout and an HTTP server for a folder of them; the datasets the
object-store tests read, compared with their local read, and a local service's process (`LocalService`)."""
import functools, http.server, io, json, socket, tarfile, threading
from contextlib import contextmanager
import torch


def clone(batch):
    "A deep copy of a batch's tensors (tuples, lists and dicts walked), so a reused pinned buffer cannot change it later."
    if isinstance(batch, torch.Tensor): return batch.clone()
    if isinstance(batch, (list, tuple)): return type(batch)(clone(b) for b in batch)
    if isinstance(batch, dict): return {k: clone(v) for k, v in batch.items()}
    return batch


def run_epochs(loader, epochs, start=0, stop=None, sd=None, take=clone):
    """Batches of epochs `start`.. (`set_epoch` each, `take(batch)` kept), loading the state `sd` first (through a
    JSON round trip, as any checkpoint format would: a state is plain JSON data) and stopping after `stop` batches;
    returns (batches, the loader's state)."""
    if sd is not None: loader.load_state_dict(json.loads(json.dumps(sd)))
    out = []
    for e in range(start, start + epochs):
        loader.set_epoch(e)
        for b in loader:
            out.append(take(b))
            if stop is not None and len(out) == stop: return out, loader.state_dict()
    return out, loader.state_dict()


def _equal(u, v, where):
    if isinstance(u, torch.Tensor):
        assert isinstance(v, torch.Tensor) and u.shape == v.shape and u.dtype == v.dtype and torch.equal(u, v), f'{where} differs'
    elif isinstance(u, (list, tuple)):
        assert isinstance(v, (list, tuple)) and len(u) == len(v), f'{where}: lengths {len(u)} and {len(v)}'
        for i, (a, b) in enumerate(zip(u, v, strict=True)): _equal(a, b, f'{where}[{i}]')
    elif isinstance(u, dict):
        assert isinstance(v, dict) and u.keys() == v.keys(), f'{where}: keys {sorted(u)} and {sorted(v)}'
        for k in u: _equal(u[k], v[k], f'{where}[{k!r}]')
    else: assert u == v, f'{where} differs: {u!r} and {v!r}'


def same_batches(a, b, names=None):
    """Two runs delivered the same batches, bit for bit, in the same order and as many (tensors, lists, dicts walked).
    A difference names the batch and the place in it (`names`: labels for the first level of each batch)."""
    assert len(a) == len(b), f'{len(a)} batches and {len(b)}'
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if names is None: _equal(x, y, f'batch {i}')
        else:
            assert len(x) == len(y) == len(names), (len(x), len(y), names)
            for k, u, v in zip(names, x, y, strict=True): _equal(u, v, f'batch {i}: {k}')


def free_port() -> int:
    "A TCP port free on this machine now (for a process group's rendezvous)."
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


def write_shards(root, name: str, n_shards: int, per_shard: int, jpeg) -> list:
    """Shards in timm's wds layout in `root`: `{name}-train-{s:06d}.tar` holding samples `train_{i:05d}` (`.jpg`:
    `jpeg(i, s)`'s bytes, `.cls`: the index i), and `_info.json` with each shard's length; returns the shard names."""
    names = []
    for s in range(n_shards):
        names.append(f'{name}-train-{s:06d}.tar')
        with tarfile.open(root / names[-1], 'w') as t:
            for i in range(s * per_shard, (s + 1) * per_shard):
                for ext, data in (('jpg', jpeg(i, s)), ('cls', str(i).encode())):
                    ti = tarfile.TarInfo(f'train_{i:05d}.{ext}'); ti.size = len(data); t.addfile(ti, io.BytesIO(data))
    split = {'name': 'train', 'num_samples': n_shards * per_shard, 'filenames': names, 'shard_lengths': [per_shard] * n_shards}
    (root / '_info.json').write_text(json.dumps({'name': name, 'splits': {'train': split}}))
    return names


@contextmanager
def http_folder(folder, handler=http.server.SimpleHTTPRequestHandler):
    "A server on 127.0.0.1 (a free port) serving `folder` with `handler` in a thread: yields its base URL; shut down after."
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(handler, directory=str(folder)))
    threading.Thread(target=srv.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True).start()
    try:
        yield f'http://127.0.0.1:{srv.server_port}'
    finally:
        srv.shutdown(); srv.server_close()


def remote_test_datasets(root, n: int = 24, plain: bool = True):
    """The datasets the remote-read tests serve, under `root`: `photos/` (the sample-data generator's images, `n`
    classes of one image each, train and val), `shards/` (tar shards of 6 with their dataset index), `plain/` (the same
    shards without the index, when `plain`), `pq/` and `pq_plain/` (Parquet files with and without their index)."""
    from pathlib import Path
    from timmdata import make_sample_dataset
    from timmdata import write_shards as write_timmdata_shards
    from timmdata.dataset import ImageDataset
    from timmdata.parquet.source import write_parquet_index, write_sample_parquet
    root = Path(root)
    photos = make_sample_dataset(root / 'photos', n_train=1, n_val=1, classes=[f'c{k:02d}' for k in range(n)],
                                 size=(40, 32), num_workers=0)
    write_timmdata_shards(photos, root / 'shards', shard_size=6, progress=False)
    if plain:
        (root / 'plain').mkdir()
        for f in (root / 'shards').iterdir():
            if f.name != '_timmdata_dataset_index.json' and f.is_file():
                (root / 'plain' / f.name).write_bytes(f.read_bytes())
    r = ImageDataset(str(photos), split='train').reader
    samples = [(Path(r.filename(i, absolute=True)).read_bytes(), r.targets[i]) for i in range(len(r))]
    for name, index in (('pq', True), ('pq_plain', False)):
        write_sample_parquet(root / name, samples, r.classes, files=3, row_group_size=4)
        if index:
            write_parquet_index(root / name)
    return root


def epoch_labels(name: str, root: str, split: str, workers: int, batch: int, epoch: int = 0, **kw) -> list:
    "The labels of each batch of one training epoch of `create_dataset(name, root=root, split=split)` (images 16x16, on the CPU)."
    from timmdata import create_dataset, create_loader
    ds = create_dataset(name, root=root, split=split, is_training=True, batch_size=batch, **kw)
    dl = create_loader(ds, (3, 16, 16), batch, is_training=True, num_workers=workers, device='cpu')
    dl.set_epoch(epoch)
    return [y.tolist() for _, y in dl]


REMOTE_KINDS = {  # the datasets `remote_test_datasets` writes, by what they are: (create_dataset's name, their folder)
    'shards': ('wds/x', 'shards'),
    'shards without their index': ('wds/x', 'plain'),
    'parquet': ('parquet/x', 'pq'),
    'parquet without its index': ('parquet/x', 'pq_plain'),
}


def assert_read_as_local(kind: str, root, url_of, n: int, batch: int):
    "Dataset `kind` of `remote_test_datasets(root)` read from a store (`url_of(folder)` its URL) gives, without workers and with two, the batches a local read of the same files gives: each of the `n` samples once."
    name, folder = REMOTE_KINDS[kind]
    local = epoch_labels(name, str(root / folder), 'train', 0, batch)
    assert len(local) == n // batch and sorted(sum(local, [])) == list(range(n))
    for workers in (0, 2):
        got = epoch_labels(name, url_of(folder), 'train', workers, batch)
        assert len(got) == len(local) and got == local, (kind, workers)


def run_cli(*args, env=None):
    "`timmdata ARGS` in a new process (the environment: this one's, or `env`): the finished process, its output as text."
    import os, subprocess, sys
    return subprocess.run([sys.executable, '-m', 'timmdata.tools.cli', *args], capture_output=True, text=True,
                          timeout=300, env=env or os.environ)


class LocalService:
    "A server process of the tests' (`self.proc`), stopped by `close` or at the end of a `with` block."
    def wait_until(self, ready, what: str, seconds: float = 30.0):
        "`ready()`'s answer once the server takes it; an HTTP error at once (the server said no), and a server that never listens, stopped and named."
        import time, urllib.error
        deadline = time.monotonic() + seconds
        while True:
            try:
                return ready()
            except urllib.error.HTTPError:
                self.close()
                raise
            except OSError:  # not listening yet
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f'{what} did not start') from None
                time.sleep(0.1)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except Exception:  # still running after 10 s
                self.proc.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
