"""Parquet files read by position (nbs/parquet/26d_source.ipynb): files written by pyarrow and by Hugging Face `datasets`,
the global order's exact and elastic resume on other ranks and workers, reads over loopback HTTP as ranged requests,
and a fuzzer of hostile files. Ranks are simulated with the dataset's rank/world_size."""

import http.server, io, json, os, random, threading, time
import numpy as np
import pytest, torch
from PIL import Image

pa = pytest.importorskip('pyarrow')
import pyarrow.parquet as pq
from timmdata.dataset_factory import create_dataset
from timmdata.loader import create_loader
from timmdata.sources.shard_io import ShardError
from timmdata.parquet.source import (
    EXACT,
    PAGE,
    PARQUET_INDEX_FILE,
    ParquetError,
    ParquetSource,
    write_parquet_index,
    write_sample_parquet,
)
from _helpers import http_folder

N = 60  # samples; label i is sample i, so a batch's labels say which samples it holds


def _jpeg(i):
    b = io.BytesIO()
    Image.new('RGB', (20, 16), (i * 4 % 256, 30, 60)).save(b, 'JPEG')
    return b.getvalue()


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp('pq')
    write_sample_parquet(
        root, [(_jpeg(i), i) for i in range(N)], [f'c{i}' for i in range(N)], files=6, row_group_size=4
    )
    return root


@pytest.fixture(scope='module')
def indexed(tmp_path_factory):
    root = tmp_path_factory.mktemp('pqi')
    write_sample_parquet(
        root, [(_jpeg(i), i) for i in range(N)], [f'c{i}' for i in range(N)], files=6, row_group_size=4
    )
    write_parquet_index(root)
    return root


def _run(root, world, bs, workers, stop=None, sd=None, epoch=0):
    "Global batches (every rank's t-th batch's labels, rank after rank) and rank 0's state after `stop` batches."
    per_rank, states = [], []
    for r in range(world):
        ds = create_dataset(
            'parquet/x',
            root=str(root),
            split='train',
            is_training=True,
            batch_size=bs,
            block_shards=3,
            rank=r,
            world_size=world,
        )
        dl = create_loader(ds, (3, 16, 16), bs, is_training=True, num_workers=workers, device='cpu')
        if sd is not None:
            dl.load_state_dict(json.loads(json.dumps(sd)))
        dl.set_epoch(epoch)
        out = []
        for _, y in dl:
            out.append(y.tolist())
            if len(out) == stop:
                break
        states.append(dl.state_dict())
        per_rank.append(out)
    assert all(len(o) == len(per_rank[0]) for o in per_rank)
    return [sum((o[t] for o in per_rank), []) for t in range(len(per_rank[0]))], states[0]


@pytest.mark.slow
@pytest.mark.parametrize('which', ['folder', 'indexed'])
def test_one_global_order_and_exact_resume_elsewhere(which, request):
    "The same global batches on 1x1, 2x2 (process workers) and 3x1; a run cut on 2x2 resumes on 1x3 and 3x1 with the batches left."
    root = request.getfixturevalue(which)
    ref, _ = _run(root, 1, 12, 0)
    assert len(ref) == 5 and sorted(sum(ref, [])) == list(range(N))  # every sample once
    assert _run(root, 2, 6, 2)[0] == ref and _run(root, 3, 4, 0)[0] == ref
    _, sd = _run(root, 2, 6, 2, stop=2)
    for world, bs, workers in [(1, 12, 3), (3, 4, 1)]:
        assert _run(root, world, bs, workers, sd=sd)[0] == ref[2:], (world, bs, workers)
    assert _run(root, 1, 12, 0, epoch=1)[0] != ref


def test_index_and_footers_read_alike(folder, indexed):
    "With the index and without it (footers, row groups): the same samples in the same order; the index makes each read exact."
    assert _run(folder, 1, 12, 0)[0] == _run(indexed, 1, 12, 0)[0]
    src = ParquetSource(indexed, 'train')
    assert {int(k) for t in src.spans.tables for k in t[:, 0]} == {EXACT}
    ev = create_dataset('parquet/x', root=str(indexed), split='train')
    assert [y for _, y in ev] == list(range(N))  # evaluation: every sample once, in order


