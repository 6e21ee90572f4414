"""Hostile datasets, part two, files and the index (issue 39): what timmdata writes beside a dataset or in a cache is
created exclusively, never through a planted link; the shard index shipped with a dataset is read as a regular file,
size-capped before reading, with the parse's memory bounded; `scan_shard` walks tar headers in linear time. Each test
plays one attack and checks the harm does not happen; the fuzzers feed mutated indexes and tar headers."""
import io, json, os, random, stat, subprocess, sys, tarfile, time, tracemalloc, warnings
from pathlib import Path
import pytest
from timmdata.index import shard_index as si
from timmdata.tools.sample_data import make_sample_dataset
from timmdata.sources.shard_io import ShardError, iter_tar
from timmdata.tools.shards import write_shards

VICTIM = b'the user\'s own file: never truncated nor written\n'


@pytest.fixture(scope='module')
def made(tmp_path_factory):
    "Shards as `timmdata shards` writes them: a train split of 3 shards and a validation split of 2."
    tmp = tmp_path_factory.mktemp('hostile_files')
    src = make_sample_dataset(tmp / 'src', n_train=3, n_val=2, classes=['a', 'b', 'c'], size=(24, 20))
    write_shards(src, tmp / 'shards', shard_size=4, progress=False)
    return tmp / 'shards'


@pytest.fixture
def shards(made, tmp_path):
    "A fresh copy of the shards (without an index), a victim file beside it and an empty cache folder."
    d = tmp_path / 'ds'
    d.mkdir()
    for f in made.iterdir():
        if f.name != si.INDEX_FILE:
            (d / f.name).write_bytes(f.read_bytes())
    victim = tmp_path / 'victim.txt'
    victim.write_bytes(VICTIM)
    return d, victim


def _tar_paths(d: Path, split='train') -> list:
    info = json.loads((d / '_info.json').read_text())
    return [str(d / f) for f in info['splits'][split]['filenames']]


def _ref_scan(path: str) -> list:
    "The index as the standard library's tarfile reads it (the old `scan_shard`), for shards small and benign."
    from timmdata.sources.wds import group_samples

    members = []
    with tarfile.open(path, 'r:') as tf:
        for m in tf:
            if m.isreg() and not m.issparse():
                members.append((m.name, [m.offset_data, m.size]))
    return [[k, s] for k, s in group_samples(members, path)]


def _plant_tmp_links(d: Path, victim: Path):
    "Links at every temporary name the old writers used (`.<name>.tmp<pid>`) for pids near this one, pointing at the victim."
    for pid in range(max(1, os.getpid() - 50), os.getpid() + 50):
        os.symlink(victim, d / f'.{si.INDEX_FILE}.tmp{pid}')


def _no_links_followed(d: Path, victim: Path):
    assert victim.read_bytes() == VICTIM
    idx = d / si.INDEX_FILE
    assert stat.S_ISREG(os.lstat(idx).st_mode), 'the index is a file of its own, not a link'
    assert idx.read_text().startswith('{"format":"timmdata shard index"')


def test_planted_tmp_links_via_shard_reader(shards):
    d, victim = shards
    _plant_tmp_links(d, victim)
    r = si.ShardReader(d, split='train')
    assert len(r) == 9 and r.scanned == 3
    _no_links_followed(d, victim)


def test_index_planted_as_a_link_via_shard_reader(shards):
    "A shipped `_timmdata_index.json` that is a link to the user's file: never read nor written through."
    d, victim = shards
    os.symlink(victim, d / si.INDEX_FILE)
    with pytest.warns(UserWarning, match='is a symbolic link'):
        r = si.ShardReader(d, split='train')
    assert r.scanned == 3
    _no_links_followed(d, victim)


def test_planted_tmp_links_via_a_global_order_training_stream(shards):
    """The training stream over local shards with no dataset index (shards another tool wrote) builds the member-offset
    index for its global order: the same links, the same victim."""
    from timmdata.streams.streaming import IterableImageDataset
    from timmdata.index.dataset_index import DATASET_INDEX_FILE

    d, victim = shards
    (d / DATASET_INDEX_FILE).unlink()  # `write_shards` writes one (issue 44): without it, the per-folder index is built
    _plant_tmp_links(d, victim)
    ds = IterableImageDataset(str(d), reader='wds/h', split='train', is_training=True, batch_size=2, order='global')
    next(iter(ds))
    assert ds.order == 'global'
    _no_links_followed(d, victim)


