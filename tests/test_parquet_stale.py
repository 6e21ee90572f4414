"""A Parquet index that knows its files (nbs/parquet/26cd_parquet_index.ipynb, nbs/parquet/26d_source.ipynb): a file
written again after it was indexed, at the same size (its rows in another order, or other labels), is named with the
command that writes the index again, on disk and over HTTP (each image's mark, the file's ETag or Last-Modified); it is
never read at the old offsets, where its rows would be other rows' images under the index's labels."""

import http.server, json, os, random
import pytest

pa = pytest.importorskip('pyarrow')
from timmdata.dataset_factory import create_dataset
from timmdata.parquet.source import PARQUET_INDEX_FILE, ParquetSource, write_parquet_index, write_sample_parquet
from timmdata.sources.shard_io import ShardError
from timmdata.tools.sample_data import make_sample_dataset
from _helpers import http_folder

CLASSES = ['cat', 'dog']
FILE = 'data/train-00001-of-00002.parquet'  # the file written again


@pytest.fixture(scope='module')
def samples(tmp_path_factory):
    "40 JPEGs of the project's generator (20 a class), the classes alternating: (image bytes, label)."
    root = make_sample_dataset(
        tmp_path_factory.mktemp('photos'), n_train=20, n_val=0, classes=CLASSES, size=(96, 64), num_workers=0
    )
    by_class = [sorted((root / 'train' / c).glob('*.JPEG')) for c in CLASSES]
    return [(f.read_bytes(), y) for pair in zip(*by_class) for y, f in enumerate(pair)]


def _write(folder, rows):
    "Two files of 20 rows, each one row group (its statistics then the same for any order of its rows)."
    return write_sample_parquet(folder, rows, CLASSES, files=2, row_group_size=20)


def _footer(path) -> bytes:
    b = open(path, 'rb').read()
    return b[-8 - int.from_bytes(b[-8:-4], 'little') :]


def _indexed(folder, samples):
    "`folder` with the 40 samples in two files, indexed; the second file's path."
    _write(folder, samples)
    write_parquet_index(folder)
    return folder / FILE


def _rewrite(folder, rows, in_place=False):
    "The second file written again with `rows` (the first as it was): a new file in its place, or its bytes written over in place (`in_place`: a handle open on it reads the new ones); its size, footer and modification time before."
    path = folder / FILE
    before = (path.stat().st_size, _footer(path), path.stat().st_mtime)
    new = _write(folder.parent / (folder.name + '_new'), rows)[1]
    if in_place:
        with open(path, 'r+b') as f:
            f.write(open(new, 'rb').read())
    else:
        os.replace(new, path)
    os.utime(path, (before[2] + 10, before[2] + 10))  # a later time, as a rewrite gives (whole seconds: Last-Modified)
    return before


def _moved_in_class(rows):
    "The rows in another order, each row's label where it was: each class's images reversed among its places."
    out = list(rows)
    for y in range(len(CLASSES)):
        at = [i for i, (_, lab) in enumerate(rows) if lab == y]
        for i, j in zip(at, reversed(at)):
            out[i] = rows[j]
    return out


def _all(src):
    r = src.by_position()
    return [r.read(s, m)[1:] for s in range(len(src.shards)) for m in range(src.shard_lengths[s])]


def test_same_rows_in_another_order_at_the_same_size(tmp_path, samples):
    "The issue's case: a file written again with its rows shuffled, the same size (and here the same footer): named when it is opened, with the command, never read as other rows."
    root = tmp_path / 'hub'
    path = _indexed(root, samples)
    assert _all(ParquetSource(root, 'train')) == samples
    second = samples[20:]
    shuffled = second[:]
    random.Random(0).shuffle(shuffled)
    size, footer, _ = _rewrite(root, samples[:20] + shuffled)
    assert path.stat().st_size == size and _footer(path) == footer  # neither the size nor the footer tells
    wrong = sum(a != b for a, b in zip(shuffled, second))
    assert wrong > 10, wrong  # the rows that an index of sizes only would read as others
    for read in (
        lambda: _all(ParquetSource(root, 'train')),
        lambda: [y for _, y in create_dataset('parquet/x', root=str(root), split='train')],
    ):
        with pytest.raises(ShardError) as e:
            read()
        msg = str(e.value)
        assert f'Parquet file {root / FILE} changed after it was indexed' in msg, msg
        assert f'`timmdata index {root.resolve()}`' in msg, msg
    write_parquet_index(root)  # as the error says: then every row is read as it is now
    assert _all(ParquetSource(root, 'train')) == samples[:20] + shuffled


