"""The decode-once image store (timmdata.store.format: the format and its reader; timmdata.store.builder: the builder): round trips,
resuming, staleness, bad images, multi-process reading. Page faults and timings are measured by bench/bench_heap.py
and bench/bench_cache.py, never asserted here."""
import io, json, os, shutil, signal, subprocess, sys, time, textwrap
from pathlib import Path
import numpy as np
import pytest, torch
from PIL import Image
from timmdata.store.format import STORE_MANIFEST, ReaderStore, StaleStoreError
from timmdata.store.builder import build_cache, cache_main
import timmdata.store.builder as cache  # the builder looks up load_resized and create_reader here: tests patch them here
from timmdata.dataset import ImageDataset
from timmdata.loader import create_loader


@pytest.fixture
def src(sample_root, tmp_path):
    "A private copy of the sample train folder (60 JPEGs 426x320, 10 classes), safe to modify."
    return Path(shutil.copytree(Path(sample_root) / 'train', tmp_path / 'src'))


def _files(root):
    return sorted(p for p in Path(root).rglob('*') if p.is_file())


def _reference(path, max_size=256):
    "Decode-and-resize of a source file, written out independently of timmdata."
    im = Image.open(path).convert('RGB')
    w, h = im.size
    s = min(w, h)
    if s > max_size:
        k = max_size / s
        im = im.resize((max_size if w <= h else round(w * k), max_size if h < w else round(h * k)), Image.BICUBIC)
    return np.asarray(im)


def _reference_jpeg(path, longer: int, quality: int):
    """The store's JPEG of a source file, written out independently of timmdata: libjpeg's reduced-scale decode (the
    builder's `draft`), the longer side scaled to `longer` with BICUBIC, encoded at `quality`, decoded."""
    im = Image.open(path)
    w, h = im.size
    k = longer / max(w, h)
    size = (longer, round(h * k)) if w >= h else (round(w * k), longer)
    im.draft('RGB', size)
    out = io.BytesIO()
    im.convert('RGB').resize(size, Image.BICUBIC).save(out, 'JPEG', quality=quality)
    return np.asarray(Image.open(out).convert('RGB')).astype(int)


def test_round_trip_raw(src, tmp_path, capsys):
    dst = tmp_path / 'store'
    m = build_cache(src, dst, num_workers=2, chunk_size=16)
    assert 'cached 60 images' in capsys.readouterr().out
    files = _files(src)
    assert m['num_samples'] == len(files) == 60 and m['num_bad'] == 0
    assert (dst / STORE_MANIFEST).exists() and not (dst / '_build.json').exists()
    r = ReaderStore(dst)
    classes = sorted(p.name for p in src.iterdir())
    assert r.classes == classes and r.class_to_idx == {c: i for i, c in enumerate(classes)}
    assert len(r) == 60
    for i in range(len(r)):
        px, label = r[i]
        f = Path(r.filename(i, absolute=True))
        assert f.is_file() and f.parent.parent == src
        assert r.filename(i) == f.relative_to(src).as_posix() and r.filename(i, basename=True) == f.name
        assert label == classes.index(f.parent.name)
        assert isinstance(px, np.ndarray) and px.dtype == np.uint8 and px.ndim == 3 and px.shape[2] == 3
        assert min(px.shape[:2]) == 256
        np.testing.assert_array_equal(px, _reference(f))
    assert sorted(r.filename(i, absolute=True) for i in range(len(r))) == [str(f) for f in files]


def test_round_trip_jpeg_and_longer_side(src, tmp_path):
    dst = tmp_path / 'store_jpeg'
    m = build_cache(src, dst, max_size=160, side='longer', format='jpeg', quality=95, num_workers=0, progress=False)
    r = ReaderStore(dst)
    assert m['build']['params']['format'] == 'jpeg' and len(r) == 60
    raw_bytes = 0
    for i in range(0, 60, 7):
        blob, label = r[i]
        assert isinstance(blob, bytes) and blob[:2] == b'\xff\xd8'
        px = np.asarray(Image.open(io.BytesIO(blob)).convert('RGB'))
        assert max(px.shape[:2]) == 160
        ref = _reference_jpeg(r.filename(i, absolute=True), 160, 95)
        d = np.abs(px.astype(int) - ref)
        # the same pixels Pillow gives (0 today); another filter is >= 1.4 off on average (NEAREST 2.9, BILINEAR 1.6)
        assert px.shape == ref.shape and d.mean() < 0.5 and d.max() <= 4, (i, d.mean(), d.max())
        raw_bytes += px.nbytes
    # re-encoded JPEG is several times smaller than raw: 6.4x on these noisy sample photos at q95, so 3x has room
    assert m['build']['pixel_bytes'] * 3 < 60 / 9 * raw_bytes, (m['build']['pixel_bytes'], 60 / 9 * raw_bytes)