_CHILD = """
import sys, time, warnings
from timmdata.index import shard_index as si
t = time.monotonic()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter('always')
    per_shard, scanned = si.load_index(sys.argv[1:])
print(scanned, round(time.monotonic() - t, 3), '|'.join(str(x.message) for x in w))
"""


def _load_in_child(paths: list, timeout: float = 60) -> str:
    "load_index in a child process: a hang is a failed test after `timeout` seconds, not a hung suite."
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(Path(si.__file__).parents[1]), os.environ.get('PYTHONPATH', '')])}
    try:
        out = subprocess.run([sys.executable, '-c', _CHILD, *paths], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f'load_index did not return within {timeout} s (it waits on the index file)')
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_index_a_fifo_does_not_hang(shards):
    d, _ = shards
    os.mkfifo(d / si.INDEX_FILE)
    out = _load_in_child(_tar_paths(d))
    assert out.startswith('3 ') and 'is not a regular file' in out and si.INDEX_FILE in out
    assert stat.S_ISREG(os.lstat(d / si.INDEX_FILE).st_mode)  # replaced by the index built


def _peak(fn) -> tuple:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_index_a_link_to_dev_zero_is_not_read(shards):
    "The old reader read /dev/zero up to its 1 GiB cap (1 GiB of memory) before refusing it."
    if not os.path.exists('/dev/zero'):
        pytest.skip('no /dev/zero')
    d, _ = shards
    os.symlink('/dev/zero', d / si.INDEX_FILE)
    with pytest.warns(UserWarning, match='is a symbolic link'):
        (_, n), peak = _peak(lambda: si.load_index(_tar_paths(d)))
    assert n == 3 and peak < 32 << 20, f'{peak:,} bytes'


def test_oversized_index_is_refused_before_reading(shards):
    "An index over `MAX_INDEX_BYTES` (a sparse file: no disk used) is refused by its size, nothing read."
    d, _ = shards
    with open(d / si.INDEX_FILE, 'wb') as f:
        f.truncate(si.MAX_INDEX_BYTES + 1)
    with pytest.warns(UserWarning, match=f'shard index .*{si.INDEX_FILE}.* is {si.MAX_INDEX_BYTES + 1:,} bytes, over'):
        (_, n), peak = _peak(lambda: si.load_index(_tar_paths(d)))
    assert n == 3 and peak < 32 << 20, f'{peak:,} bytes'


def _big_index(path: Path, samples_per_shard: int = 4000, shards: int = 10) -> int:
    "A well-formed index of `shards` entries (keys and offsets as `timmdata shards` makes them); its size in bytes."
    lines = {}
    for s in range(shards):
        smp = [[f'{i:08d}', {'jpg': [1024 * 3 * i + 512, 700], 'cls': [1024 * 3 * i + 2048, 1]}] for i in range(samples_per_shard)]
        name = f'train-{s:06d}.tar'
        lines[name] = si._entry_line(name, 1024 * 3 * samples_per_shard + 1024, 1700000000000000000 + s, smp)
    si._write_index(str(path), lines)
    return path.stat().st_size


