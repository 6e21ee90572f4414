"""Issue 14, the store and tar readers at scale: bounded file descriptors (a 5,000-chunk store read by 2 workers under
an open-file limit of 256; many tars; no os.pread), damaged or rebuilt stores (StoreDamagedError, never wrong pixels),
atomic and fsynced store files, and concurrent builders into one folder."""
import multiprocessing
import io, json, os, resource, shutil, sys, tarfile, tempfile, time, traceback
from pathlib import Path
import numpy as np
import pytest
from PIL import Image
import timmdata.store.builder as cache
import timmdata.store.format as store
from timmdata.store.builder import build_cache, cache_main
from timmdata.readers import TarReader
from timmdata.store.format import STORE_MANIFEST, ReaderStore, StoreDamagedError

HAS_PROC_FD = os.path.isdir('/proc/self/fd')


def _open_fds():
    return len(os.listdir('/proc/self/fd'))


def _png(value, size=(4, 4)):
    b = io.BytesIO(); Image.fromarray(np.full((*size, 3), value, np.uint8)).save(b, 'PNG'); return b.getvalue()


def _tiny_source(root: Path, per_class: int, classes: int = 2, size=(4, 4)) -> Path:
    "`classes` folders of `per_class` tiny PNGs; image i of class c is filled with (7 * i + 50 * c) % 256."
    for c in range(classes):
        (root / f'c{c}').mkdir(parents=True)
        for i in range(per_class): (root / f'c{c}' / f'{i:05d}.png').write_bytes(_png((7 * i + 50 * c) % 256, size))
    return root


def _tiny_tar(path: Path, per_class: int, classes: int = 2) -> Path:
    "The same images as `_tiny_source`, as members c0/00000.png ... of one tar (one file to write, not thousands)."
    blobs = {v: _png(v) for v in range(256)}
    with tarfile.open(path, 'w') as tf:
        for c in range(classes):
            for i in range(per_class):
                b = blobs[(7 * i + 50 * c) % 256]
                ti = tarfile.TarInfo(f'c{c}/{i:05d}.png'); ti.size = len(b); tf.addfile(ti, io.BytesIO(b))
    return path


def _value(reader, i):
    "The fill value sample i of a `_tiny_source` store must have, from its file name."
    name = reader.filename(i)
    c, i = int(name.split('/')[0][1:]), int(Path(name).stem)
    return (7 * i + 50 * c) % 256


@pytest.fixture
def no_fsync(monkeypatch):
    "Builds of thousands of tiny chunks without fsync (10,000 fsyncs take ~20 s on ext4); durability is tested apart."
    monkeypatch.setattr(os, 'fsync', lambda fd: None)


# ---------------------------------------------------------------------------------------------- file descriptors

def _fork(fn, err: Path) -> int:
    "Starts fn() in a forked child (nothing to import again: fast); returns its pid. Its traceback, if it raises, goes to `err`."
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try: fn(); code = 0
        except BaseException: err.write_text(traceback.format_exc())
        finally: os._exit(code)
    return pid


def _wait(pid: int, err: Path, timeout: float = 120):
    t = time.time()
    while time.time() - t < timeout:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, err.read_text()[-3000:] if err.exists() else status
            return
        time.sleep(0.02)
    os.kill(pid, 9); os.waitpid(pid, 0); raise AssertionError(f'child {pid} ran past {timeout} s')


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC_FD or sys.platform != 'linux', reason='counts descriptors in /proc/self/fd')
def test_5000_chunk_store_through_create_loader_under_fd_limit_256(tmp_path, no_fsync):
    "5,000 chunks read whole through create_loader by 2 workers, in a process whose open-file limit is 256."
    import torch
    from timmdata.dataset import ImageDataset
    from timmdata.loader import create_loader
    # a tmpfs when there is one: 10,000 small files are created much faster there than on a journalled disk
    shm = '/dev/shm' if os.access('/dev/shm', os.W_OK) else None
    dst = Path(tempfile.mkdtemp(dir=shm)) / 'store'
    try:
        m = build_cache(_tiny_tar(tmp_path / 'src.tar', 2500), dst, chunk_size=1, num_workers=2, progress=False)
        assert len(m['chunks']) == 5000
        out, err = tmp_path / 'fds', tmp_path / 'err'
        out.mkdir()

        def read_all():  # in the child: limit 256, then an epoch through create_loader
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
            torch.set_num_threads(1)
            multiprocessing.set_start_method('fork', force=True)  # workers that see the patch below (this child's own setting)
            real, peak = ReaderStore.__getitem__, {}
            def counted(self, i):  # the descriptors the worker opened since its first sample, while it holds a sample
                # (counted against the worker's own start: a worker forked from a process that other tests ran in
                # inherits their descriptors, and those say nothing of the store's)
                if 'base' not in peak: peak['base'] = len(os.listdir('/proc/self/fd'))
                px, label = real(self, i)
                n = len(os.listdir('/proc/self/fd')) - peak['base']
                if n > peak.get('n', -1):
                    peak['n'] = n; (out / str(os.getpid())).write_text(str(n))
                assert int(px[0, 0, 0]) == (7 * (i % 2500) + 50 * label) % 256  # c0/00000.png ... c1/02499.png
                return px, label
            ReaderStore.__getitem__ = counted
            dl = create_loader(ImageDataset(str(dst)), (3, 4, 4), 250, num_workers=2, device='cpu', crop_pct=1.0,
                               persistent_workers=False, worker_mode='process')  # its descriptors, per worker process
            labels = [l for _, y in dl for l in y.tolist()]
            (out / 'labels.json').write_text(json.dumps(np.bincount(labels).tolist()))

        _wait(_fork(read_all, err), err)
        assert json.loads((out / 'labels.json').read_text()) == [2500, 2500]  # every sample once
        peaks = {f.name: int(f.read_text()) for f in out.iterdir() if f.name != 'labels.json'}
        assert len(peaks) == 2, peaks  # measured in both workers
        print(f'descriptors opened per worker while reading (5000 chunks, limit 256): {sorted(peaks.values())}')
        assert max(peaks.values()) < 16, peaks  # a few of the process's own (a pipe, a socket): the chunks hold none
    finally:
        shutil.rmtree(dst.parent, ignore_errors=True)


