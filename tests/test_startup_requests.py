"""Issue 44: the requests a training stream makes before its first batch do not grow with the shards when the dataset
has a dataset index (`timmdata index`): counted with a local HTTP server answering ranged reads, at 250 and 2,000
shards (counts, never times). Issue 57: without the index (other tools' shards, `_info.json` with the shard lengths)
nothing is asked per shard either: the order is planned from `_info.json`, each shard scanned when first read, once a
node (`scanned_spans.ScannedSpans`), and a one-line hint says `timmdata index` makes start-up O(1)."""
import sys, warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'bench'))
from bench_startup_requests import CountingServer, write_tiny_shards  # the bench's server and shards: one definition

from timmdata.dataset_factory import create_dataset
from timmdata.index.dataset_index import DATASET_INDEX_FILE, write_dataset_index
from timmdata.loader import create_loader
from timmdata.index.span_reader import READ_AHEAD
from timmdata.streams.global_order import read_in_order

BATCH = 4


def _start_up(srv, index_dir) -> tuple:
    "(requests to build the dataset, requests from then to the first batch of a 2-worker loader), as method counts."
    srv.reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        ds = create_dataset('wds/tiny', root=srv.url, split='train', is_training=True, batch_size=BATCH, index_dir=index_dir)
    built = srv.snapshot()
    srv.reset()
    it = iter(create_loader(ds, (3, 24, 24), BATCH, is_training=True, num_workers=2, device='cpu', persistent_workers=False))
    x, y = next(it)
    first = srv.snapshot()
    del it
    assert ds.order == 'global' and len(y) == BATCH
    return built, first, [str(m.message) for m in w]


@pytest.fixture(scope='module')
def served(tmp_path_factory):
    out = {}
    for n in (250, 2000):
        root = tmp_path_factory.mktemp(f's{n}')
        write_tiny_shards(root, n)
        out[n] = root
    return out


N_SMALL = 50  # shards of the tests that read a whole pass (a request or two per sample): the per-shard counts hold at any count


@pytest.fixture(scope='module')
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp(f's{N_SMALL}')
    write_tiny_shards(root, N_SMALL)
    return root


def _counts(served: dict, tmp_path, indexed: bool) -> dict:
    "{shards: (requests to build the dataset, requests to its first batch, warnings)} over each served set, with or without the dataset index."
    counts = {}
    for n, root in served.items():
        if indexed:
            write_dataset_index(root, progress=False)
        srv = CountingServer(root)
        try:
            counts[n] = _start_up(srv, str(tmp_path / f'i{n}'))
        finally:
            srv.close()
            (root / DATASET_INDEX_FILE).unlink(missing_ok=True)
    return counts


@pytest.mark.slow
def test_start_up_requests_do_not_grow_with_shards(served, tmp_path):
    counts = _counts(served, tmp_path, indexed=True)
    (b250, f250, _), (b2000, f2000, _) = counts[250], counts[2000]
    assert b250 == b2000 == {'GET': 2}, (b250, b2000)  # _info.json and the dataset index: nothing per shard
    for first in (f250, f2000):  # the workers ask for samples only: a ranged read each, and one for each shard's spans
        # (dataset_index.ShardSpans), of at most what they prefetch: 2 workers x 2 batches ahead + the first, x BATCH,
        # and each worker's ranged reads in flight (SpanReader's read_ahead) with their spans
        bound = 2 * (2 * 2 + 1) * BATCH + 2 * 2 * READ_AHEAD
        assert set(first) == {'GET range'} and BATCH <= first['GET range'] <= bound, first


def _bound(first: dict, n_first: int = 2 * (2 * 2 + 1) * BATCH) -> int:
    "Ranged reads to the first batch without an index: per sample the workers prefetch, its read and at most one scan of its shard (tiny shards: one ranged GET each), with each worker's reads in flight; nothing per shard of the dataset."
    return 2 * n_first + 2 * 2 * READ_AHEAD * 2