@pytest.mark.parametrize('kind', ['index', 'nested lists', 'numbers'])
def test_index_parse_memory_is_bounded(tmp_path, kind):
    """Reading an index of N bytes costs at most 2 N + 1 MiB (measured ~1.1 N): the file is read line by line, each line
    matched against the one shape an entry has before it is parsed, kept as one string until its shard is asked for.
    The old nested-JSON index cost ~20 N through `json.loads` (the issue: 9 MB -> 200 MB), and so did any JSON planted."""
    p = tmp_path / si.INDEX_FILE
    if kind == 'index':
        n = _big_index(p)
    else:
        item = '[],' if kind == 'nested lists' else '0,'
        body = '{"version":2,"shards":[' + item * (4_000_000 // len(item)) + '0]}'
        p.write_text(si._HEAD + '\n' + body if kind == 'numbers' else body)
        n = p.stat().st_size
    lines, peak = _peak(lambda: si._read_index(str(p)))
    assert len(lines) == (10 if kind == 'index' else 0)
    assert peak < 2 * n + (1 << 20), f'{kind}: parsing {n:,} bytes peaked at {peak:,} bytes ({peak / n:.1f} N)'


def test_index_entry_decoded_within_its_shard(tmp_path):
    "An entry is decoded only for its shard, and only when every member lies in it, in tar order, 512 bytes apart: its samples can never outnumber what a scan of that shard finds."
    p = tmp_path / si.INDEX_FILE
    _big_index(p, samples_per_shard=1000, shards=1)
    line = si._read_index(str(p))['train-000000.tar']
    size, stamp = 1024 * 3 * 1000 + 1024, 1700000000000000000
    assert len(si._entry_samples(line, size, stamp)) == 1000
    assert si._entry_samples(line, size - 1, stamp) is None  # another file
    assert si._entry_samples(line, size, stamp + 1) is None


def _pax_bomb(path: Path, n: int = 1 << 20):
    "A tar whose first member is a pax header of `n` digits: CPython's tarfile before 3.11.10 / 3.12.6 scans it in O(n^2) (CVE-2024-6232)."
    body = b'1' * n
    h = tarfile.TarInfo('././@PaxHeader')
    h.type, h.size = tarfile.XHDTYPE, len(body)
    buf = h.tobuf(tarfile.USTAR_FORMAT) + body + bytes(-len(body) % 512)
    f = tarfile.TarInfo('a.jpg')
    f.size = 3
    buf += f.tobuf(tarfile.USTAR_FORMAT) + b'jpg' + bytes(509) + bytes(1024)
    path.write_bytes(buf)


def test_scan_of_a_quadratic_pax_header_is_linear(tmp_path):
    "A 1 MB pax header: the old scan (tarfile) took about half an hour; this one well under 10 s (run in a child so the old code fails instead of hanging)."
    p = tmp_path / 'bomb-000000.tar'
    _pax_bomb(p)
    code = f'import time; from timmdata.index.shard_index import scan_shard; t = time.monotonic(); r = scan_shard({str(p)!r}); print(r, time.monotonic() - t)'
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(Path(si.__file__).parents[1]), os.environ.get('PYTHONPATH', '')])}
    try:
        out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail('scan_shard of a 1 MB pax header did not finish within 60 s')
    assert out.returncode == 0, out.stderr
    rows, secs = out.stdout.rsplit(' ', 1)
    assert rows == "[['a', {'jpg': [" + str(512 + (1 << 20) + 512) + ", 3]}]]" and float(secs) < 10
    assert [n for n, _ in iter_tar(io.BytesIO(p.read_bytes()))] == ['a.jpg']  # the stream agrees


def test_scan_gives_the_same_index_as_tarfile(made, tmp_path):
    "On shards as `timmdata shards` writes them and on the awkward cases (GNU and pax long names, a folder, a meta member, non-ASCII names), the index is exactly the one tarfile's walk gave."
    paths = _tar_paths(made) + _tar_paths(made, 'validation')
    long = 'd/' + 'x' * 150
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT):
        p = tmp_path / f'odd-{fmt}.tar'
        items = [('__meta__.json', b'{}'), ('dir', None), ('s2.webp', b'w' * 700), ('s2.json', b'{"cls": 3}'), ('noext', b'z'),
                 ('\u00e9t\u00e9.jpg', b'x' * 3), ('\u00e9t\u00e9.cls', b'1')]
        items += [] if fmt == tarfile.USTAR_FORMAT else [(f'{long}.png', b'p' * 600), (f'{long}.cls', b'1')]
        with tarfile.open(p, 'w', format=fmt) as tf:
            for name, data in items:
                ti = tarfile.TarInfo(name)
                if data is None:
                    ti.type = tarfile.DIRTYPE
                    tf.addfile(ti)
                else:
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
        paths.append(str(p))
    for p in paths:
        assert si.scan_shard(p) == _ref_scan(p), p


def _in_child(code: str, timeout: float = 60) -> str:
    "`code` run by a child Python on this tree: a hang is a failed test after `timeout` seconds, not a hung suite."
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(Path(si.__file__).parents[1]), os.environ.get('PYTHONPATH', '')])}
    try:
        out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f'no answer within {timeout} s')
    return out.stdout + out.stderr


def test_a_fifo_shard_is_refused_not_waited_on(tmp_path):
    p = tmp_path / 'fifo-000000.tar'
    os.mkfifo(p)
    out = _in_child(f'from timmdata.index.shard_index import scan_shard; scan_shard({str(p)!r})')
    assert 'ShardError' in out and 'fifo-000000.tar is not a regular file' in out, out