def test_files_written_by_datasets(tmp_path):
    "`datasets`' Image() and ClassLabel written by `to_parquet` in the Hub's layout: the class names, labels and image bytes read back."
    datasets = pytest.importorskip('datasets')
    imgs = [_jpeg(i) for i in range(30)]
    d = datasets.Dataset.from_dict(
        {
            'image': [{'bytes': b, 'path': None} for b in imgs],
            'label': [i % 3 for i in range(30)],
            'caption': [f'x{i}' for i in range(30)],
        }
    )
    d = d.cast_column('image', datasets.Image()).cast_column('label', datasets.ClassLabel(names=['cat', 'dog', 'fox']))
    (tmp_path / 'data').mkdir()
    d.to_parquet(str(tmp_path / 'data' / 'validation-00000-of-00001.parquet'), batch_size=10)
    for index in (False, True):
        if index:
            write_parquet_index(tmp_path)
        ds = create_dataset('parquet/x', root=str(tmp_path), split='val')  # timm's synonym finds 'validation'
        assert ds.reader.class_to_idx == {'cat': 0, 'dog': 1, 'fox': 2}
        r = ds.reader.by_position()
        got = [r.read(0, m) for m in range(30)]
        assert [g[1] for g in got] == imgs and [g[2] for g in got] == [i % 3 for i in range(30)]
    kinds = set(ParquetSource(tmp_path, 'validation').spans.tables[0][:, 0].tolist())
    assert kinds == {EXACT}  # datasets writes Image() bytes uncompressed, PLAIN: each image one exact read
    assert kinds <= {EXACT, PAGE}, kinds  # read by position whatever compression datasets chose


class _Counted(http.server.SimpleHTTPRequestHandler):
    "Answers ranged GETs (206) and counts requests and bytes sent; HTTP/1.0 (a connection a request) unless `protocol_version` says 1.1."

    log = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = self.translate_path(self.path)
        rng = self.headers.get('Range')
        if not os.path.isfile(path):
            return super().do_GET()
        size = os.path.getsize(path)
        a, b = (0, size - 1) if not rng else rng.split('=', 1)[1].split('-')
        a, b = (max(0, size - int(b)), size - 1) if a == '' else (int(a), min(int(b), size - 1))  # bytes=-n: the tail
        with open(path, 'rb') as f:
            f.seek(a)
            data = f.read(b + 1 - a)
        _Counted.log.append((self.path, len(data)))
        self.send_response(206 if rng else 200)
        self.send_header('Content-Length', str(len(data)))
        if rng:
            self.send_header('Content-Range', f'bytes {a}-{a + len(data) - 1}/{size}')
        self.end_headers()
        self.wfile.write(data)


class _Kept(_Counted):
    protocol_version = 'HTTP/1.1'  # connections kept open