def test_without_index_nothing_per_shard_and_a_hint(served, tmp_path):
    "Other tools' shards (no dataset index; _info.json lists the shard lengths): no HEAD, no scan of every shard when the"
    " dataset is built: the order is planned from _info.json, a shard scanned when first read; a one-line hint."
    root = served[250]
    srv = CountingServer(root)
    try:
        built, first, msgs = _start_up(srv, str(tmp_path / 'i'))
    finally:
        srv.close()
    assert built == {'GET': 2, 'GET range': 1}, built  # _info.json, the index (none), a ranged read of the first shard (does the server answer them?): nothing per shard
    assert set(first) == {'GET range'} and BATCH <= first['GET range'] <= _bound(first), first
    hints = [m for m in msgs if 'timmdata index' in m and DATASET_INDEX_FILE in m]
    assert len(hints) == 1 and 'O(1)' in hints[0] and '\n' not in hints[0], msgs


@pytest.mark.slow
def test_without_index_each_shard_scanned_once_per_node(small, tmp_path):
    "Two processes of a node (fresh per-process state, one index folder) read a whole pass: the first scans each shard"
    " once as it meets it; the second reads the node's kept scans: only its samples' reads; every sample once, both times."
    from timmdata.index.span_reader import SpanReader
    from timmdata.index.scanned_spans import ScannedSpans
    root, n = small, N_SMALL * 2
    srv = CountingServer(root)

    def process():
        srv.reset()
        ds = create_dataset('wds/tiny', root=srv.url, split='train', is_training=True, batch_size=BATCH,
                            index_dir=str(tmp_path / 'node'))
        built = srv.snapshot()
        assert ds.order == 'global' and isinstance(ds._spans, SpanReader) and isinstance(ds._spans.spans, ScannedSpans)
        srv.reset()
        keys = [k for _, _, k, _, _ in read_in_order(ds.source, range(n), ds.seed, 0, ds.block_shards, spans=ds._spans)]
        return built, srv.snapshot(), keys, ds._spans.spans.scanned

    try:
        first, second = process(), process()
    finally:
        srv.close()
    want = sorted(f'{i:08d}' for i in range(n))
    for _, _, keys, _ in (first, second):
        assert len(keys) == n and sorted(keys) == want
    assert first[0] == second[0] == {'GET': 2, 'GET range': 1}, (first[0], second[0])
    assert first[3] == N_SMALL and first[1] == {'GET range': N_SMALL + n}, first[1]  # a scan a shard, a read a sample
    assert second[3] == 0 and second[1] == {'GET range': n}, second[1]  # the node's scans: the samples' reads only


def test_a_damaged_kept_scan_is_scanned_again(small, tmp_path):
    "A kept scan cut short or changed (the node folder is untrusted) is never used: the shard is scanned again."
    from timmdata.index.scanned_spans import ScannedSpans
    root = small
    srv = CountingServer(root)
    try:
        ds = create_dataset('wds/tiny', root=srv.url, split='train', is_training=True, batch_size=BATCH,
                            index_dir=str(tmp_path / 'node'))
        sp = ds._spans.spans
        rows = sp.layout(3)
        path = Path(sp._path(3))
        for bad in (path.read_bytes()[:-8], path.read_bytes()[:16] + bytes(32 * 2)):
            path.write_bytes(bad)
            fresh = ScannedSpans(ds.source, str(tmp_path / 'node'))
            assert (fresh.layout(3) == rows).all() and fresh.scanned == 1
    finally:
        srv.close()