def test_a_fifo_info_json_or_shard_is_refused_not_waited_on(tmp_path):
    "A FIFO named `_info.json`, or named like a shard, in a dataset folder: `load_info` and `open_shard` raise at once, naming it (the open blocked for ever before)."
    os.mkfifo(tmp_path / '_info.json')
    os.mkfifo(tmp_path / 'train-000000.tar')
    out = _in_child(
        'from timmdata.sources.shard_io import open_shard\nfrom timmdata.sources.wds import load_info\n'
        'for f in (lambda: load_info(%r), lambda: open_shard(%r)):\n'
        '    try:\n'
        '        f(); print("no error")\n'
        '    except OSError as e:\n'
        '        print(type(e).__name__, e)\n' % (str(tmp_path), str(tmp_path / 'train-000000.tar'))
    )
    assert out.count('not a regular file') == 2 and '_info.json' in out and 'train-000000.tar' in out, out


def test_a_linked_info_json_and_shard_are_still_read(tmp_path):
    "Links the user's own dataset holds (a Hugging Face snapshot's files are links into its blobs) are followed for `_info.json` and shards."
    from timmdata.sources.shard_io import open_shard
    from timmdata.sources.wds import load_info

    blobs = tmp_path / 'blobs'
    blobs.mkdir()
    (blobs / 'a').write_text(json.dumps({'splits': {'train': {'num_samples': 0, 'filenames': []}}}))
    (blobs / 'b').write_bytes(b'x' * 1024)
    ds = tmp_path / 'ds'
    ds.mkdir()
    os.symlink(blobs / 'a', ds / '_info.json')
    os.symlink(blobs / 'b', ds / 'train-000000.tar')
    assert load_info(str(ds))['splits']['train']['num_samples'] == 0
    with open_shard(str(ds / 'train-000000.tar')) as f:
        assert f.read() == b'x' * 1024


def test_store_writers_never_follow_a_planted_tmp_link(tmp_path):
    "`store.atomic_file` (the cache builder's and the shards writer's writer): a link at the old temporary name is left alone."
    from timmdata.store.format import atomic_file, read_json, write_json_atomic

    victim = tmp_path / 'victim.txt'
    victim.write_bytes(VICTIM)
    target = tmp_path / 'manifest.json'
    os.symlink(victim, tmp_path / f'.manifest.json.tmp{os.getpid()}')
    write_json_atomic(target, {'a': 1})
    with atomic_file(tmp_path / 'chunk.u8') as f:
        f.write(b'x')
    assert victim.read_bytes() == VICTIM and read_json(target) == {'a': 1}
    os.symlink(victim, tmp_path / 'linked.json')
    with pytest.raises(OSError, match='linked.json.* is a symbolic link'):
        read_json(tmp_path / 'linked.json')


def test_shards_and_store_builders_never_follow_planted_tmp_links(made, tmp_path):
    "`timmdata shards` and `timmdata cache` into a folder holding links at every name the old writers used (`.<file>.tmp<pid>`): the victim unchanged."
    from timmdata.store.builder import build_cache
    from timmdata.store.format import BUILD_STATE, STORE_MANIFEST

    src = make_sample_dataset(tmp_path / 'src', n_train=2, n_val=1, classes=['a', 'b'], size=(24, 20))
    victim = tmp_path / 'victim.txt'
    victim.write_bytes(VICTIM)
    sh, st = tmp_path / 'sh', tmp_path / 'st'
    for d, names in ((sh, ['train-000000.tar', 'train-000001.tar', '_info.json', '_timmdata_shards.json']),
                     (st, [STORE_MANIFEST, BUILD_STATE, 'index.npz', 'filenames.json', 'bad_images.txt', 'source_files.json.gz'])):
        d.mkdir()
        for n in names:
            os.symlink(victim, d / f'.{n}.tmp{os.getpid()}')
    write_shards(src / 'train', sh, shard_size=2, progress=False)
    build_cache(str(src / 'train'), str(st), num_workers=0, progress=False)
    assert victim.read_bytes() == VICTIM
    assert len(si.ShardReader(sh, split='train')) == 4


# ---- the fuzzers ----------------------------------------------------------------------------------------------------

