"""Hostile neighbours (issue 71): another user on the same machine plants kept scans, holds the locks, squats the watch
folder. Each test plays the victim and the attacker as two unprivileged users (forked from this process, which must run
as root to become them; skipped with the reason otherwise) and checks that the harm does not happen: the victim's reads
give the true rows, its waits end in a named error within their bound, its loaders run."""

import fcntl, functools, hashlib, http.server, io, os, pickle, select, shutil, signal, stat, tarfile, tempfile, threading, time
from pathlib import Path
import numpy as np
import pytest
import encodings.idna  # noqa: F401  (imported here: a user who is not root cannot read the interpreter's files)
import urllib.request  # noqa: F401
from timmdata.net import cache_folder, shard_cache as sc
from timmdata.index.scanned_spans import ScannedSpans
from timmdata.sources.wds import WdsSource

VICTIM, ATTACKER = 40001, 40002  # two uids no account uses

pytestmark = pytest.mark.skipif(
    not hasattr(os, 'geteuid') or os.geteuid() != 0,
    reason='plays two users on one machine: needs root to become them (run the suite as root, e.g. in a container)',
)


def _become(uid: int, home: Path):
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    os.environ['HOME'] = str(home)
    os.environ['XDG_CACHE_HOME'] = str(home / '.cache')