def test_up_to_date_and_cli(src, tmp_path, capsys):
    dst = tmp_path / 'store'
    assert cache_main([str(src), str(dst), '--max-size', '128', '--workers', '2', '--chunk-size', '8']) == 0
    m = json.loads((dst / STORE_MANIFEST).read_text())
    assert m['build']['params']['max_size'] == 128 and m['num_samples'] == 60
    assert min(ReaderStore(dst)[0][0].shape[:2]) == 128
    capsys.readouterr()
    cache_main([str(src), str(dst), '--max-size', '128'])
    assert 'up to date' in capsys.readouterr().out
    # other parameters: a rebuild, not a mix of the two
    cache_main([str(src), str(dst), '--max-size', '96', '--workers', '0'])
    assert min(ReaderStore(dst)[5][0].shape[:2]) == 96


def test_resume_after_exception(src, tmp_path, monkeypatch):
    dst = tmp_path / 'store'
    real, calls = cache.load_resized, {'n': 0}
    def flaky(*a, **k):
        calls['n'] += 1
        if calls['n'] == 25: raise KeyboardInterrupt  # Ctrl-C in the middle of chunk 3 (chunks of 8)
        return real(*a, **k)
    monkeypatch.setattr(cache, 'load_resized', flaky)
    with pytest.raises(KeyboardInterrupt):
        build_cache(src, dst, num_workers=0, chunk_size=8, progress=False)
    assert not (dst / STORE_MANIFEST).exists() and (dst / '_build.json').exists()
    with pytest.raises(FileNotFoundError, match='not a complete image store'):
        ReaderStore(dst)
    assert len(list((dst / 'chunks').glob('*.json'))) == 3
    monkeypatch.setattr(cache, 'load_resized', real)
    m = build_cache(src, dst, num_workers=0, chunk_size=8, progress=False)
    assert m['build']['resumed_chunks'] == 3 and m['num_samples'] == 60
    r = ReaderStore(dst)
    for i in (0, 23, 24, 59):
        np.testing.assert_array_equal(r[i][0], _reference(r.filename(i, absolute=True)))


@pytest.mark.slow
def test_resume_after_kill(src, tmp_path):
    "A build killed with SIGKILL (no cleanup at all) resumes from its committed chunks."
    dst = tmp_path / 'store'
    script = textwrap.dedent(f'''
        import time, timmdata.store.builder as c
        real = c.load_resized
        def slow(*a, **k):
            time.sleep(0.05); return real(*a, **k)
        c.load_resized = slow
        c.build_cache({str(src)!r}, {str(dst)!r}, num_workers=2, chunk_size=4, progress=False)
    ''')
    # its own process group, so that the kill takes the pool's workers too, as a job scheduler would
    p = subprocess.Popen([sys.executable, '-c', script], start_new_session=True)
    try:
        t = time.time()
        while len(list((dst / 'chunks').glob('*.json'))) < 3:
            assert p.poll() is None and time.time() - t < 60, 'the build ended or stalled before it could be killed'
            time.sleep(0.02)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    finally:
        if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)
    time.sleep(0.2)
    assert not (dst / STORE_MANIFEST).exists()
    m = build_cache(src, dst, num_workers=2, chunk_size=4, progress=False)
    assert m['build']['resumed_chunks'] >= 3 and m['num_samples'] == 60
    r = ReaderStore(dst)
    assert sorted(r.filename(i) for i in range(60)) == sorted(f.relative_to(src).as_posix() for f in _files(src))
    for i in range(0, 60, 5):
        np.testing.assert_array_equal(r[i][0], _reference(r.filename(i, absolute=True)))


