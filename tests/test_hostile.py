"""Hostile datasets (issue 24): a downloaded dataset or a shard server must never run a command, touch a file outside
its folders, or exhaust memory. One test per attack: each shows the harm does not happen (no marker file made, victim
files untouched, bounded reads, a walk that ends) and that the error (or the counted skip) names the problem."""
import functools, gzip, http.server, io, json, os, subprocess, sys, tarfile, threading, warnings
from pathlib import Path
import numpy as np
import pytest
from PIL import Image
from timmdata.sources import shard_io, wds
from timmdata.tools.sample_data import make_sample_dataset, make_sample_image

SHARD_KEYS = 4


def _jpeg(i: int) -> bytes:
    b = io.BytesIO(); make_sample_image(i % 10, seed=i, size=(20, 16)).save(b, 'JPEG', quality=80); return b.getvalue()


def _tar(samples: list, path: Path = None) -> bytes:
    "A WebDataset tar of `samples` [(key, {ext: bytes})], written to `path` when given."
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode='w', format=tarfile.USTAR_FORMAT) as tf:
        for key, d in samples:
            for ext, data in d.items():
                ti = tarfile.TarInfo(f'{key}.{ext}'); ti.size = len(data); tf.addfile(ti, io.BytesIO(data))
    if path is not None: path.write_bytes(bio.getvalue())
    return bio.getvalue()


def _good_shard(path: Path, labels=(0, 1, 2, 3)) -> Path:
    _tar([(f's{i}', {'jpg': _jpeg(i), 'cls': str(t).encode()}) for i, t in enumerate(labels)], path); return path


def _read_all(root, split='train', **kw) -> list:
    "Every (shard, key) a WdsSource gives for `root`, or the error it raises (constructing or reading)."
    src = wds.WdsSource(root, split, retries=0, **kw)
    return [(s, k) for s in src.shards for k, _, _ in src.iter_shard(s)]


def _info(root: Path, filenames: list, **extra):
    (root / '_info.json').write_text(json.dumps({'name': 'x', **extra, 'splits': {'train': {
        'name': 'train', 'num_samples': SHARD_KEYS * len(filenames), 'filenames': filenames,
        'shard_lengths': [SHARD_KEYS] * len(filenames)}}}))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass


@pytest.fixture
def serve():
    "serve(folder) -> 'http://127.0.0.1:PORT', a server in this process, shut down after the test."
    servers = []
    def start(folder):
        srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(_Quiet, directory=str(folder)))
        threading.Thread(target=srv.serve_forever, daemon=True).start(); servers.append(srv)
        return f'http://127.0.0.1:{srv.server_port}'
    yield start
    for s in servers: s.shutdown(); s.server_close()


# ---------- names from a dataset are data, never commands or paths elsewhere ----------

def test_info_json_pipe_entry_runs_nothing_local(tmp_path):
    root, mark = tmp_path / 'ds', tmp_path / 'PWNED'
    root.mkdir(); _good_shard(root / 'train-000000.tar')
    _info(root, ['train-000000.tar', f'pipe:touch {mark}; cat {root / "train-000000.tar"}'])
    with pytest.raises(ValueError, match=r"_info.json split 'train': entry 'pipe:touch .*scheme"):
        _read_all(root)
    assert not mark.exists()


def test_info_json_pipe_entry_runs_nothing_over_http(tmp_path, serve):
    root, mark = tmp_path / 'ds', tmp_path / 'PWNED'
    root.mkdir(); _good_shard(root / 'train-000000.tar')
    _info(root, ['train-000000.tar', f'pipe:touch {mark}'])  # the server supplies the _info.json
    url = serve(root)
    with pytest.raises(ValueError, match=r"entry 'pipe:touch .*not a relative name"):
        _read_all(url)
    assert not mark.exists()


