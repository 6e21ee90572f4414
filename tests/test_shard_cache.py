"""The local cache of remote shards (issue 30) over an HTTP server on 127.0.0.1 that counts requests per path: a second
epoch downloads nothing, the folder never exceeds a limit smaller than the dataset (watched on disk during the epoch), a
cached shard truncated by hand is fetched again, two processes asking for one shard download it once, local shards are
not copied. Shards are written with tarfile (`_helpers.write_shards`: no network, no webdataset needed)."""
import http.server, io, os, subprocess, sys, textwrap, threading, time
from pathlib import Path
import pytest, torch
from PIL import Image
from timmdata.dataset_factory import create_dataset
from timmdata.loader import create_loader
from timmdata.net.shard_cache import ShardCache
from timmdata.sources.shard_io import open_shard
from timmdata.sources.wds import WdsSource
from _helpers import http_folder, write_shards

N_SHARDS, PER_SHARD = 6, 4  # 24 samples; 2 workers x batches of 4


def _jpeg(i):
    b = io.BytesIO(); Image.new('RGB', (20, 16), ((37 * i) % 256, (91 * i) % 256, 60)).save(b, 'JPEG'); return b.getvalue()


@pytest.fixture(scope='module')
def shards(tmp_path_factory):
    "Shards in timm's wds layout with _info.json; the class is the sample's index; padding makes shards differ in size."
    root = tmp_path_factory.mktemp('shards')
    write_shards(root, 'toy', N_SHARDS, PER_SHARD, lambda i, s: _jpeg(i) + bytes(3000 * (s + 1)))  # JPEG decoders stop at the end marker
    return root


class _Counting(http.server.SimpleHTTPRequestHandler):
    "Serves a folder and counts GETs per path; `delay` slows the body (so that two readers overlap)."
    hits, delay, gate = None, 0.0, None
    def do_GET(self):
        self.hits[self.path] = self.hits.get(self.path, 0) + 1
        super().do_GET()
    def copyfile(self, src, dst):
        if self.gate is not None: self.gate.wait(60)  # the body waits until the test opens the gate
        while b := src.read(8192):
            dst.write(b)
            if self.delay: time.sleep(self.delay)
    def log_message(self, *a): pass


@pytest.fixture
def server(shards):
    "(base URL, {path: GETs}, handler class) of a server on 127.0.0.1 for the shard folder."
    handler = type('H', (_Counting,), {'hits': {}, 'delay': 0.0, 'gate': None})
    with http_folder(shards, handler) as url:
        yield url, handler.hits, handler


def _shard_hits(hits): return {p: c for p, c in hits.items() if p.endswith('.tar')}


def _epoch(loader):
    ys = []
    for x, y in loader: ys += y.tolist()
    return sorted(ys)


def test_second_epoch_downloads_nothing(server, tmp_path):
    "create_dataset('wds/...', cache_dir, cache_limit) through create_loader's 2 workers: epoch 2 reads the cache only."
    url, hits, _ = server
    ds = create_dataset('wds/toy', root=url, split='train', is_training=True, batch_size=4,
                        cache_dir=str(tmp_path / 'cache'), cache_limit='10MB')
    assert ds.source.cache is not None and ds.source.cache.limit == 10 ** 7
    assert ds.order == 'global'  # remote shards with a cache and shard lengths: the elastic order, repeats read from the cache
    loader = create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=2, persistent_workers=True, device='cpu')
    ds.set_epoch(0)
    assert _epoch(loader) == list(range(N_SHARDS * PER_SHARD))
    first = _shard_hits(hits)
    assert sorted(first) == [f'/toy-train-{s:06d}.tar' for s in range(N_SHARDS)] and set(first.values()) == {1}, first
    ds.set_epoch(1)
    assert _epoch(loader) == list(range(N_SHARDS * PER_SHARD))
    assert _shard_hits(hits) == first  # not one more download
    cached = sorted(p.name.split('-', 1)[1].rsplit('.', 2)[0] for p in (tmp_path / 'cache').glob('*.shard'))
    assert cached == [f'toy-train-{s:06d}.tar' for s in range(N_SHARDS)]
    assert not list((tmp_path / 'cache').glob('*.part'))


_WATCH = textwrap.dedent('''
    import fcntl, os, sys, time
    cache, stop = sys.argv[1], sys.argv[2]
    peak = n = 0
    fd = os.open(os.path.join(cache, '.cache.lock'), os.O_CREAT | os.O_RDWR, 0o644)
    while True:  # a snapshot, then the stop check: the last snapshot is taken after the epochs (the cached shards)
        fcntl.flock(fd, fcntl.LOCK_SH)  # a consistent snapshot: no reservation, eviction or rename half done
        used = sum(e.stat().st_size for e in os.scandir(cache) if e.name.endswith(('.shard', '.part')))
        fcntl.flock(fd, fcntl.LOCK_UN)
        peak, n = max(peak, used), n + 1
        if n == 1: print('ready', flush=True)  # the test starts the epochs once the watcher watches
        if os.path.exists(stop): break
        time.sleep(0.0005)
    print(peak, n)
''')