def test_changed_source_detected(src, tmp_path):
    dst = tmp_path / 'store'
    build_cache(src, dst, num_workers=0, progress=False)
    ReaderStore(dst)  # fresh: fine
    f = _files(src)[7]
    with open(f, 'ab') as fh: fh.write(b'\0' * 10)
    with pytest.raises(StaleStoreError) as e:
        ReaderStore(dst)
    msg = str(e.value)
    assert f.relative_to(src).as_posix() in msg and '1 changed' in msg
    assert f'timmdata cache {src} {dst} --max-size 256 --format raw' in msg and 'check_source=False' in msg
    assert len(ReaderStore(dst, check_source=False)) == 60
    # only the modification time changed: still stale
    build_cache(src, dst, num_workers=0, progress=False)
    st = f.stat(); os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(StaleStoreError, match='1 changed'): ReaderStore(dst)
    # an added and a removed file
    build_cache(src, dst, num_workers=0, progress=False)
    shutil.copy(f, f.with_name('new.JPEG')); _files(src)[0].unlink()
    with pytest.raises(StaleStoreError, match=r'1 added .*1 removed|1 removed.*1 added'): ReaderStore(dst)
    # rebuilding with the printed command makes it usable again
    cache_main(str(e.value).split('\n')[1].split()[2:] + ['--workers', '0'])
    assert len(ReaderStore(dst)) == 60
    # a source that is gone (store copied elsewhere) is not checked
    shutil.rmtree(src)
    assert len(ReaderStore(dst)) == 60


def test_store_inside_source_is_not_part_of_it(src):
    dst = src / 'store'  # inside the source, not hidden (hidden names are skipped anyway): its files must not make the store stale or become samples
    build_cache(src, dst, num_workers=0, progress=False)
    assert len(ReaderStore(dst)) == 60


def test_corrupt_image_reported_and_left_out(src, tmp_path, capsys):
    files = _files(src)
    bad1, bad2 = files[3], files[40]
    bad1.write_bytes(bad1.read_bytes()[:200])  # truncated JPEG
    bad2.write_bytes(b'this is not an image')
    dst = tmp_path / 'store'
    m = build_cache(src, dst, num_workers=2, chunk_size=16)
    out = capsys.readouterr().out
    assert '2 bad source images left out' in out and 'bad_images.txt' in out
    assert m['num_bad'] == 2 and m['num_samples'] == 58
    report = (dst / 'bad_images.txt').read_text()
    assert bad1.relative_to(src).as_posix() in report and bad2.relative_to(src).as_posix() in report
    r = ReaderStore(dst)
    names = [r.filename(i, absolute=True) for i in range(len(r))]
    assert str(bad1) not in names and str(bad2) not in names and len(set(names)) == 58
    for i in range(len(r)):  # labels still line up with files after the gap
        assert r.classes[r[i][1]] == Path(names[i]).parent.name


class _Pixels(torch.utils.data.Dataset):
    def __init__(self, reader): self.reader = reader
    def __len__(self): return len(self.reader)
    def __getitem__(self, i):
        px, label = self.reader[i]
        return i, label, int(px.astype(np.int64).sum()), os.getpid()


def test_multiworker_loading(src, tmp_path):
    dst = tmp_path / 'store'
    build_cache(src, dst, num_workers=0, progress=False)
    r = ReaderStore(dst)
    r[0]  # mapped in the parent before the fork: workers must map their own
    expect = {i: (r[i][1], int(r[i][0].astype(np.int64).sum())) for i in range(len(r))}
    dl = torch.utils.data.DataLoader(_Pixels(r), batch_size=7, shuffle=True, num_workers=2)
    seen, pids = {}, set()
    for idx, label, s, pid in dl:
        for i, l, v in zip(idx.tolist(), label.tolist(), s.tolist(), strict=True):
            assert i not in seen, f'sample {i} delivered twice'
            seen[i] = (l, v)
        pids |= set(pid.tolist())
    assert seen == expect and len(pids) == 2 and os.getpid() not in pids