@pytest.mark.parametrize('entry', ['ABS', 'FILE_URL', '../outside/victim-000000.tar', 'http://127.0.0.2:9/x.tar'])
def test_info_json_entries_outside_the_dataset_are_refused(tmp_path, entry):
    root, out = tmp_path / 'ds', tmp_path / 'outside'
    root.mkdir(); out.mkdir()
    victim = _good_shard(out / 'victim-000000.tar', labels=(7, 7, 7, 7))  # a tar elsewhere that would read fine
    entry = {'ABS': str(victim), 'FILE_URL': f'file://{victim}'}.get(entry, entry)
    _info(root, [entry])
    with pytest.raises(ValueError, match='is not a relative name under the dataset'):
        _read_all(root)


def test_pipe_runs_only_when_the_caller_names_it(tmp_path):
    shard, mark = _good_shard(tmp_path / 'a-000000.tar'), tmp_path / 'ran'
    got = _read_all(f'pipe:touch {mark}; cat {shard}')  # passed directly: runs
    assert len(got) == SHARD_KEYS and mark.exists()
    mark.unlink()
    src = wds.WdsSource([str(shard)], retries=0)  # a source the caller made of files: no pipe: shard runs through it
    with pytest.raises(shard_io.ShardError, match='allow_pipe=True'): list(src.iter_shard(f'pipe:touch {mark}'))
    assert not mark.exists()


def test_csv_rows_outside_its_folder_are_refused(tmp_path):
    from timmdata.readers import CsvReader
    (tmp_path / 'secret').mkdir(); secret = tmp_path / 'secret' / 'key.jpg'; secret.write_bytes(_jpeg(1))
    ds = tmp_path / 'ds'; (ds / 'a').mkdir(parents=True); (ds / 'a' / 'x.jpg').write_bytes(_jpeg(0))
    for row in (str(secret), '../secret/key.jpg'):
        (ds / 'list.csv').write_text(f'a/x.jpg,a\n{row},b\n')
        with pytest.raises(ValueError, match=r"list.csv' row 2"): CsvReader(ds / 'list.csv')
    assert len(CsvReader(ds / 'list.csv', allow_outside=True)) == 2  # a CSV you wrote yourself


def test_hf_image_value_with_only_a_path_is_not_read(tmp_path):
    from timmdata.sources.hf_readers import image_bytes
    secret = tmp_path / 'hostname'; secret.write_bytes(b'secret')
    with pytest.raises(ValueError, match=r"row 5: the image value has no bytes, only the path .*allow_paths=True"):
        image_bytes({'bytes': None, 'path': str(secret)}, 'split train row 5')
    assert image_bytes({'bytes': None, 'path': str(secret)}, allow_paths=True) == b'secret'


def test_store_chunk_names_from_the_manifest_stay_in_chunks(tmp_path):
    from timmdata.store.builder import build_cache
    from timmdata.store.format import ReaderStore, STORE_MANIFEST
    src = make_sample_dataset(tmp_path / 'src', n_train=2, n_val=0, classes=['a'], size=(16, 12), num_workers=0) / 'train'
    build_cache(src, tmp_path / 'store', max_size=0, num_workers=0, progress=False)
    m = json.loads((tmp_path / 'store' / STORE_MANIFEST).read_text())
    victim = tmp_path / 'victim.bin'; victim.write_bytes(b'\x07' * m['chunks'][0]['nbytes'])  # as long as the chunk
    m['chunks'][0]['file'] = '../../victim.bin'
    (tmp_path / 'store' / STORE_MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ValueError, match=r"chunk '../../victim.bin' is not a file name in the store's chunks/"):
        r = ReaderStore(tmp_path / 'store', check_source=False)
        assert not (np.asarray(r[0][0]) == 7).all()  # (before the fix: the victim's bytes came back as pixels)


# ---------- writes and deletions only inside the output folder ----------