@pytest.mark.parametrize('libc', [True, False], ids=['libc-mmap', 'python-mmap'])
def test_reader_maps_a_bounded_number_of_chunks_and_evicted_views_stay_valid(tmp_path, no_fsync, monkeypatch, libc):
    "libc's mmap keeps no descriptor at all; Python's (Windows) one per mapping, bounded by the reader's cache."
    if not libc: monkeypatch.setattr(store, '_LIBC', None)
    elif store._LIBC is None: pytest.skip("no libc mmap on this platform")
    build_cache(_tiny_source(tmp_path / 'src', 100), tmp_path / 'store', chunk_size=1, num_workers=0, progress=False)
    r = ReaderStore(tmp_path / 'store', max_open_chunks=8)
    before = _open_fds() if HAS_PROC_FD else None
    first = r[0][0]  # a view into chunk 0, held while every other chunk is read
    for i in range(len(r)):
        px, label = r[i]
        assert px.shape == (4, 4, 3) and (px == _value(r, i)).all() and px.flags.writeable
    assert len(r._maps) == 8
    if before is not None: assert _open_fds() - before <= (0 if libc else 9)  # python: 8 cached + chunk 0's (`first`)
    assert (first == _value(r, 0)).all()  # its chunk has long left the reader's cache: the view is intact
    r.close(); assert len(r._maps) == 0 and (first == _value(r, 0)).all() and (r[5][0] == _value(r, 5)).all()


def _make_tars(folder: Path, n: int) -> list:
    folder.mkdir()
    blobs = []
    for k in range(n):
        blob = _png(k); blobs.append(blob)
        ti = tarfile.TarInfo(f'{k}.png'); ti.size = len(blob)
        with tarfile.open(folder / f'c{k:03d}.tar', 'w') as tf: tf.addfile(ti, io.BytesIO(blob))
    return blobs


@pytest.mark.skipif(not HAS_PROC_FD, reason='counts descriptors in /proc/self/fd')
def test_tar_reader_holds_a_bounded_number_of_tars_open(tmp_path):
    blobs = _make_tars(tmp_path / 'tars', 120)
    r = TarReader(tmp_path / 'tars')
    before = _open_fds()
    assert [r[i][0] for i in range(len(r))] == blobs
    assert _open_fds() - before <= 16, _open_fds() - before  # was one descriptor per tar (120)
    r.close(); assert _open_fds() <= before


def test_tar_reader_without_pread(tmp_path, monkeypatch):
    "Where os.pread is missing (Windows) the reader seeks and reads under a lock: same bytes, also from threads."
    from concurrent.futures import ThreadPoolExecutor
    blobs = _make_tars(tmp_path / 'tars', 30)
    r = TarReader(tmp_path / 'tars')  # 30 tars, 16 open at most
    monkeypatch.delattr(os, 'pread')
    assert [r[i][0] for i in range(len(r))] == blobs
    with ThreadPoolExecutor(4) as ex:
        assert list(ex.map(lambda i: r[i % 30][0], range(300))) == [blobs[i % 30] for i in range(300)]


# ------------------------------------------------------------------------------------------- store consistency