class _CheckedOs:
    """`os` as shard_cache sees it, each change to the size of a file in the cache folder checked right after it is made
    (in every process: DataLoader workers fork with it): made while the folder lock is held, and the folder's files
    within the limit. Violations are appended to a log file (the cache's own threads swallow exceptions)."""
    def __init__(self, cache, limit, log): self.cache, self.limit, self.log = str(cache), limit, str(log)
    def __getattr__(self, k): return getattr(os, k)
    def _check(self, what, path=None):
        if path is not None and not str(path).startswith(self.cache): return
        import fcntl
        fd = os.open(os.path.join(self.cache, '.cache.lock'), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            try: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB); fcntl.flock(fd, fcntl.LOCK_UN); unlocked = True
            except BlockingIOError: unlocked = False  # someone holds it exclusively: under the lock, we are that one
        finally: os.close(fd)
        used = sum(e.stat().st_size for e in os.scandir(self.cache) if e.name.endswith(('.shard', '.part')))
        if unlocked or used > self.limit:
            with open(self.log, 'a') as f: f.write(f'{what} in {os.getpid()}: {"outside the lock, " if unlocked else ""}{used} bytes\n')
    def posix_fallocate(self, fd, *a): os.posix_fallocate(fd, *a); self._check('fallocate')
    def ftruncate(self, fd, n): os.ftruncate(fd, n); self._check('ftruncate')
    def truncate(self, p, n): os.truncate(p, n); self._check('truncate', p)
    def replace(self, a, b): os.replace(a, b); self._check('rename', b)
    def remove(self, p): os.remove(p); self._check('remove', p)
    def open(self, p, flags, *a):
        fd = os.open(p, flags, *a)
        if flags & os.O_CREAT and str(p).endswith('.part'): self._check('create', p)
        return fd


def _stat_or_none(p):
    try:
        return p.stat()
    except FileNotFoundError:
        return None


def test_never_over_a_limit_smaller_than_the_dataset(server, shards, tmp_path, monkeypatch):
    """Limit: 3 of 6 shards, two epochs of 2 workers, each prefetching in a thread. Every change to the folder's size, in
    every process, is checked as it is made (under the lock, within the limit); another process watches the folder on disk
    through the epochs, reading consistent snapshots under the folder lock."""
    import timmdata.net.shard_cache as sc
    url, hits, _ = server
    sizes = sorted(p.stat().st_size for p in shards.glob('*.tar'))
    limit = sizes[-1] + sizes[-2] + sizes[-3]
    cache, log, stop = tmp_path / 'cache', tmp_path / 'violations.txt', tmp_path / 'stop'
    ds = create_dataset('wds/toy', root=url, split='train', is_training=True, batch_size=4, cache_dir=str(cache), cache_limit=limit)
    monkeypatch.setattr(sc, 'os', _CheckedOs(cache, limit, log))
    loader = create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=2, device='cpu')
    watcher = subprocess.Popen([sys.executable, '-c', _WATCH, str(cache), str(stop)], stdout=subprocess.PIPE, text=True)
    try:  # its first line once it watches (an interpreter's start may take seconds on a loaded machine): no clock
        assert watcher.stdout.readline().strip() == 'ready', 'the watcher ended before it watched'
        for e in range(2):
            ds.set_epoch(e)
            assert _epoch(loader) == list(range(N_SHARDS * PER_SHARD))
    finally:
        stop.touch(); peak, n = map(int, watcher.communicate(timeout=30)[0].split())
    assert not log.exists(), log.read_text()
    assert n >= 2, 'the watcher did not watch before and after the epochs'
    assert 0 < peak <= limit, (peak, limit)
    # a worker's prefetching thread may still evict a shard as this lists the folder: a file gone is not counted
    assert sum(st.st_size for p in cache.glob('*.shard') if (st := _stat_or_none(p)) is not None) <= limit
    assert sum(_shard_hits(hits).values()) > N_SHARDS  # evictions: some shards fetched again in epoch 2