def test_sample_marker_cannot_delete_outside(tmp_path):
    victim = tmp_path / 'victim'; (victim / 'train' / 'keep').mkdir(parents=True); (victim / 'train' / 'keep' / 'f').write_text('x')
    out = tmp_path / 'sample'; out.mkdir()
    for names in (['../../victim/train/keep'], [str(victim / 'train' / 'keep')]):
        (out / '.timmdata_sample.json').write_text(json.dumps({'classes': names}))
        with pytest.raises(ValueError, match='is not a plain folder name, so nothing is deleted'):
            make_sample_dataset(out, n_train=1, n_val=0, classes=['a'], size=(8, 8), num_workers=0)
    assert (victim / 'train' / 'keep' / 'f').read_text() == 'x'


def test_shard_state_file_cannot_delete_outside(tmp_path):
    from timmdata.tools.shards import SHARD_STATE, write_shards
    src = make_sample_dataset(tmp_path / 'src', n_train=2, n_val=1, classes=['a'], size=(16, 12), num_workers=0)
    victim = tmp_path / 'victim.txt'; victim.write_text('mine')
    dst = tmp_path / 'out'; dst.mkdir()
    (dst / SHARD_STATE).write_text(json.dumps({'version': 1, 'params': {}, 'shards': {
        str(victim): {'nbytes': 4}, '../victim.txt': {'nbytes': 4}}}))
    with pytest.warns(UserWarning, match='ignored 2 entries that are not shard file names'):
        write_shards(src, dst, progress=False)
    assert victim.read_text() == 'mine'


@pytest.mark.parametrize('link', ['symlink', 'hardlink'])
def test_build_lock_never_truncates_a_file_elsewhere(tmp_path, link):
    from timmdata.store.builder import BUILD_LOCK, build_cache
    src = make_sample_dataset(tmp_path / 'src', n_train=2, n_val=0, classes=['a'], size=(16, 12), num_workers=0) / 'train'
    victim = tmp_path / 'victim.txt'; victim.write_text('precious')
    dst = tmp_path / 'store'; dst.mkdir()
    (os.symlink if link == 'symlink' else os.link)(victim, dst / BUILD_LOCK)
    with pytest.raises(OSError, match='is a symbolic or hard link'):
        build_cache(src, dst, num_workers=0, progress=False)
    assert victim.read_text() == 'precious'


def test_build_id_from_an_interrupted_build_cannot_write_outside(tmp_path, monkeypatch):
    from timmdata.store import builder as cache
    from timmdata.store.format import BUILD_STATE
    src = make_sample_dataset(tmp_path / 'src', n_train=3, n_val=0, classes=['a'], size=(16, 12), num_workers=0) / 'train'
    dst = tmp_path / 'out' / 'store'
    def interrupted(*a, **k): raise KeyboardInterrupt
    with monkeypatch.context() as mp:
        mp.setattr(cache, '_run_chunks', interrupted)
        with pytest.raises(KeyboardInterrupt): cache.build_cache(src, dst, num_workers=0, progress=False)
    state = json.loads((dst / BUILD_STATE).read_text())
    state['build_id'] = '../../../escaped'  # chunk names are made from it: dst/chunks/../../../escaped-00000.u8
    (dst / BUILD_STATE).write_text(json.dumps(state))
    with pytest.warns(UserWarning, match='is not one timmdata makes'):
        cache.build_cache(src, dst, num_workers=0, progress=False)
    outside = [p for p in tmp_path.rglob('*escaped*')]
    assert outside == [] and (dst / 'timmdata_store.json').exists()


def test_shm_ledger_never_opened_through_a_planted_link(tmp_path, monkeypatch):
    from timmdata.engine import batch_ring
    monkeypatch.setattr(batch_ring, 'SHM_DIR', str(tmp_path))
    monkeypatch.setattr(batch_ring, '_foreign_warned', set())
    victim = tmp_path / 'victim.txt'; victim.write_text('keep me\n')
    os.symlink(victim, tmp_path / f'timmdata-rings-{os.getuid()}')
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        with batch_ring._ledger() as rings:
            if rings is not None: rings['ring'] = (os.getpid(), 1)
    assert victim.read_text() == 'keep me\n'
    assert rings is None and any('is a symbolic link' in str(x.message) for x in w)