def _rewrite(path: Path, keys, image_size) -> None:
    "Write shard `path` again in place: samples `keys`, each a JPEG of `image_size` and a label."
    import io, tarfile
    from timmdata.tools.sample_data import make_sample_image
    buf = io.BytesIO()
    make_sample_image(1, 1, image_size).save(buf, 'JPEG', quality=80)
    with tarfile.open(path, 'w', format=tarfile.USTAR_FORMAT) as t:
        for i in keys:
            for ext, data in (('jpg', buf.getvalue()), ('cls', str(i % 10).encode())):
                ti = tarfile.TarInfo(f'{i:08d}.{ext}')
                ti.size, ti.mtime = len(data), 0
                t.addfile(ti, io.BytesIO(data))


@pytest.mark.parametrize('image_size', [(64, 48), (200, 150)])  # tar keeps the size (10 KiB records), or it grows
def test_a_shard_written_again_after_its_scan_is_scanned_again(tmp_path, image_size):
    "A shard written again in place after the node kept its scan: the next process's read finds its size changed, drops"
    " the kept scan and scans the shard once more; every sample of the new shard once, none of the old; the next process"
    " reads the new kept scan (no scan). Before: a named but wrong error ('bad tar header') until the scan was deleted by hand."
    from timmdata.sources.spans import ShardChangedError
    root, per = tmp_path / 'd', 2
    names = write_tiny_shards(root, 5, per)
    srv = CountingServer(root)

    def process():
        ds = create_dataset('wds/tiny', root=srv.url, split='train', is_training=True, batch_size=BATCH,
                            index_dir=str(tmp_path / 'node'))
        keys = [k for _, _, k, _, _ in read_in_order(ds.source, range(10), ds.seed, 0, ds.block_shards, spans=ds._spans)]
        return keys, ds._spans.spans

    try:
        keys, first = process()
        assert len(keys) == 10 and sorted(keys) == [f'{i:08d}' for i in range(10)] and first.scanned == 5
        _rewrite(root / names[3], (106, 107), image_size)
        keys, second = process()
        want = sorted([f'{i:08d}' for i in range(10) if i not in (6, 7)] + ['00000106', '00000107'])
        assert len(keys) == 10 and sorted(keys) == want, keys
        assert second.scanned == 1  # shard 3 only: the others' kept scans still match
        keys, third = process()
        assert len(keys) == 10 and sorted(keys) == want and third.scanned == 0
        # a shard that changes again while its spans are in use: found at the next read, scanned once more
        ds = create_dataset('wds/tiny', root=srv.url, split='train', is_training=True, batch_size=BATCH,
                            index_dir=str(tmp_path / 'node'))
        reader = ds._spans
        assert reader.read(3, 0)[0] == '00000106'
        _rewrite(root / names[3], (206, 207), (40, 30))
        assert [reader.read(3, m)[0] for m in range(per)] == ['00000206', '00000207'] and reader.spans.scanned == 1
        # spans the user wrote (the dataset index) are never made again here: named, with what to do
        write_dataset_index(root, progress=False)
        ds = create_dataset('wds/tiny', root=srv.url, split='train', is_training=True, batch_size=BATCH,
                            index_dir=str(tmp_path / 'node2'))
        _rewrite(root / names[3], (306, 307), image_size)
        with pytest.raises(ShardChangedError, match='timmdata index'):
            ds._spans.read(3, 0)
    finally:
        srv.close()


@pytest.mark.slow
@pytest.mark.parametrize('indexed', [False, True])
def test_start_up_requests_at_250_and_2000_shards(served, tmp_path, indexed):
    "The counts at 250 and 2,000 shards, with and without the dataset index: the same requests to build the dataset, and"
    " a bounded number to the first batch, whatever the shard count (run: TIMMDATA_SLOW=1 pytest -m slow tests/test_startup_requests.py)."
    counts = _counts(served, tmp_path, indexed)
    (b250, f250, _), (b2000, f2000, _) = counts[250], counts[2000]
    assert b250 == b2000 == ({'GET': 2} if indexed else {'GET': 2, 'GET range': 1}), (b250, b2000)  # _info.json, the index (or its absence and a probe of ranged reads)
    for first in (f250, f2000):
        assert set(first) == {'GET range'} and BATCH <= first['GET range'] <= _bound(first), first