@pytest.mark.parametrize('handler', [_Counted, _Kept])
def test_over_http_ranged_reads(indexed, tmp_path, handler, monkeypatch):
    "Over loopback HTTP: the local run's batches; with the index, one request before the reads whatever the number of files, and one read of the image's size a sample; without it, one request a file for its footer, kept for the node."
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'node'))  # the node's folder for kept footers
    from timmdata.parquet import source as pq
    together, real = [], pq.kept_get_many  # a read thread's requests sent together (HTTP/1.0: then one a connection)
    monkeypatch.setattr(pq, 'kept_get_many', lambda reads, *a, **k: (together.append(len(reads)), real(reads, *a, **k))[1])
    with http_folder(indexed, handler) as url:
        _Counted.log.clear()
        ds = create_dataset('parquet/x', root=url, split='train', is_training=True, batch_size=12, block_shards=3)
        assert ds.order == 'global' and len(_Counted.log) == 1 and PARQUET_INDEX_FILE in _Counted.log[0][0]
        got = [y.tolist() for _, y in create_loader(ds, (3, 16, 16), 12, is_training=True, num_workers=0, device='cpu')]
        assert got == _run(indexed, 1, 12, 0)[0]
        assert together and max(together) > 1, together
        reads = _Counted.log[1:]
        assert len(reads) <= 60  # at most a ranged read a sample (close images of a file: one request)
        assert sum(n for _, n in reads) <= 1.1 * sum(len(_jpeg(i)) for i in range(N))
        # a file's rows in its order: close images fetched together, each sample's bytes its own
        _Counted.log.clear()
        r = ParquetSource(url, 'train').by_position()
        got_in_order = list(r._reads([1] * 10, list(range(10))))
        assert [(k, img, y) for k, img, y in got_in_order] == [ParquetSource(indexed, 'train').by_position().read(1, m) for m in range(10)]
        assert 0 < len(_Counted.log) < 10, _Counted.log
        # without the index: each file's size and footer, then row groups
        _Counted.log.clear()
        pat = 'data/train-{00000..00005}-of-00006.parquet'
        ds = create_dataset(
            'parquet/x', root=url, split=pat, is_training=True, batch_size=12, block_shards=3, use_index=False
        )
        assert len(_Counted.log) == 6  # one read a file: its tail (its size in the answer, its footer in its bytes)
        assert [
            y.tolist() for _, y in create_loader(ds, (3, 16, 16), 12, is_training=True, num_workers=0, device='cpu')
        ] == got
        files = sum(p.stat().st_size for p in (indexed / 'data').glob('*.parquet'))
        fetched = sum(n for _, n in _Counted.log[6:])  # after the footers (a file's last 64 KiB: these whole files)
        assert fetched <= 0.9 * files, (fetched, files)  # each row group once (8 reads of it in flight), footers apart
        _Counted.log.clear()  # another process of the node: the kept footers, no request
        ds = create_dataset('parquet/x', root=url, split=pat, is_training=True, batch_size=12, use_index=False)
        assert len(_Counted.log) == 0 and ds.reader.shard_lengths == [10] * 6


def test_hostile_files_fuzzed(tmp_path):
    "Bytes flipped, cut and footer lengths changed at random: every file is read or refused with a named error, each in bounded time."
    src = tmp_path / 'src'
    write_sample_parquet(
        src, [(_jpeg(i), i % 3) for i in range(24)], ['a', 'b', 'c'], files=1, row_group_size=8, compression='snappy'
    )
    good = (src / 'data' / 'train-00000-of-00001.parquet').read_bytes()
    rng, seen = random.Random(0), {}
    for k in range(120):
        b = bytearray(good)
        how = k % 4
        if how == 0:
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif how == 1:
            b = b[: rng.randrange(len(b))]
        elif how == 2:
            b[-8:-4] = rng.choice([0, 1, len(b), len(b) - 9, 2**31 - 1, 2**32 - 1]).to_bytes(4, 'little')
        else:  # a byte of the footer's metadata changed: offsets, sizes, counts
            n = int.from_bytes(good[-8:-4], 'little')
            for _ in range(rng.randint(1, 3)):
                b[len(b) - 8 - n + rng.randrange(n)] = rng.randrange(256)
        d = tmp_path / f'f{k}' / 'data'
        d.mkdir(parents=True)
        (d / 'train-00000-of-00001.parquet').write_bytes(bytes(b))
        t = time.perf_counter()
        try:
            s = ParquetSource(d.parent, 'train')
            list(s.iter_shard(s.shards[0]))
            write_parquet_index(d.parent)
            s = ParquetSource(d.parent, 'train')
            r = s.by_position()
            [r.read(0, m) for m in range(s.shard_lengths[0])]
            out = 'read'
        except ShardError as e:  # ParquetError is one; ShardChangedError when the rows no longer match the footer
            out = type(e).__name__
            assert 'parquet' in str(e).lower(), e  # names the file
        except ValueError as e:  # damage that leaves no image column: a choice of columns refused, not pyarrow's error
            out = type(e).__name__
            assert type(e) is ValueError and 'image' in str(e), repr(e)
        assert time.perf_counter() - t < 5, k
        seen[out] = seen.get(out, 0) + 1
    assert seen.get('ParquetError', 0) > 30, seen  # most damage is found and named