def test_shm_ledger_of_another_owner_is_not_used(tmp_path, monkeypatch):
    from timmdata.engine import batch_ring
    monkeypatch.setattr(batch_ring, 'SHM_DIR', str(tmp_path))
    monkeypatch.setattr(batch_ring, '_foreign_warned', set())
    path = tmp_path / f'timmdata-rings-{os.getuid()}'
    path.write_text(f'{os.getpid()} planted {2**40}\n'); path.chmod(0o666)  # writable by anyone: not a private ledger
    with pytest.warns(UserWarning, match='is not a file of this user that only this user can write'):
        with batch_ring._ledger() as rings: pass
    assert rings is None and path.read_text() == f'{os.getpid()} planted {2**40}\n'


# ---------- bounded memory ----------

class _Endless(io.RawIOBase):
    "A stream of `n` zero bytes after `head`, counting what was read from it."
    def __init__(self, head: bytes, n: int): self.head, self.n, self.pos = head, n, 0
    def readable(self): return True
    def readinto(self, b):
        k = min(len(b), len(self.head) + self.n - self.pos)
        if k <= 0: return 0
        if self.pos < len(self.head):
            k = min(k, len(self.head) - self.pos); b[:k] = self.head[self.pos:self.pos + k]
        else: b[:k] = bytes(k)
        self.pos += k; return k


def _header_with_size(field: bytes) -> bytes:
    h = bytearray(_tar([('a', {'jpg': b'x' * 10})])[:512]); h[124:136] = field.ljust(12, b'\0'); h[148:156] = b' ' * 8
    h[148:156] = b'%06o\0 ' % sum(h); return bytes(h)


def test_tar_size_minus_one_fails_fast(tmp_path):
    s = _Endless(_header_with_size(b'-1'), 64 << 20)  # 64 MiB behind a header claiming size -1
    with pytest.raises(shard_io.ShardError, match=r"x.tar: the member at byte 0 has size field b'-1' \(not a size\)"):
        list(shard_io.iter_tar(io.BufferedReader(s, 1 << 16), 'x.tar'))
    assert s.pos < 1 << 20  # the stream was not swallowed


def test_tar_size_two_to_the_sixty_is_a_named_error(tmp_path):
    p = tmp_path / 'huge.tar'
    p.write_bytes(_header_with_size(b'\x80' + (1 << 60).to_bytes(11, 'big')) + bytes(2048))
    with pytest.raises(shard_io.ShardError, match=r'huge.tar: .*1,152,921,504,606,846,976 bytes, over the limit'):
        _read_all(str(p))


def test_info_json_read_up_to_a_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(wds, 'MAX_JSON_BYTES', 4096, raising=False)  # load_info reads it where it is defined
    root = tmp_path / 'ds'; root.mkdir(); _good_shard(root / 'train-000000.tar')
    _info(root, ['train-000000.tar'], padding=' ' * 8192)
    with pytest.raises(ValueError, match=r'_info.json is over 4,096 bytes \(timmdata.readers.MAX_JSON_BYTES\)'):
        _read_all(root)


def test_load_resized_keeps_the_pixel_limit():
    from timmdata.store.builder import load_resized
    from timmdata.pixels.decode import ImageDecodeError, set_max_image_pixels
    png = io.BytesIO(); Image.new('L', (400, 300)).save(png, 'PNG')  # 1 KB of file, 120,000 pixels
    old = set_max_image_pixels(100_000)
    try:
        with pytest.raises(ImageDecodeError, match='400x300 = 120,000 pixels, over the limit of 100,000'):
            load_resized(png.getvalue())
    finally: set_max_image_pixels(old)