def _store(tmp_path, per_class=20, chunk_size=4, **kw):
    src = _tiny_source(tmp_path / 'src', per_class, size=(6, 5))
    m = build_cache(src, tmp_path / 'store', chunk_size=chunk_size, num_workers=0, progress=False, **kw)
    return src, tmp_path / 'store', m


def test_truncated_or_replaced_chunk_is_store_damaged(tmp_path):
    src, dst, m = _store(tmp_path)
    chunk = dst / 'chunks' / m['chunks'][3]['file']
    good = chunk.read_bytes()
    r = ReaderStore(dst)
    rows = [i for i in range(len(r)) if int(r._chunk[r._rows[i]]) == 3]
    with open(chunk, 'r+b') as f: f.truncate(len(good) - 10)
    with pytest.raises(StoreDamagedError) as e: ReaderStore(dst)[rows[-1]]
    msg = str(e.value)
    assert f'chunks/{chunk.name}' in msg and 'is damaged' in msg and f'timmdata cache {src} {dst}' in msg, msg
    assert isinstance(e.value, RuntimeError) and 'fix or remove' not in msg
    assert (ReaderStore(dst)[0][0] == _value(r, 0)).all()  # the other chunks still read
    chunk.write_bytes(good + good)  # replaced by a file of another length
    with pytest.raises(StoreDamagedError, match=f'has {2 * len(good)} bytes where its manifest records {len(good)}'):
        ReaderStore(dst)[rows[0]]
    chunk.unlink()
    with pytest.raises(StoreDamagedError, match='is missing'): ReaderStore(dst)[rows[0]]
    # the printed command repairs it: a store whose chunks do not match its manifest is not up to date
    cache_main(str(e.value).split('\n')[1].split()[2:] + ['--workers', '0', '--chunk-size', '4'])
    r2 = ReaderStore(dst)
    assert all((r2[i][0] == _value(r2, i)).all() for i in range(len(r2)))


def test_damaged_chunk_through_dataset_is_not_a_bad_image(tmp_path):
    "With bad_sample='skip' a damaged store is still an error, not a skipped 'bad image'."
    from timmdata.dataset import ImageDataset
    src, dst, m = _store(tmp_path)
    with open(dst / 'chunks' / m['chunks'][0]['file'], 'r+b') as f: f.truncate(5)
    ds = ImageDataset(str(dst), bad_sample='skip')
    with pytest.raises(StoreDamagedError, match='is damaged'): ds[0]
    bad = ds.bad_samples
    assert (bad() if callable(bad) else bad) == []  # nothing counted as a bad image