def test_node_cache_and_index_command(folder, tmp_path):
    "`timmdata index` writes the Parquet index; over HTTP with cache_dir each file is fetched whole once per node, then read from the copy."
    import shutil
    from timmdata.tools.cli import main as cli

    root = tmp_path / 'c'
    shutil.copytree(folder, root)
    assert cli(['index', str(root), '--no-progress']) == 0 and (root / PARQUET_INDEX_FILE).is_file()
    ref = _run(root, 1, 12, 0)[0]
    with http_folder(root, _Counted) as url:
        _Counted.log.clear()
        ds = create_dataset(
            'parquet/x',
            root=url,
            split='train',
            is_training=True,
            batch_size=12,
            block_shards=3,
            cache_dir=str(tmp_path / 'cache'),
        )
        got = [y.tolist() for _, y in create_loader(ds, (3, 16, 16), 12, is_training=True, num_workers=0, device='cpu')]
        assert got == ref
        files = [p for p, _ in _Counted.log if p.endswith('.parquet')]
        assert len(files) == 6 and len(set(files)) == 6, _Counted.log  # each file once, whole


def test_mixed_with_a_folder(indexed, tmp_path):
    "A `ParquetSource` is a `mix_datasets` entry: its samples read by position, as tar shards' are."
    from timmdata.mix.mixing import mix_datasets
    from timmdata.tools.sample_data import make_sample_dataset

    folder = make_sample_dataset(tmp_path / 'f', n_train=2, n_val=0, classes=['a', 'b'], size=(20, 16), num_workers=0)
    mix = mix_datasets([ParquetSource(indexed, 'train'), str(folder / 'train')], weights=[0.5, 0.5], epoch_length=40)
    ys = [int(mix[i][1]) for i in range(len(mix))]
    assert len(ys) == len(mix) > 0 and any(
        y >= 2 for y in ys
    )  # labels kept: the folder's are 0 and 1, the Parquet rows' up to 59


@pytest.mark.parametrize('which', ['folder', 'indexed'])
def test_one_reader_shared_by_threads(which, request):
    "A reader shared by 8 threads (as a mix read by thread workers shares it: kept row groups, kept connections) gives each row's own image and label."
    from concurrent.futures import ThreadPoolExecutor

    src = ParquetSource(request.getfixturevalue(which), 'train')
    r = src.by_position()
    pos = [(s, m) for s in range(len(src.shards)) for m in range(src.shard_lengths[s])] * 4
    random.Random(0).shuffle(pos)
    with ThreadPoolExecutor(8) as ex:
        got = list(ex.map(lambda sm: r.read(*sm), pos))
    want = {(s, m): (_jpeg(s * 10 + m), s * 10 + m) for s in range(6) for m in range(10)}
    assert len(got) == len(pos) and all((img, y) == want[sm] for sm, (_, img, y) in zip(pos, got))



@pytest.mark.parametrize('which', ['folder', 'indexed'])
def test_threads_sharing_a_reader_past_its_open_files(which, request):
    "8 threads share a reader that keeps 2 files open of 6 (each read may drop another thread's file): every read is its row's, never a closed or reused descriptor (a handle is held while it is read)."
    from concurrent.futures import ThreadPoolExecutor
    from timmdata.parquet.source import ParquetReader

    src = ParquetSource(request.getfixturevalue(which), 'train')
    want = {(s, m): (_jpeg(s * 10 + m), s * 10 + m) for s in range(6) for m in range(10)}
    for rep in range(6):
        r = ParquetReader(src, max_open_files=2)
        pos = [(s, m) for s in range(6) for m in range(10)] * 3
        random.Random(rep).shuffle(pos)
        with ThreadPoolExecutor(8) as ex:
            got = list(ex.map(lambda sm: r.read(*sm), pos))
        assert len(got) == len(pos) and all((img, y) == want[sm] for sm, (_, img, y) in zip(pos, got))