def test_store_source_files_gzip_bomb_is_refused(tmp_path):
    from timmdata.store.builder import build_cache
    from timmdata.store.format import StoreDamagedError, check_store_source
    src = make_sample_dataset(tmp_path / 'src', n_train=2, n_val=0, classes=['a'], size=(16, 12), num_workers=0) / 'train'
    m = build_cache(src, tmp_path / 'store', max_size=0, num_workers=0, progress=False)
    with gzip.open(tmp_path / 'store' / 'source_files.json.gz', 'wb', compresslevel=1) as g:
        for _ in range(64): g.write(b' ' * (1 << 20))  # 64 MiB of spaces in ~64 KiB
    m['source']['extra'] = 1  # the check reads the file list first
    with pytest.raises(StoreDamagedError, match='source_files.json.gz decompresses to over'):
        check_store_source(tmp_path / 'store', m)


def test_store_source_walk_is_bounded_by_the_manifest(tmp_path, monkeypatch):
    from timmdata.store.builder import build_cache
    from timmdata.store.format import StaleStoreError, check_store_source
    src = make_sample_dataset(tmp_path / 'src', n_train=2, n_val=0, classes=['a'], size=(16, 12), num_workers=0) / 'train'
    m = build_cache(src, tmp_path / 'store', max_size=0, num_workers=0, progress=False)
    big = tmp_path / 'elsewhere'
    for k in range(40): (big / f'd{k}').mkdir(parents=True); (big / f'd{k}' / 'f').write_bytes(b'x')
    m['source']['root'] = str(big)  # a manifest naming a folder of the machine as its source
    opened, real = [], os.scandir
    monkeypatch.setattr(os, 'scandir', lambda p: (opened.append(p), real(p))[1])
    with pytest.raises(StaleStoreError): check_store_source(tmp_path / 'store', m)
    assert len(opened) <= m['source']['num_files'] + 2, len(opened)  # stopped past the files the manifest counts


# ---------- symbolic links ----------

def _list_folder(root: str, out: str):
    from timmdata.readers import FolderReader
    try:
        said = FolderReader(root).filenames()
    except OSError as e:
        said = f'{type(e).__name__}: {e}'
    Path(out).write_text(json.dumps(said))


def test_folder_symlink_loop_finishes(tmp_path):
    "Two links to `..`: timm's os.walk(followlinks=True) never ends; the walk ends at once with an error naming a link."
    import multiprocessing as mp
    root = tmp_path / 'ds'; (root / 'a').mkdir(parents=True); (root / 'a' / 'x.jpg').write_bytes(_jpeg(0))
    os.symlink('..', root / 'a' / 'l1'); os.symlink('..', root / 'a' / 'l2')  # timm's os.walk(followlinks=True) never ends
    p = mp.get_context('fork').Process(target=_list_folder, args=(str(root), str(tmp_path / 'out.json')))
    p.start(); p.join(10)
    if p.is_alive():
        p.kill(); p.join(); pytest.fail('FolderReader did not finish a walk with two links to ..')
    said = json.loads((tmp_path / 'out.json').read_text())
    assert p.exitcode == 0 and said.startswith('FolderWalkError') and "the link 'a/l" in said and 'a loop' in said, said


def test_folder_symlink_out_of_root_is_read_or_refused_when_strict(tmp_path):
    "A folder on the user's disk is the user's layout: links out of it are read as timm reads them; the strict walk (follow_links=False) refuses them by name, never a quietly shorter list."
    from timmdata.core.untrusted import UnsafeFileError
    from timmdata.readers import FolderReader
    out = tmp_path / 'outside'; out.mkdir(); (out / 'secret.jpg').write_bytes(_jpeg(1))
    root = tmp_path / 'ds'; (root / 'a').mkdir(parents=True); (root / 'a' / 'x.jpg').write_bytes(_jpeg(0))
    os.symlink(out, root / 'b'); os.symlink(out / 'secret.jpg', root / 'a' / 'y.jpg')
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        r = FolderReader(root)
    assert r.filenames() == ['a/x.jpg', 'a/y.jpg', 'b/secret.jpg'] and r.classes == ['a', 'b']
    with pytest.raises(UnsafeFileError, match=r"is a symbolic link that leads out of the dataset root .*2 such link.*follow_links=False"):
        FolderReader(root, follow_links=False)



