"""Hostile servers and shared cache folders (issue 39, network and shard cache): a server that lies about lengths,
drips bytes or never ends its body, and a cache folder where someone else plants files or links, must never exhaust
memory, time or disk, nor touch the user's own files. One test per attack: each shows the harm does not happen
(bounded bytes, a call that returns or raises within a generous bound, the victim unchanged, the user's files still
there) and that the error names the problem. Servers are `http.server` on 127.0.0.1 in this process."""
import fcntl, http.server, io, os, stat, subprocess, sys, tarfile, threading, time, tracemalloc, urllib.request, warnings
from contextlib import contextmanager
from pathlib import Path
import pytest
from timmdata.net import shard_cache
from timmdata.sources import shard_io, wds
from timmdata.net.shard_cache import ShardCache, cache_name
from timmdata.index.shard_index import http_range, stat_shard

BOUND = 10.0  # seconds: a generous bound on a call whose deadline is 1 s (never a timing measurement)


def _tar(n: int = 3, size: int = 3000) -> bytes:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode='w', format=tarfile.USTAR_FORMAT) as tf:
        for i in range(n):
            ti = tarfile.TarInfo(f's{i}.jpg'); ti.size = size; tf.addfile(ti, io.BytesIO(bytes([i]) * size))
    return bio.getvalue()


class _Hostile(http.server.BaseHTTPRequestHandler):
    "Answers by path: `/range`, `/endless`, `/drip`, `/drip-head`, `/square`, `/claim`, `/shard-N.tar`; counts bytes sent."
    protocol_version = 'HTTP/1.0'
    sent, stop, shards = 0, None, {}

    def log_message(self, *a): pass

    def _body(self, data: bytes, total: int, pause: float = 0.0):
        "Write `total` bytes (repeating `data`) until done, the client goes, or the test ends."
        try:
            while type(self).sent < 10 ** 12 and total > 0 and not self.stop.is_set():
                b = data[:total]
                self.wfile.write(b); self.wfile.flush(); type(self).sent += len(b); total -= len(b)
                if pause: self.stop.wait(pause)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_HEAD(self):
        self.send_response(200); self.send_header('Content-Length', '²'); self.end_headers()

    def do_GET(self):
        p, big = self.path.split('?', 1)[0], 300 << 20
        if p == '/range-long':  # the range asked, announced longer than asked
            self.send_response(206); self.send_header('Content-Range', 'bytes 0-1023/1024')
            self.send_header('Content-Length', str(big)); self.end_headers(); self._body(bytes(1 << 16), big)
        elif p == '/range-endless':  # the range asked, no length, a body without end (300 MB)
            self.send_response(206); self.send_header('Content-Range', 'bytes 0-1023/1024'); self.end_headers()
            self._body(bytes(1 << 16), big)
        elif p == '/endless.tar':  # a whole shard, then zeros without end (no length)
            self.send_response(200); self.end_headers(); self._body(_tar(), len(_tar())); self._body(bytes(1 << 16), 10 ** 12)
        elif p == '/drip.tar':  # headers at once, then a byte every 0.2 s
            self.send_response(200); self.send_header('Content-Length', '1000000'); self.end_headers()
            self._body(b'x', 10 ** 6, 0.2)
        elif p.startswith('/drip-head'):  # even the status line and headers a byte at a time, every 0.2 s
            for c in b'HTTP/1.0 200 OK\r\nX-Pad: ' + b'a' * 1000 + b'\r\nContent-Length: 2\r\n\r\n{}':
                self._body(bytes([c]), 1, 0.2)
        elif p == '/square.tar':
            self.send_response(200); self.send_header('Content-Length', '²'); self.end_headers(); self._body(_tar(), len(_tar()))
        elif p == '/claim.tar':  # announces 400 MB, sends 515 bytes, then nothing until the test ends
            self.send_response(200); self.send_header('Content-Length', str(400 * 10 ** 6)); self.end_headers()
            self._body(b'y' * 515, 515); self.stop.wait(30)
        elif p in self.shards:
            d = self.shards[p]; self.send_response(200); self.send_header('Content-Length', str(len(d))); self.end_headers()
            self._body(d, len(d))
        else:
            self.send_error(404)