def as_user(uid: int, home: Path, fn, timeout: float = 30):
    "fn() run by a child forked as `uid`: its return value, or its exception as 'Name: message'; 'TIMEOUT' when it did not end within `timeout` s."
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only modules already imported can be used (the interpreter's files are root's)
        code = 0
        try:
            os.close(r)
            _become(uid, home)
            out = fn()
        except BaseException as e:  # noqa: BLE001
            out = f'{type(e).__name__}: {e}'
        try:
            os.write(w, pickle.dumps(out))
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    os.close(w)
    data, end = b'', time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([r], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                return 'TIMEOUT'
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    return pickle.loads(data) if data else 'NO ANSWER'


def holding(uid: int, home: Path, fn) -> int:
    "A child of `uid` that runs fn() (which takes what it holds) and then sleeps until killed; its pid, once fn() returned."
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            _become(uid, home)
            keep = fn()  # noqa: F841  (what it holds stays open)
            os.write(w, b'1')
            while True:
                time.sleep(60)
        finally:
            os._exit(0)
    os.close(w)
    assert select.select([r], [], [], 20)[0] and os.read(r, 1) == b'1', 'the attacker could not take what it holds'
    os.close(r)
    return pid


def _stop(pid: int):
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


@pytest.fixture
def machine():
    "A folder every user can add to (as /tmp), with a home for each (0755, the usual mode): (top, victim's home, attacker's home)."
    reachable = lambda d: all(os.stat(p).st_mode & 0o001 for p in [d, *Path(d).parents])  # every user can pass
    base = next((d for d in (tempfile.gettempdir(), '/tmp', '/var/tmp') if os.path.isdir(d) and reachable(d)), None)
    if base is None:
        pytest.skip('no temporary folder that other users can reach')
    top = Path(tempfile.mkdtemp(prefix='timmdata-users-', dir=base))  # (make test's own TMPDIR is 0700: /tmp then)
    os.chmod(top, 0o1777)
    homes = []
    for uid in (VICTIM, ATTACKER):
        (h := top / f'home{uid}').mkdir(mode=0o755)
        os.chown(h, uid, uid)
        homes.append(h)
    yield top, *homes
    shutil.rmtree(top, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- kept scans


class _Ranged(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        rng, path = self.headers.get('Range'), self.translate_path(self.path)
        if not rng or not os.path.isfile(path):
            return super().do_GET()
        a, b = map(int, rng.split('=', 1)[1].split('-'))
        data = Path(path).read_bytes()[a : b + 1]
        self.send_response(206)
        self.send_header('Content-Length', str(len(data)))
        self.send_header('Content-Range', f'bytes {a}-{a + len(data) - 1}/{os.path.getsize(path)}')
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def served(tmp_path):
    "Two tar shards of two samples each over a local server that answers ranged reads: a `WdsSource` without a dataset index."
    for s in range(2):
        with tarfile.open(tmp_path / f'toy-{s}.tar', 'w', format=tarfile.USTAR_FORMAT) as t:
            for i in range(2 * s, 2 * s + 2):
                for ext, data in (('jpg', b'\xff\xd8' + bytes([i]) * 600), ('cls', str(i).encode())):
                    ti = tarfile.TarInfo(f'{i:04d}.{ext}')
                    ti.size = len(data)
                    t.addfile(ti, io.BytesIO(data))
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(_Ranged, directory=str(tmp_path)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    src = WdsSource([f'http://127.0.0.1:{srv.server_port}/toy-{s}.tar' for s in range(2)])
    src.shard_lengths = [2, 2]
    yield src
    srv.shutdown()
    srv.server_close()


def _plant(spans: ScannedSpans, s: int, rows: np.ndarray, size: int):
    "A kept scan of shard s with a good digest (an unkeyed SHA-256: anyone can compute it)."
    data = np.array([size], '<i8').tobytes() + rows.astype('<i8').tobytes()
    Path(spans._path(s)).write_bytes(hashlib.sha256(data).hexdigest()[:16].encode('ascii') + data)


def test_another_user_plants_kept_scans(machine, served):
    """The attacker makes the node's index folder first and plants scans: shard 0's sample 0 read where sample 1 is,
    shard 1 with a 2**40-byte span. The victim reads the true rows of both, and keeps nothing in the attacker's folder."""
    top, victim, attacker = machine
    idx = top / 'node-index'
    true = ScannedSpans(served, str(tempfile.mkdtemp()))
    rows0, size0 = true.sized(0)
    rows1, size1 = true.sized(1)

    def plant():
        os.umask(0)
        spans = ScannedSpans(served, str(idx))
        os.makedirs(spans.folder, 0o777)
        forged = rows0.copy()
        forged[0] = rows0[1]
        _plant(spans, 0, forged, size0)
        huge = rows1.copy()
        huge[1, 1] = huge[1, 0] + 2**40
        _plant(spans, 1, huge, 2**41)
        return 'planted'

    assert as_user(ATTACKER, attacker, plant) == 'planted'

    def read():
        spans = ScannedSpans(served, str(idx))
        got = [spans.sized(0)[0].tolist(), spans.sized(1)[0].tolist()]
        return got, spans.scanned, sorted(p.stat().st_uid for p in Path(spans.folder).iterdir())

    got = as_user(VICTIM, victim, read)
    assert not isinstance(got, str), got
    assert got[0] == [rows0.tolist(), rows1.tolist()], 'the planted rows were read'
    assert got[1] == 2, 'both shards scanned by the victim'
    assert VICTIM not in got[2], "nothing kept in the attacker's folder"


def test_a_forged_kept_scan_in_ones_own_folder_is_scanned_again(machine, served):
    "In the victim's own folder, a kept row that reads another sample (a good digest) is refused by its checks against the shard."
    top, victim, _ = machine

    def run():
        spans = ScannedSpans(served, str(victim / 'idx'))
        rows, size = spans.sized(0)
        forged = rows.copy()
        forged[0] = rows[1]
        _plant(spans, 0, forged, size)
        again = ScannedSpans(served, str(victim / 'idx'))
        return again.sized(0)[0].tolist() == rows.tolist(), oct(os.stat(spans.folder).st_mode & 0o777)

    assert as_user(VICTIM, victim, run) == (True, '0o700')


# ---------------------------------------------------------------------------------------------- locks


def test_another_user_cannot_open_the_cache_locks(machine):
    "The victim's shard cache in its 0755 home: its lock files are 0600, so the attacker cannot open (and so hold) them."
    _, victim, attacker = machine
    cache = victim / 'cache'
    assert as_user(VICTIM, victim, lambda: sc.ShardCache(cache, '1MB', prefetch=0).usage()) == 0
    lock = cache / '.cache.lock'
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600

    def hold():
        fd = os.open(lock, os.O_RDONLY)

        return 'held'

    assert as_user(ATTACKER, attacker, hold).startswith('PermissionError'), 'the attacker opened the lock'


def test_a_held_cache_lock_is_a_bounded_wait_that_names_its_holder(machine):
    """A lock an older timmdata made 0644, opened and held by the attacker: `ShardCache(...)` waited for ever on it; now
    the wait ends within its bound with a `DeadlineError` that names the holder as another user."""
    _, victim, attacker = machine
    cache = victim / 'cache'

    def old_lock():
        cache.mkdir(mode=0o755)
        os.close(os.open(cache / '.cache.lock', os.O_CREAT | os.O_RDONLY, 0o644))
        return 'made'

    assert as_user(VICTIM, victim, old_lock) == 'made'

    def hold():
        fd = os.open(cache / '.cache.lock', os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    pid = holding(ATTACKER, attacker, hold)
    try:

        def open_cache():
            sc.FOLDER_LOCK_WAIT = cache_folder.FOLDER_LOCK_WAIT = 1.0  # (60 s by default; the folder's lock is the folder module's)
            try:
                sc.ShardCache(cache, prefetch=0)
                return 'opened'
            except TimeoutError as e:
                return f'{type(e).__name__}: {e}'

        msg = as_user(VICTIM, victim, open_cache, timeout=60)  # a wait with no deadline: 'TIMEOUT'
    finally:
        _stop(pid)
    assert msg != 'TIMEOUT', 'ShardCache(...) waited on the lock with no deadline'
    assert msg.startswith('DeadlineError') and 'another user' in msg and str(ATTACKER) in msg, msg
    assert stat.S_IMODE(os.stat(cache / '.cache.lock').st_mode) == 0o600  # no new holder from now on


# ---------------------------------------------------------------------------------------------- the watch folder


def test_another_user_squats_the_watch_folder(machine, monkeypatch):
    """The attacker makes /dev/shm/timmdata-watch-VICTIM first: every loader the victim made under TIMMDATA_WATCH raised
    `PermissionError`. Now the victim's loader runs, publishing in a folder of its own that `timmdata top` reads."""
    from timmdata.watch import loader_watch as wm
    from timmdata.dataset import ImageDataset
    from timmdata.loader import create_loader
    from timmdata.tools.sample_data import make_sample_dataset

    top, victim, attacker = machine
    root = make_sample_dataset(top / 'data', n_train=4, n_val=0, size=(32, 32), classes=['a', 'b'], num_workers=0)
    for p in [top / 'data', *(top / 'data').rglob('*')]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    squat = Path('/dev/shm') / f'timmdata-watch-{VICTIM}'
    if not Path('/dev/shm').is_dir() or squat.exists():
        pytest.skip('needs /dev/shm, and no folder of that user there')

    def train():
        loader = create_loader(ImageDataset(str(root / 'train')), 32, 4, num_workers=0, device='cpu', seed=0)
        n = 0
        for _ in loader:
            n += 1
            seen = [r['pid'] for r in wm.read_records()]
        return n, seen, os.getpid()

    monkeypatch.setenv('TIMMDATA_WATCH', '1')  # the users' children inherit it; this process has it back afterwards
    train()  # as root first: what the run imports is imported before the users (who cannot read the interpreter's files)

    def plant():
        os.umask(0)
        squat.mkdir(mode=0o777)
        return 'squatted'

    try:
        assert as_user(ATTACKER, attacker, plant) == 'squatted'
        got = as_user(VICTIM, victim, train, timeout=60)
        assert not isinstance(got, str), (
            got
        )  # PermissionError: watch folder ... is not a folder only this user can write
        n, seen, pid = got
        assert n == 2 and seen == [pid], got
        assert not any(squat.iterdir()), "nothing published in the attacker's folder"
    finally:
        shutil.rmtree(squat, ignore_errors=True)