def test_tar_links_out_of_the_folder_are_not_read(tmp_path):
    "A per-class tar or a shard in a dataset's folder that is a link to a tar elsewhere is skipped, never opened."
    from timmdata.readers import TarReader
    out = tmp_path / 'outside'; out.mkdir()
    _good_shard(out / 'secret-000000.tar', labels=(0, 1))
    root = tmp_path / 'ds'; root.mkdir()
    _good_shard(root / 'train-000000.tar', labels=(0, 1, 2, 3))
    os.symlink(out / 'secret-000000.tar', root / 'train-000001.tar')
    assert shard_io.shard_list(str(root)) == [str(root / 'train-000000.tar')]
    pc = tmp_path / 'per_class'; (pc / 'cat').mkdir(parents=True)
    (pc / 'cat' / 'x.jpg').write_bytes(_jpeg(0))
    with tarfile.open(pc / 'cat.tar', 'w') as tf: tf.add(pc / 'cat' / 'x.jpg', arcname='x.jpg')
    with tarfile.open(out / 'dog.tar', 'w') as tf: tf.add(pc / 'cat' / 'x.jpg', arcname='y.jpg')
    os.symlink(out / 'dog.tar', pc / 'dog.tar')
    with pytest.warns(UserWarning, match=r"skipped 1 \.tar files of .* that are links out of it"):
        r = TarReader(pc)
    assert r.filenames() == ['cat.tar/x.jpg'] and r.classes == ['cat']


# ---------- the rest ----------

def test_cls_labels_are_range_checked(tmp_path):
    root = tmp_path / 'ds'; root.mkdir()
    _good_shard(root / 'train-000000.tar', labels=(0, -5, 1, 2))
    _info(root, ['train-000000.tar'])
    with pytest.raises(ValueError, match=r"sample 's1' of shard .*train-000000.tar: target -5 is out of range"):
        _read_all(root)
    _good_shard(root / 'train-000000.tar', labels=(0, 1, 10, 2))
    _info(root, ['train-000000.tar'], num_classes=10)
    with pytest.raises(ValueError, match=r"sample 's2' .*target 10 is out of range \(0..9: _info.json states num_classes 10\)"):
        _read_all(root)
    _good_shard(root / 'train-000000.tar', labels=(0, 1, 2**70, 2))  # beyond int64: torch's collate would fail, unnamed
    _info(root, ['train-000000.tar'])
    with pytest.raises(ValueError, match=r"sample 's2' .*out of range"):
        _read_all(root)


def test_check_prints_names_escaped(tmp_path, capsys):
    from timmdata.tools.check import check_main
    root = tmp_path / 'ds'; (root / 'a').mkdir(parents=True)
    (root / 'a' / 'ok.jpg').write_bytes(_jpeg(0))
    (root / 'a' / 'x\x1b[2J\x1b]0;owned\x07.jpg').write_bytes(b'not an image')
    check_main([str(root), '--workers', '0', '--no-progress'])
    out = capsys.readouterr().out
    assert '\x1b' not in out and '\x07' not in out and 'x\\x1b[2J\\x1b]0;owned\\x07.jpg' in out


def test_per_class_tar_error_names_the_file(tmp_path):
    from timmdata.readers import TarReader
    d = tmp_path / 'tars'; d.mkdir()
    _good_shard(d / 'a.tar'); whole = _good_shard(d / 'b.tar').read_bytes()
    with tarfile.open(d / 'b.tar') as tf: second = tf.getmembers()[2].offset_data
    (d / 'b.tar').write_bytes(whole[:second + 100])  # cut inside the second image's data
    with pytest.raises(ValueError, match=r"b.tar' is not an uncompressed tar, or is damaged or truncated \(unexpected end of data\)"):
        TarReader(d)