def test_image_dataset_and_loader(src, tmp_path):
    "ImageDataset(DST) finds the store; create_loader batches it with workers, every sample once per epoch."
    dst = tmp_path / 'store'
    build_cache(src, dst, num_workers=0, progress=False)
    ds = ImageDataset(str(dst))
    assert len(ds) == 60 and type(ds.reader) is ReaderStore  # create_reader picks it through the registry
    assert type(ImageDataset(str(dst), reader='store').reader) is ReaderStore
    img, target = ds[0]
    assert img.size == (341, 256) and target == 0
    dl = create_loader(ds, (3, 64, 64), 8, is_training=False, num_workers=2, device=torch.device('cpu'),
                                  crop_pct=1.0)
    labels = []
    for x, y in dl:
        assert x.dtype == torch.float32 and tuple(x.shape[1:]) == (3, 64, 64)
        labels += y.tolist()
    assert sorted(labels) == sorted(ds.reader[i][1] for i in range(60))


def test_bad_arguments(src, tmp_path):
    with pytest.raises(ValueError, match="format must be one of 'raw', 'jpeg'; got 'png'"):
        build_cache(src, tmp_path / 's', format='png')
    with pytest.raises(ValueError, match='quality must be in 1..100; got 0'):
        build_cache(src, tmp_path / 's', format='jpeg', quality=0)
    with pytest.raises(ValueError, match="side must be one of 'shorter', 'longer'; got 'short'"):
        build_cache(src, tmp_path / 's', side='short')
    with pytest.raises(ValueError, match="interpolation must be one of .*; got 'cubic'"):
        build_cache(src, tmp_path / 's', interpolation='cubic')
    with pytest.raises(FileNotFoundError, match='does not exist'):
        build_cache(tmp_path / 'nope', tmp_path / 's')
    with pytest.raises(ValueError, match='must not be the source'):
        build_cache(src, src.parent)
    with pytest.raises(FileNotFoundError, match='not a complete image store'):
        ReaderStore(tmp_path)


def test_tar_source(src, tmp_path):
    "A .tar source: pixels from tar members; the tar file itself is the source fingerprint."
    import tarfile
    tar = tmp_path / 'train.tar'
    with tarfile.open(tar, 'w') as tf:
        for f in _files(src): tf.add(f, arcname=f.relative_to(src).as_posix())
    dst = tmp_path / 'store'
    m = build_cache(tar, dst, num_workers=2, chunk_size=16, progress=False)
    assert m['num_samples'] == 60 and m['source']['num_files'] == 1
    r = ReaderStore(dst)
    assert r.classes == sorted(p.name for p in src.iterdir())
    for i in (0, 31, 59):
        np.testing.assert_array_equal(r[i][0], _reference(src / r.filename(i)))
        assert r.classes[r[i][1]] == Path(r.filename(i)).parent.name
    with open(tar, 'ab') as f: f.write(b'\0' * 512)
    with pytest.raises(StaleStoreError, match='train.tar'): ReaderStore(dst)


def test_csv_source_and_its_outside_images(src, tmp_path, monkeypatch):
    "A CSV source: its images outside the CSV's folder are part of the fingerprint; the build scans the CSV once."
    lst = tmp_path / 'lists'; lst.mkdir()
    files = _files(src)
    (lst / 'train.csv').write_text('path,label\n' + ''.join(f'{f},{f.parent.name}\n' for f in files))
    calls, real = tmp_path / 'calls', cache.create_reader
    def counted(*a, **k):  # appends to a file: scans in forked pool workers count too
        with open(calls, 'a') as f: f.write('x')
        return real(*a, **k)
    monkeypatch.setattr(cache, 'create_reader', counted)
    build_cache(lst / 'train.csv', tmp_path / 'store', num_workers=2, chunk_size=8, progress=False, allow_outside=True)
    assert calls.read_text() == 'x'  # workers got the parent's reader, not a scan of their own
    m = json.loads((tmp_path / 'store' / STORE_MANIFEST).read_text())
    assert m['num_samples'] == 60 and m['source']['extra'] == 60 and m['source']['num_files'] == 61  # the CSV + its images
    r = ReaderStore(tmp_path / 'store')
    assert [r.filename(i, absolute=True) for i in range(60)] == [str(f) for f in files]  # CSV order kept
    np.testing.assert_array_equal(r[7][0], _reference(files[7]))
    with open(files[7], 'ab') as f: f.write(b'\0' * 10)  # an image outside the CSV's folder changes: stale
    with pytest.raises(StaleStoreError, match='1 changed'): ReaderStore(tmp_path / 'store')