def test_truncated_cached_shard_is_fetched_again(server, tmp_path):
    url, hits, _ = server
    src = WdsSource(url, 'train', cache_dir=tmp_path / 'cache', cache_limit='1GiB')
    first = [[k for k, _, _ in src.iter_shard(s)] for s in src.shards]
    src.cache.wait()
    victim = src.cache.path(src.shards[2])
    good = Path(victim).read_bytes()
    with open(victim, 'r+b') as f: f.truncate(len(good) // 2)
    again = [[k for k, _, _ in src.iter_shard(s)] for s in src.shards]
    assert again == first and len(again) == N_SHARDS
    assert _shard_hits(hits)['/toy-train-000002.tar'] == 2
    assert all(c == 1 for p, c in _shard_hits(hits).items() if p != '/toy-train-000002.tar')
    assert Path(src.cache.path(src.shards[2])).read_bytes() == good


_READER = textwrap.dedent('''
    import hashlib, sys
    from timmdata.net.shard_cache import ShardCache
    from timmdata.sources.shard_io import open_shard
    print('ready', flush=True)
    with ShardCache(sys.argv[1], '1GB', open_shard)(sys.argv[2]) as f: print(type(f).__name__, hashlib.sha1(f.read()).hexdigest())
''')


@pytest.mark.slow
def test_two_processes_download_one_shard_once(server, shards, tmp_path):
    "Two processes open one shard at once: one downloads, the other waits on the lock and reads the copy."
    url, hits, handler = server
    handler.gate = threading.Event()  # the first download's body is held until the second process is about to open
    env = {**os.environ, 'PYTHONPATH': str(Path(__file__).resolve().parent.parent)}
    shard, path = f'{url}/toy-train-000005.tar', '/toy-train-000005.tar'
    run = lambda: subprocess.Popen([sys.executable, '-c', _READER, str(tmp_path / 'cache'), shard], stdout=subprocess.PIPE, env=env, text=True)
    ps = [run()]
    try:
        for _ in range(600):  # the first process's request reached the server
            if hits.get(path): break
            time.sleep(0.05)
        ps.append(run())
        assert ps[1].stdout.readline().strip() == 'ready'
        time.sleep(1.0)  # the second process is opening: it finds the lock held
    finally: handler.gate.set()
    outs = [p.communicate(timeout=60)[0].strip().splitlines()[-1] for p in ps]
    assert [p.returncode for p in ps] == [0, 0]
    import hashlib
    want = hashlib.sha1((shards / 'toy-train-000005.tar').read_bytes()).hexdigest()
    assert outs == ['_Tee ' + want, '_Hit ' + want]  # the first read through to the server, the second read the copy
    assert _shard_hits(hits) == {path: 1}


def test_local_shards_are_not_copied(shards, tmp_path):
    src = WdsSource(str(shards), 'train', cache_dir=tmp_path / 'cache', cache_limit='1GB')
    n = sum(1 for s in src.shards for _ in src.iter_shard(s))
    assert n == N_SHARDS * PER_SHARD
    assert not [p for p in (tmp_path / 'cache').iterdir() if p.suffix in ('.shard', '.part')]


def test_bad_cache_limit_is_named(tmp_path):
    with pytest.raises(ValueError, match="cache_limit must be a number of bytes or a string like '50GB'"):
        ShardCache(tmp_path, '50 gigs', open_shard)


def test_a_forked_child_does_not_hold_the_download_lock(server, tmp_path):
    "A DataLoader worker forked while a shard downloads must not keep its lock: after the parent's download, it is free."
    import fcntl
    from timmdata.net.shard_cache import cache_name
    url, hits, _ = server
    cache = ShardCache(tmp_path / 'cache', '1GB', open_shard, prefetch=0)
    shard = f'{url}/toy-train-000001.tar'
    f = cache(shard)
    f.read(1000)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0: os.write(w, b'up'); time.sleep(3); os._exit(0)  # a worker that lives on (the fork hooks ran before 'up')
    try:
        os.close(w); assert os.read(r, 2) == b'up'; os.close(r)
        f.read(); f.close()
        fd = os.open(tmp_path / 'cache' / (cache_name(shard) + '.lock'), os.O_RDWR)
        try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while the child holds it
        finally: os.close(fd)
        assert cache.path(shard) is not None and _shard_hits(hits) == {'/toy-train-000001.tar': 1}
    finally: os.kill(pid, 9); os.waitpid(pid, 0)


def test_workers_prefetch_their_own_next_shard(server, tmp_path):
    "2 loader workers, each planning its own share (streaming's _raw) and prefetching in a thread: every shard downloaded once."
    url, hits, _ = server
    ds = create_dataset('wds/toy', root=url, split='train', is_training=False, batch_size=4, cache_dir=str(tmp_path / 'cache'))
    loader = create_loader(ds, (3, 16, 16), 4, is_training=False, num_workers=2, device='cpu')
    assert _epoch(loader) == list(range(N_SHARDS * PER_SHARD))
    assert set(_shard_hits(hits).values()) == {1} and len(_shard_hits(hits)) == N_SHARDS