_ALLOWED = (ValueError, OSError)  # the library's named errors: ShardError, UnsafeFileError are OSErrors, FileTooLargeError a ValueError


def _mutate_index(text: str, rng: random.Random) -> bytes:
    lines = text.split('\n')
    entries = [j for j, line in enumerate(lines) if line.startswith('["')]
    k = rng.randrange(12)
    if k == 0:
        return text.encode()[: rng.randrange(len(text))]  # truncated
    if k == 1:  # a byte flipped
        b = bytearray(text.encode())
        b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if k == 2:  # huge or negative numbers in an entry
        j = rng.choice(entries)
        e = json.loads(lines[j].rstrip(','))
        e[rng.choice([1, 2])] = rng.choice([10**30, -(10**18), 2**63, 0, 1.5, None, 'x', [1]])
        lines[j] = json.dumps(e, separators=(',', ':')) + (',' if lines[j].endswith(',') else '')
    elif k == 3:  # wrong types anywhere
        j = rng.choice(entries)
        e = json.loads(lines[j].rstrip(','))
        e[rng.randrange(8)] = rng.choice([None, 1, [], {}, '', 'AAAA', [['k', {'jpg': [512, 1]}]], True])
        lines[j] = json.dumps(e, separators=(',', ':')) + (',' if lines[j].endswith(',') else '')
    elif k == 4:  # deep nesting
        n = rng.choice([100, 10_000, 200_000])
        lines.insert(rng.randrange(1, len(lines)), '[' * n + ']' * n + ',')
    elif k == 5:  # odd encodings
        enc = rng.choice(['utf-16', 'utf-32', 'latin-1'])
        return ('\u00e9' + text).encode(enc)
    elif k == 6:  # base64 payloads swapped or cut
        j = rng.choice(entries)
        e = json.loads(lines[j].rstrip(','))
        a, b = rng.sample([5, 6, 7], 2)
        e[a], e[b] = (e[b], e[a]) if rng.random() < 0.5 else (e[a][: rng.randrange(len(e[a]) + 1)], e[b])
        lines[j] = json.dumps(e, separators=(',', ':')) + (',' if lines[j].endswith(',') else '')
    elif k == 7:  # an old-format index, or another JSON
        return json.dumps(rng.choice([{'version': 1, 'shards': {}}, [], {'version': 2}, 'x' * 1000])).encode()
    elif k == 8:  # duplicated or dropped lines
        j = rng.choice(entries)
        lines.insert(j, lines[j]) if rng.random() < 0.5 else lines.pop(j)
    elif k == 9:  # odd names: a path, a control character, a surrogate
        j = rng.choice(entries)
        e = json.loads(lines[j].rstrip(','))
        e[0] = rng.choice(['../../victim.txt', '/etc/passwd', '\x1b[2J', '\udcff', e[0] + '\x00', ''])
        lines[j] = json.dumps(e, separators=(',', ':')) + (',' if lines[j].endswith(',') else '')
    elif k == 10:  # NUL bytes, CR LF
        return text.replace('\n', rng.choice(['\r\n', '\0', '\n\n'])).encode()
    else:  # the keys string changed: a lying but well formed index
        j = rng.choice(entries)
        e = json.loads(lines[j].rstrip(','))
        e[4] = ''.join(rng.sample(e[4], len(e[4])))
        lines[j] = json.dumps(e, separators=(',', ':')) + (',' if lines[j].endswith(',') else '')
    return '\n'.join(lines).encode()


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None) for p in sorted(root.rglob('*'))}


def _fuzz_index(shards, cases: int, seed: int):
    d, victim = shards
    paths = _tar_paths(d)
    si.load_index(paths)
    good, truth = (d / si.INDEX_FILE).read_text(), [si.scan_shard(p) for p in paths]
    outside = _snapshot(d.parent)
    rng = random.Random(seed)
    for case in range(cases):
        (d / si.INDEX_FILE).write_bytes(_mutate_index(good, rng))
        t = time.monotonic()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                got, _ = si.load_index(paths)
        except MemoryError:
            pytest.fail(f'case {case}: MemoryError')
        except _ALLOWED as e:
            got = None
            assert si.INDEX_FILE in str(e) or 'shard' in str(e), f'case {case}: {e!r} names no file'
        assert time.monotonic() - t < 10, f'case {case}: {time.monotonic() - t:.1f} s'
        if got is not None and got != truth:  # a well formed index that lies: every read of a lying member is refused
            with pytest.raises(ShardError, match='the shard index does not match'):
                for p, samples in zip(paths, got):
                    data = Path(p).read_bytes()
                    for key, members in samples:
                        for ext, (off, n) in members.items():
                            si._checked(data[off - 512 : off + n], n, f'{key}.{ext}', p)
        now = _snapshot(d.parent)
        changed = {k for k in set(now) | set(outside) if now.get(k) != outside.get(k)}
        assert changed <= {f'ds/{si.INDEX_FILE}'}, f'case {case}: wrote {sorted(changed)}'
        assert victim.read_bytes() == VICTIM