def test_with_a_cache_dir_each_table_shard_and_spans_once_per_node(small, tmp_path):
    "Remote shards with a node cache: the index's table, each shard and each shard's spans are fetched once by the node's"
    " first process that needs them; the node's other processes (a fresh per-process state) read the cache's copies; a"
    " damaged copy of the parsed table is refused by name and made again, never used."
    from timmdata.index import dataset_index
    from timmdata.index.span_reader import SpanReader
    root, cache, n = small, tmp_path / 'cache', N_SMALL * 2
    write_dataset_index(root, progress=False)
    srv = CountingServer(root)

    def process():  # what a new process of the node does: build the stream, then read every position of the pass
        dataset_index._READ.clear()
        dataset_index.TABLE_READS.update(parsed=0, mapped=0)
        srv.reset()
        ds = create_dataset('wds/tiny', root=srv.url, split='train', is_training=True, batch_size=BATCH, cache_dir=str(cache))
        built = srv.snapshot()
        assert ds.order == 'global' and isinstance(ds._spans, SpanReader)
        srv.reset()
        keys = [k for _, _, k, _, _ in read_in_order(ds.source, range(n), ds.seed, 0, ds.block_shards, spans=ds._spans)]
        return built, srv.snapshot(), keys

    try:
        first, reads1 = process(), dict(dataset_index.TABLE_READS)
        second, reads2 = process(), dict(dataset_index.TABLE_READS)
        table = next(cache.glob('*.table.arrays'))  # the parsed table the node's processes map
        cut = table.read_bytes()[:-8]
        table.unlink()
        table.write_bytes(cut)  # damaged
        with pytest.warns(UserWarning, match=table.name):  # refused by name
            third = process()
    finally:
        srv.close()
        (root / DATASET_INDEX_FILE).unlink()
    want = sorted(f'{i:08d}' for i in range(n))
    for _, _, keys in (first, second, third):
        assert len(keys) == n and sorted(keys) == want  # every sample once, by its span from the cached copy
    assert first[0] == {'GET': 2}, first[0]  # _info.json and the table
    assert first[1] == {'GET': N_SMALL, 'GET range': N_SMALL}, first[1]  # each shard whole once, each shard's spans once
    assert second[0] == {'GET': 1} and second[1] == {}, second  # _info.json only: the rest from the node's cache
    assert third[0] == {'GET': 2} and third[1] == {}, third  # the damaged table fetched again
    assert reads1['parsed'] == 1 and reads2 == {'parsed': 0, 'mapped': 1}, (reads1, reads2)  # the second maps it


@pytest.mark.slow
def test_ranged_reads_ahead_keep_the_order(small):
    "Over http(s) without a cache, `SpanReader` keeps up to `read_ahead` ranged GETs in flight: the same samples in the same order as one at a time."
    from timmdata.index import dataset_index
    from timmdata.index.span_reader import SpanReader
    root = small
    write_dataset_index(root, progress=False)
    srv = CountingServer(root)
    try:
        dataset_index._READ.clear()
        ds = create_dataset('wds/tiny', root=srv.url, split='train', is_training=True, batch_size=BATCH)
        got = {}
        for ahead in (1, 8):
            rd = SpanReader(ds.source, ds._spans.spans, sizes=ds._spans.sizes, read_ahead=ahead)
            srv.reset()
            got[ahead] = [(p, k) for p, _, k, _, _ in read_in_order(ds.source, range(7, 97), ds.seed, 0, ds.block_shards, 3, spans=rd)]
            assert srv.snapshot().get('GET range', 0) >= 90
    finally:
        srv.close()
        (root / DATASET_INDEX_FILE).unlink()
    assert len(got[1]) == len(got[8]) == 90 and got[1] == got[8]
    assert [p for p, _ in got[8]] == list(range(7, 97))