@pytest.fixture
def server():
    "(base URL, handler class) of a hostile server on 127.0.0.1; its bodies stop when the test ends."
    h = type('H', (_Hostile,), {'sent': 0, 'stop': threading.Event(), 'shards': {}})
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True).start()
    yield f'http://127.0.0.1:{srv.server_port}', h
    h.stop.set(); srv.shutdown(); srv.server_close()


@contextmanager
def _within(seconds: float):
    "Runs the body; fails if it took longer than `seconds` (a generous bound, not a measurement)."
    t = time.monotonic()
    yield
    assert time.monotonic() - t < seconds, f'took {time.monotonic() - t:.1f} s, bound {seconds} s'


@pytest.mark.parametrize('path', ['/range-long', '/range-endless'])
def test_range_answer_longer_than_asked(server, path):
    "A 206 to a 1 KiB Range with a 300 MB (announced, or endless) body: refused by name, memory and bytes bounded."
    url, h = server
    tracemalloc.start()
    try:
        with pytest.raises(shard_io.ShardError, match='longer'):
            http_range(url + path, (0, 1024), retries=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f'{peak:,} bytes allocated for a 1 KiB read'
    time.sleep(0.2)
    assert h.sent < 100 << 20, f'{h.sent:,} bytes sent before the client hung up'  # socket buffers, not the body


def test_close_drains_a_bounded_amount(server, tmp_path):
    "A cached stream over a shard followed by zeros without end: close reads at most drain_bytes, abandons the copy, returns."
    url, h = server
    cache = ShardCache(tmp_path / 'c', opener=shard_io.open_shard, prefetch=0)
    done = threading.Event()

    def read():
        with cache(url + '/endless.tar') as f:
            assert len(list(shard_io.iter_tar(f, url))) == 3
        done.set()
    t = threading.Thread(target=read, daemon=True); t.start()
    t.join(60)  # 64 MiB over the loopback: well under a second; the old code read for ever
    assert done.is_set(), f'close still draining after 60 s ({h.sent:,} bytes sent)'
    assert h.sent < shard_cache.DRAIN_BYTES + (100 << 20)
    assert cache.path(url + '/endless.tar') is None and not list((tmp_path / 'c').glob('*.part'))  # not kept


def test_close_drain_is_bounded_in_time(server, tmp_path):
    "A shard dripping a byte every 0.2 s, closed early: the drain gives up after drain_seconds (the stream's deadline shortened)."
    url, _ = server
    cache = ShardCache(tmp_path / 'c', opener=shard_io.open_shard, prefetch=0)
    cache.drain_seconds = 1.0
    f = cache(url + '/drip.tar')
    assert f.read(2) == b'xx'
    t = threading.Thread(target=f.close, daemon=True); t.start()
    t.join(BOUND)  # the old code drained the whole dripping body (days): failed here, its thread ended with the server
    assert not t.is_alive(), f'close still draining after {BOUND} s'
    assert not list((tmp_path / 'c').glob('*.part'))


@pytest.mark.parametrize('path', ['/drip.tar', '/drip-head.tar'])
def test_drip_open_shard_deadline(server, path):
    "A server dripping a byte every 0.2 s (in the body, or from the status line on): open_shard's reads end at its deadline, named."
    url, _ = server
    with _within(BOUND), pytest.raises(shard_cache.DeadlineError) as e:
        with shard_io.open_shard(url + path + '?sig=SECRET', timeout=5.0, deadline=1.0) as f:
            while f.read(1 << 16):
                pass
    msg = str(e.value)
    assert 'deadline of 1 s' in msg and url + path in msg and 'SECRET' not in msg, msg


def test_drip_load_info_deadline(server):
    "`_info.json` dripped from the status line on: load_info raises within its deadline, naming it and the URL."
    url, _ = server
    with _within(BOUND), pytest.raises(shard_io.ShardError, match=r'drip-head/_info\.json: not read within its deadline of 1 s'):
        wds.load_info(url + '/drip-head', retries=2, backoff=0.01, deadline=1.0)  # not retried


def test_wds_source_deadline(server):
    "WdsSource(deadline=) bounds each shard's stream; the error names the shard."
    url, _ = server
    src = wds.WdsSource([url + '/drip.tar'], 'x', retries=2, backoff=0.01, deadline=1.0)
    with _within(BOUND), pytest.raises(shard_io.ShardError, match=r'drip\.tar: not read within its deadline of 1 s'):
        list(src.iter_shard(src.shards[0]))


_HOLD = '''
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print('held', flush=True)
time.sleep(120)
'''


def test_lock_wait_is_bounded(tmp_path):
    "Another process holds a shard's download lock and never lets go: the wait ends with a named error after lock_wait."
    cache_dir, url = tmp_path / 'c', 'http://127.0.0.1:9/a.tar'
    cache = ShardCache(cache_dir, opener=lambda u, t: pytest.fail('the source was opened'), prefetch=0, lock_wait=1.0)
    p = subprocess.Popen([sys.executable, '-c', _HOLD, str(cache_dir / (cache_name(url) + '.lock'))], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == 'held'
        with _within(BOUND), pytest.raises(shard_cache.DeadlineError, match='lock_wait=1 s'):
            cache(url)
    finally:
        p.kill(); p.wait()


def test_content_length_not_ascii_digits(server, tmp_path):
    "`Content-Length: ²` passes str.isdigit() and fails in int(): a named error, from open_shard, the cache and stat_shard."
    url, _ = server
    with pytest.raises(shard_io.ShardError, match="Content-Length '²', not a byte count"):
        shard_io.open_shard(url + '/square.tar')
    plain = lambda u, t: urllib.request.urlopen(u, timeout=t)  # an opener that does not check: the cache does
    with pytest.raises(shard_cache.BadAnswerError, match="Content-Length '²', not a byte count"):
        ShardCache(tmp_path / 'c', opener=plain, prefetch=0)(url + '/square.tar')
    with pytest.raises(shard_io.ShardError, match="Content-Length '²', not a byte count"):
        stat_shard(url + '/square.tar')


def test_cache_leaves_the_users_files(server, tmp_path):
    "A user's `thesis.docx.part` and `embeddings.shard` in cache_dir are neither deleted as orphans nor evicted (nor a lock made)."
    url, h = server
    shards = {f'/shard-{i}.tar': _tar(n=20, size=10000) for i in range(3)}
    h.shards.update(shards)
    d = tmp_path / 'c'; d.mkdir(mode=0o755)
    thesis, emb = d / 'thesis.docx.part', d / 'embeddings.shard'
    thesis.write_bytes(b'chapter one'); emb.write_bytes(b'vectors')
    os.utime(thesis, (0, 0)); os.utime(emb, (0, 0))  # the least recently used files of the folder
    one = len(next(iter(shards.values())))
    cache = ShardCache(d, limit=int(1.5 * one), opener=shard_io.open_shard, prefetch=0)
    for p in shards:  # each read evicts the one before
        with cache(url + p) as f:
            while f.read(1 << 16):
                pass
    assert thesis.read_bytes() == b'chapter one' and emb.read_bytes() == b'vectors'
    assert not (d / 'thesis.lock').exists()
    assert len(list(d.glob('*-shard-*.shard'))) == 1 and cache.usage() <= cache.limit


def test_planted_link_at_a_lock_name(tmp_path):
    "Links planted at a shard's lock name and at the folder lock: never followed (no file made or changed at their targets)."
    d, victim, url = tmp_path / 'c', tmp_path / 'victim.txt', 'http://127.0.0.1:9/a.tar'
    d.mkdir(mode=0o755); victim.write_text('precious'); os.chmod(victim, 0o600)
    made = tmp_path / 'made-by-the-cache'
    os.symlink(made, d / (cache_name(url) + '.lock'))  # a dangling link: O_CREAT through it makes `made`
    cache = ShardCache(d, limit='1MB', opener=lambda u, t: io.BytesIO(_tar()), prefetch=0)
    with pytest.raises(OSError, match='is a link or not a regular file'):
        cache(url)
    assert not made.exists()
    (d / '.cache.lock').unlink(missing_ok=True); os.symlink(victim, d / '.cache.lock')
    with pytest.raises(OSError, match='is a link or not a regular file'):
        cache.usage()
    assert victim.read_text() == 'precious' and stat.S_IMODE(victim.stat().st_mode) == 0o600


def test_cache_dir_others_can_write_is_refused(tmp_path):
    "A cache_dir others can write into, or another user's, is a named error unless the cache is shared on purpose."
    open_dir = tmp_path / 'open'; open_dir.mkdir(); os.chmod(open_dir, 0o1777)  # /tmp-like: the sticky bit does not help
    with pytest.raises(shard_cache.CacheDirError, match='other users can write into it.*cache_shared=True'):
        ShardCache(open_dir)
    assert ShardCache(open_dir, shared=True).shared
    if os.getuid() == 0:
        theirs = tmp_path / 'theirs'; theirs.mkdir(mode=0o755); os.chown(theirs, 65534, 65534)
    else:
        theirs = Path('/usr')  # root's
    with pytest.raises(shard_cache.CacheDirError, match='belongs to another user'):
        ShardCache(theirs)
    with pytest.raises(shard_cache.CacheDirError):
        wds.WdsSource(['http://127.0.0.1:9/a.tar'], 'x', cache_dir=open_dir)
    assert wds.WdsSource(['http://127.0.0.1:9/a.tar'], 'x', cache_dir=open_dir, cache_shared=True).cache.shared


def test_announced_size_is_a_hint(server, tmp_path):
    "515 bytes under a claimed 400 MB Content-Length: the temp file's blocks stay small (reserved as bytes arrive)."
    url, _ = server
    cache = ShardCache(tmp_path / 'c', opener=shard_io.open_shard, prefetch=0)
    cache.drain_seconds = 0.5
    f = cache(url + '/claim.tar')
    try:
        assert f.read(515) == b'y' * 515
        parts = list((tmp_path / 'c').glob('*.part'))
        assert len(parts) == 1
        allocated = parts[0].stat().st_blocks * 512
        assert allocated < 2 << 20, f'{allocated:,} bytes reserved for 515 received'
    finally:
        f.close()


def test_default_limit_never_fills_the_disk(tmp_path):
    "No cache_limit: at most half the free space at open (plus what is held), and a floor of free space kept."
    st = os.statvfs(tmp_path)
    cache = ShardCache(tmp_path / 'c')
    assert cache.auto and 0 < cache.limit <= st.f_bavail * st.f_frsize // 2 + (64 << 20)
    assert 0 < cache.floor <= 1 << 30


def test_warning_names_are_printable(tmp_path):
    "A dataset-derived shard name with a terminal escape reaches the cache's warning escaped."
    class Sized(io.BytesIO):
        size = 10 ** 6
    cache = ShardCache(tmp_path / 'c', limit=1000, opener=lambda u, t: Sized(b''), prefetch=0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        cache('http://h/\x1b[2J\x1b]0;owned\x07.tar').close()
    msg = ' '.join(str(x.message) for x in w)
    assert 'shard cache' in msg and '\x1b' not in msg and '\\x1b' in msg, msg