def test_fuzz_index(shards):
    _fuzz_index(shards, 150, 0)


@pytest.mark.slow
def test_fuzz_index_slow(shards):
    _fuzz_index(shards, 3000, 1)


def _mutate_tar(tar: bytes, rng: random.Random) -> bytes:
    b = bytearray(tar)
    k = rng.randrange(8)
    h = 512 * rng.randrange(min(6, len(b) // 512))  # a header or a data block near the start
    if k == 0:
        return bytes(b[: rng.randrange(len(b))])
    if k == 1:
        for _ in range(rng.randrange(1, 8)):
            b[h + rng.randrange(512)] = rng.randrange(256)
    elif k == 2:  # size fields: huge, negative, base-256, junk
        b[h + 124 : h + 136] = rng.choice([b'77777777777\0', b'-1'.ljust(12, b'\0'), b'\x80' + (1 << 80).to_bytes(11, 'big'), b'\xff' * 12, b'1_0'.ljust(12, b'\0'), b' ' * 12])
    elif k == 3:  # type flags
        b[h + 156] = rng.choice(b'0\x0012345678LKxXgSV')
    if k in (2, 3) or rng.random() < 0.5:  # a checksum that holds, so the header is parsed further
        b[h + 148 : h + 156] = b' ' * 8
        b[h + 148 : h + 156] = b'%06o\0 ' % sum(b[h : h + 512])
    if k == 4:  # a pax header of odd records in front
        body = rng.choice([b'1' * rng.randrange(1, 200_000), b'30 path=' + os.urandom(20) + b'\n', b'999999999999 path=x\n', b'\n' * 5000, os.urandom(3000)])
        x = tarfile.TarInfo('././@PaxHeader')
        x.type, x.size = tarfile.XHDTYPE, len(body)
        return x.tobuf(tarfile.USTAR_FORMAT) + body + bytes(-len(body) % 512) + bytes(b)
    if k == 5:  # a GNU long name of odd bytes in front
        body = os.urandom(rng.randrange(1, 5000))
        x = tarfile.TarInfo('././@LongLink')
        x.type, x.size = tarfile.GNUTYPE_LONGNAME, len(body)
        return x.tobuf(tarfile.GNU_FORMAT) + body + bytes(-len(body) % 512) + bytes(b)
    return bytes(b)


def _fuzz_tar(made, tmp_path, cases: int, seed: int):
    good = Path(_tar_paths(made)[0]).read_bytes()
    rng = random.Random(seed)
    p = tmp_path / 'fz-000000.tar'
    for case in range(cases):
        p.write_bytes(_mutate_tar(good, rng))
        for fn in (lambda: si.scan_shard(str(p)), lambda: list(iter_tar(open(p, 'rb'), str(p)))):
            t = time.monotonic()
            try:
                fn()
            except MemoryError:
                pytest.fail(f'case {case}: MemoryError')
            except ShardError as e:
                assert 'fz-000000.tar' in str(e), f'case {case}: {e!r} names no shard'
            except ValueError as e:  # group_samples: a member twice in a sample, named
                assert 'fz-000000.tar' in str(e), f'case {case}: {e!r} names no shard'
            assert time.monotonic() - t < 10, f'case {case}: {time.monotonic() - t:.1f} s'
    assert sorted(os.listdir(tmp_path)) == ['fz-000000.tar']


def test_fuzz_tar_headers(made, tmp_path):
    _fuzz_tar(made, tmp_path, 200, 0)


@pytest.mark.slow
def test_fuzz_tar_headers_slow(made, tmp_path):
    _fuzz_tar(made, tmp_path, 3000, 1)