def test_rows_moved_inside_their_class(tmp_path, samples):
    "Rows moved with the labels where they were: size, footer and label column the same; each image's mark tells, at its read (a fresh reader; one that opened the file before it was written over in place; the stream)."
    root = tmp_path / 'hub'
    _indexed(root, samples)
    early = ParquetSource(root, 'train').by_position()
    assert early.read(1, 0)[1:] == samples[20]  # the file opened and checked before it is written again
    moved = _moved_in_class(samples[20:])
    size, footer, _ = _rewrite(root, samples[:20] + moved, in_place=True)
    assert ((root / FILE).stat().st_size, _footer(root / FILE)) == (size, footer)
    assert [y for _, y in moved] == [y for _, y in samples[20:]]
    for r in (ParquetSource(root, 'train').by_position(), early):
        assert r.read(0, 3)[1:] == samples[3]  # the other file: as indexed
        with pytest.raises(ShardError, match=f'{FILE} changed after it was indexed: row 1 holds another image'):
            r.read(1, 1)
    # a new file in its place: a reader that opened the old one reads it still (the rows indexed), a new one is told
    _indexed(root, samples)
    early = ParquetSource(root, 'train').by_position()
    assert early.read(1, 0)[1:] == samples[20]
    _rewrite(root, samples[:20] + moved)
    assert early.read(1, 1)[1:] == samples[21]
    with pytest.raises(ShardError, match='row 1 holds another image'):
        ParquetSource(root, 'train').by_position().read(1, 1)
    ds = create_dataset('parquet/x', root=str(root), split='train', is_training=True, batch_size=8)
    with pytest.raises(ShardError, match='holds another image than the one indexed'):
        list(ds)


def test_labels_changed(tmp_path, samples):
    "The same images in the same places, other labels (a dataset relabeled): the label column's digest tells when the file is opened."
    root = tmp_path / 'hub'
    _indexed(root, samples)
    size, _, _ = _rewrite(root, samples[:20] + [(img, 1 - y) for img, y in samples[20:]])
    assert (root / FILE).stat().st_size == size
    with pytest.raises(ShardError, match=f'{FILE} changed after it was indexed: its labels'):
        _all(ParquetSource(root, 'train'))


def test_index_of_version_1_refused(tmp_path, samples):
    "An index of an earlier timmdata (sizes only) is refused with the command that writes it again; nothing is read by it."
    root = tmp_path / 'hub'
    _indexed(root, samples)
    idx = root / PARQUET_INDEX_FILE
    line, _, body = idx.read_bytes().partition(b'\n')
    head = json.loads(line) | {'version': 1}
    head['files'] = [e[:4] for e in head['files']]
    idx.write_bytes(json.dumps(head).encode() + b'\n' + body[: len(body) * 6 // 7])
    with pytest.raises(ShardError, match=r'version 1\).*`timmdata index '):
        ParquetSource(root, 'train')
    assert _all(ParquetSource(root, 'train', use_index=False)) == samples  # without it: by the footers


class _Tagged(http.server.SimpleHTTPRequestHandler):
    "Ranged GETs on kept connections, each answer with the file's ETag and Last-Modified (of its size and time), as a web server or object store gives them; `tags` says which."

    protocol_version, tags = 'HTTP/1.1', ('ETag', 'Last-Modified')

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            return super().do_GET()
        st, rng = os.stat(path), self.headers.get('Range')
        size = st.st_size
        a, b = (0, size - 1) if not rng else rng.split('=', 1)[1].split('-')
        a, b = (max(0, size - int(b)), size - 1) if a == '' else (int(a), min(int(b), size - 1))
        with open(path, 'rb') as f:
            f.seek(a)
            data = f.read(b + 1 - a)
        self.send_response(206 if rng else 200)
        self.send_header('Content-Length', str(len(data)))
        if rng:
            self.send_header('Content-Range', f'bytes {a}-{a + len(data) - 1}/{size}')
        if 'ETag' in self.tags:
            self.send_header('ETag', f'"{st.st_mtime_ns:x}-{size:x}"')
        if 'Last-Modified' in self.tags:
            self.send_header('Last-Modified', self.date_time_string(st.st_mtime))
        self.end_headers()
        self.wfile.write(data)


class _LastModified(_Tagged):
    tags = ('Last-Modified',)


@pytest.mark.parametrize('handler', [_Tagged, _LastModified])
def test_over_http(tmp_path, samples, handler):
    "Over HTTP: a file replaced while a process reads it is named at its next answer (its ETag, else Last-Modified, changed); a process that starts after, by each image's mark (one read at a time, and reads sent together)."
    root = tmp_path / 'hub'
    _indexed(root, samples)
    with http_folder(root, handler) as url:
        r = ParquetSource(url, 'train').by_position()
        assert r.read(1, 0)[1:] == samples[20]
        _rewrite(root, samples[:20] + _moved_in_class(samples[20:]))
        with pytest.raises(ShardError) as e:
            r.read(1, 1)
        msg = str(e.value)
        assert f'{FILE} changed while it was read: its ETag or Last-Modified was' in msg, msg
        assert 'write the index again where the files are (`timmdata index FOLDER`) and upload it' in msg, msg
        fresh = ParquetSource(url, 'train').by_position()
        with pytest.raises(ShardError, match=f'{FILE} changed after it was indexed: row 1 holds another image'):
            fresh.read(1, 1)
        with pytest.raises(ShardError, match='holds another image than the one indexed'):
            list(ParquetSource(url, 'train').by_position()._reads([1] * 20, list(range(20))))
        assert list(fresh._reads([0] * 20, list(range(20)))) == [  # the file not written again: read as indexed
            (f'train-00000-of-00002/{m}', *samples[m]) for m in range(20)
        ]