def test_rebuild_while_a_reader_holds_the_old_store(tmp_path):
    "A rebuilt store never hands the old reader a new chunk through the old index: old views stay, new reads fail clearly."
    src, dst, m = _store(tmp_path, per_class=20, chunk_size=2)
    r = ReaderStore(dst, max_open_chunks=2)
    old = {i: _value(r, i) for i in range(len(r))}
    held = r[0][0]  # mapped before the rebuild
    # the same image sizes, other pixels: through the old index, a new chunk would give wrong pixels silently
    for f in sorted(src.rglob('*.png')): f.write_bytes(_png(255 - _value(r, 0) // 2, (6, 5)))
    m2 = build_cache(src, dst, chunk_size=2, num_workers=0, progress=False)
    assert (held == old[0]).all()  # the old mapping is intact
    for i in range(len(r)):
        try: px = r[i][0]
        except StoreDamagedError as e:
            assert 'open it again' in str(e); continue
        assert (px == old[i]).all(), f'sample {i}: the old reader got pixels of the new build'
    r2 = ReaderStore(dst)
    assert all((r2[i][0] == 255 - old[0] // 2).all() for i in range(len(r2)))
    assert m2['build_id'] != m['build_id'] and not {c['file'] for c in m['chunks']} & {c['file'] for c in m2['chunks']}


def test_index_of_another_build_is_refused(tmp_path):
    src, dst, m = _store(tmp_path)
    other = tmp_path / 'other'
    build_cache(src, other, chunk_size=4, num_workers=0, progress=False)
    (dst / 'index.npz').write_bytes((other / 'index.npz').read_bytes())  # same layout, another build
    with pytest.raises(StoreDamagedError, match="its index.npz is of build"): ReaderStore(dst)


def test_old_version_store_asks_for_a_rebuild(tmp_path):
    src, dst, m = _store(tmp_path)
    man = json.loads((dst / STORE_MANIFEST).read_text()); man['format_version'] = 1
    (dst / STORE_MANIFEST).write_text(json.dumps(man))
    with pytest.raises(ValueError, match='version 1 store.*Rebuild it with'): ReaderStore(dst)


# --------------------------------------------------------------------------------------- atomic, durable files

def test_every_store_file_is_written_atomically_and_fsynced(tmp_path, monkeypatch):
    "Each file is written under a temporary name, fsynced, renamed; the folders are fsynced before the manifest and after."
    src = _tiny_source(tmp_path / 'src', 6)
    (src / 'c0' / 'bad.png').write_bytes(b'not an image')
    dst = tmp_path / 'store'
    log, real_fsync, real_replace = [], os.fsync, os.replace
    def fsync(fd):
        log.append(('fsync', os.path.realpath(f'/proc/self/fd/{fd}'))); return real_fsync(fd)
    def replace(a, b, *k, **kw):
        log.append(('replace', os.path.realpath(a), os.path.realpath(b))); return real_replace(a, b, *k, **kw)
    monkeypatch.setattr(os, 'fsync', fsync); monkeypatch.setattr(os, 'replace', replace)
    if not HAS_PROC_FD: pytest.skip('names fsynced files through /proc/self/fd')
    build_cache(src, dst, chunk_size=4, num_workers=0, progress=False)
    files = sorted(str(p) for p in dst.rglob('*') if p.is_file() and p.name != '.timmdata_build.lock')
    assert {Path(f).name for f in files} >= {STORE_MANIFEST, 'index.npz', 'filenames.json', 'source_files.json.gz',
                                             'bad_images.txt'}
    assert not any(Path(f).name.startswith('.') for f in files)  # no temporary file left
    for f in files:
        ren = [k for k, e in enumerate(log) if e[0] == 'replace' and e[2] == f]
        assert ren, f'{f} was not written through a rename'
        tmp = log[ren[-1]][1]
        assert ('fsync', tmp) in log[:ren[-1]], f'{f}: its temporary file was not fsynced before the rename'
    man = max(k for k, e in enumerate(log) if e[0] == 'replace' and e[2].endswith(STORE_MANIFEST))
    side = max(k for k, e in enumerate(log) if e[0] == 'replace' and not e[2].endswith(STORE_MANIFEST))
    fsynced_dirs = {k: e[1] for k, e in enumerate(log) if e[0] == 'fsync' and os.path.isdir(e[1])}
    assert any(side < k < man and d == str(dst.resolve()) for k, d in fsynced_dirs.items())
    assert any(side < k < man and d == str((dst / 'chunks').resolve()) for k, d in fsynced_dirs.items())
    assert any(k > man and d == str(dst.resolve()) for k, d in fsynced_dirs.items())


# ------------------------------------------------------------------------------------------ concurrent builders

def test_concurrent_builders_share_one_build(tmp_path, monkeypatch):
    "Two processes build into one folder at once: one decodes every image once, the other waits and reuses the store."
    src = _tiny_source(tmp_path / 'src', 30)
    dst, calls = tmp_path / 'store', tmp_path / 'calls'
    real = cache.load_resized
    def slow(*a, **k):  # every decode is logged (both processes append to one file)
        with open(calls, 'a') as f: f.write('x')
        time.sleep(0.01); return real(*a, **k)
    monkeypatch.setattr(cache, 'load_resized', slow)  # inherited by the forked builders

    def builder(k):
        def run():
            (tmp_path / f'ready{k}').touch()  # start together
            while not all((tmp_path / f'ready{j}').exists() for j in (0, 1)): time.sleep(0.001)
            m = build_cache(src, dst, chunk_size=8, num_workers=0, progress=False)
            (tmp_path / f'id{k}').write_text(json.dumps(m.get('build_id')))
        return run
    pids = [_fork(builder(k), tmp_path / f'err{k}') for k in (0, 1)]
    for k, pid in enumerate(pids): _wait(pid, tmp_path / f'err{k}')
    assert len(calls.read_text()) == 60  # the 60 images were decoded once, by one of them
    ids = {json.loads((tmp_path / f'id{k}').read_text()) for k in (0, 1)}
    assert len(ids) == 1, ids  # both return the one store
    r = ReaderStore(dst)
    assert len(r) == 60 and all((r[i][0] == _value(r, i)).all() for i in range(60))
    bid = ids.pop()
    assert sorted(p.name for p in (dst / 'chunks').iterdir()) == sorted(
        f'{bid}-{k:05d}.{e}' for k in range(8) for e in ('u8', 'json'))  # nothing else, nothing missing


def test_builder_lock_timeout(tmp_path):
    src = _tiny_source(tmp_path / 'src', 3)
    with cache.build_lock(tmp_path / 'store'):
        with pytest.raises(TimeoutError, match=f'pid {os.getpid()} .* is building the image store'):
            build_cache(src, tmp_path / 'store', num_workers=0, progress=False, lock_timeout=0.2)
    assert build_cache(src, tmp_path / 'store', num_workers=0, progress=False, lock_timeout=0.2)['num_samples'] == 6