def test_a_file_of_no_rows(tmp_path):
    "A Parquet file of no rows (its one row group empty, its chunk at byte 0) is a file of no samples, with the index or without."
    write_sample_parquet(tmp_path, [(_jpeg(i), i) for i in range(3)], ['a', 'b', 'c'], files=4)
    assert pq.ParquetFile(tmp_path / 'data' / 'train-00000-of-00004.parquet').metadata.num_rows == 0
    for index in (False, True):
        if index:
            write_parquet_index(tmp_path)
        src = ParquetSource(tmp_path, 'train')
        assert src.shard_lengths == [0, 1, 1, 1]
        ev = create_dataset('parquet/x', root=str(tmp_path), split='train')
        assert sorted(y for _, y in ev) == [0, 1, 2]


def test_cache_from_parquet(tmp_path):
    "`timmdata cache FOLDER DST` over Parquet files in the Hub's layout: a store a split, each the same pixels and labels as the store built from the same images in a class folder; `parquet/FOLDER` the same."
    from timmdata.tools.cli import main as cli
    from timmdata.readers import create_reader
    from timmdata.tools.sample_data import make_sample_dataset

    imgs = make_sample_dataset(tmp_path / 'imgs', n_train=3, n_val=2, classes=['a', 'b'], size=(48, 40), num_workers=0)
    for split, sub in (('train', 'train'), ('validation', 'val')):
        r = create_reader(str(imgs / sub))
        write_sample_parquet(tmp_path / 'pq', [(open(r.filename(i, absolute=True), 'rb').read(), r.targets[i]) for i in range(len(r))], r.classes, split=split, files=2)
    args = ['--workers', '0', '--max-size', '32']
    assert cli(['cache', str(tmp_path / 'pq'), str(tmp_path / 'st'), *args]) == 0
    assert cli(['cache', str(imgs), str(tmp_path / 'ref'), *args]) == 0
    for split, sub in (('train', 'train'), ('validation', 'val')):
        got, ref = create_reader(str(tmp_path / 'st' / split)), create_reader(str(tmp_path / 'ref' / sub))
        assert type(got).__name__ == 'ReaderStore' and len(got) == len(ref) == (6 if split == 'train' else 4)
        assert got.targets == ref.targets and all(np.array_equal(got[i][0], ref[i][0]) for i in range(len(ref)))
    assert cli(['cache', f'parquet/{tmp_path / "pq"}', str(tmp_path / 'st2'), '--split', 'val', *args]) == 0
    assert create_reader(str(tmp_path / 'st2' / 'validation')).targets == ref.targets


def test_kept_footer_of_a_changed_file(folder, tmp_path, monkeypatch):
    "A remote file changed after its footer was kept: its first read names the change and drops the kept footer; a new stream reads the new one."
    import shutil

    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'node'))
    root = tmp_path / 'c'
    shutil.copytree(folder, root)
    pat = 'data/train-{00000..00005}-of-00006.parquet'
    with http_folder(root, _Kept) as url:
        src = ParquetSource(url, pat, use_index=False)
        r = src.by_position()
        new = write_sample_parquet(tmp_path / 'n', [(_jpeg(i), i) for i in range(N)], [f'c{i}' for i in range(N)], files=6, row_group_size=3)
        shutil.copy(new[0], root / 'data')  # the first file written again: row groups of 3 rows, another size
        with pytest.raises(ShardError, match='changed after its footer was read'):
            r.read(0, 0)
        src = ParquetSource(url, pat, use_index=False)  # its footer read again; the others' kept ones used
        assert src.spans.groups[:2] == [[3, 3, 3, 1], [4, 4, 2]] and src.by_position().read(0, 4)[1:] == (_jpeg(4), 4)
