"""Many reads of an object store at once (`object_store.object_get_many`, `object_fetch`), against a fake S3 server in
this process (`_fake_s3.FakeS3`): each read's bytes exactly its own and in the order asked, neighbouring reads of an
object one request, the bytes asked beyond the reads bounded by the slack, an answer shorter than a read a named error
(never a shorter sample), and no thread a request."""
import random, re, threading
import pytest

pytest.importorskip('obstore')
from _fake_s3 import FakeS3
from timmdata.net import object_store as O

SIZE = 1 << 18


@pytest.fixture
def s3():
    rng = random.Random(0)
    O._TAGS.clear()  # ETags another test's fake server gave for these names
    with FakeS3() as s:
        for k in ('a/x.bin', 'a/y.bin'):
            s.objects[k] = rng.randbytes(SIZE)
        yield s


def _asked(s3) -> list:
    "(key, first byte, bytes) of each ranged GET the server was sent."
    out = []
    for method, path, headers in s3.log:
        rng = headers.get('Range') or headers.get('range')
        if method == 'GET' and rng:
            a, b = map(int, re.fullmatch(r'bytes=(\d+)-(\d+)', rng).groups())
            out.append((path.split('/', 2)[2], a, b + 1 - a))
    return out


def _reads(rng: random.Random, s3, k: int) -> list:
    "`k` reads of the two objects: runs of neighbours (a shard's samples read in order), gaps small and large, some reads twice."
    reads = []
    while len(reads) < k:
        key = rng.choice(['a/x.bin', 'a/y.bin'])
        at = rng.randrange(0, SIZE - 40_000)
        for _ in range(rng.randrange(1, 6)):
            n = rng.randrange(1, 6000)
            reads.append((s3.url(key), at, n))
            at += n + rng.choice([0, 0, 10, 300, 5000, 70_000])
            if at + 6000 > SIZE:
                break
    rng.shuffle(reads)
    return reads[:k] + reads[:3]  # the first three asked twice


@pytest.mark.parametrize('slack', [0, 4096, O.MERGE_SLACK])
def test_every_read_exact_in_order_and_bounded(s3, slack, monkeypatch):
    "Each read's bytes equal a direct read's, in the order asked; fewer requests than reads; the bytes asked <= the reads' + the slack for each gap bridged."
    monkeypatch.setattr(O, 'MERGE_SLACK', slack)
    rng = random.Random(slack)
    for _ in range(3):
        reads = _reads(rng, s3, 120)
        s3.log.clear()
        got = O.object_fetch(reads, slack=slack).result()
        assert [body for _, body in got] == [s3.objects[u.split('/', 3)[3]][a : a + n] for u, a, n in reads]
        for (h, body), (u, a, n) in zip(got, reads):
            assert h['content-range'] == f'bytes {a}-{a + n - 1}/{SIZE}' and len(body) == n
        asked = _asked(s3)
        requests, _ = O.merge_reads(reads, slack)
        assert sorted(asked) == sorted((u.split('/', 3)[3], a, n) for u, a, n in requests)
        assert len(asked) < len(reads)
        wanted = sum(n for *_, n in reads)
        assert sum(n for *_, n in asked) <= wanted + slack * (len(reads) - len(asked))


def test_get_many_merges_neighbours(s3):
    "object_get_many: a shard's samples read in order are one request; each one's bytes its own."
    url, data = s3.url('a/x.bin'), s3.objects['a/x.bin']
    reads = [(url, a, 1000, SIZE) for a in range(0, 32_000, 1000)][::-1]
    s3.log.clear()
    got = O.object_get_many(reads)
    assert [b for _, b in got] == [data[a : a + 1000] for _, a, _, _ in reads]
    assert _asked(s3) == [('a/x.bin', 0, 32_000)]


def test_object_that_ends_first_is_a_named_error(s3):
    "Reads past the object's end (it is shorter than the index says): the read cut short is an error naming the object and its bytes, never a shorter sample."
    url = s3.url('a/x.bin')
    with pytest.raises(O.ObjectStoreError, match=rf's3://fake/a/x\.bin: bytes {SIZE - 50:,}-{SIZE + 49:,} asked, the store answered 50 of them'):
        O.object_get_many([(url, SIZE - 100, 50), (url, SIZE - 50, 100)])
    with pytest.raises(O.ObjectStoreError, match='a short read'):  # one read alone: the same
        O.object_get_many([(url, SIZE - 50, 100)])
    with pytest.raises(O.ObjectChangedError, match='not the 9 known'):  # its size known: the object changed
        O.object_get_many([(url, SIZE - 100, 50, 9), (url, SIZE - 50, 100, 9)])


def test_body_cut_short_is_a_named_error(s3):
    "A store that sends fewer bytes than its headers say, every time: tried again, then an error naming the object and the bytes."
    s3.cut = 10
    url = s3.url('a/x.bin')
    with pytest.raises(O.ObjectStoreError, match=r's3://fake/a/x\.bin: bytes 1000-2999: .*\(2 tries\)'):
        O.object_get_many([(url, 1000, 1000), (url, 2000, 1000)], retries=1, backoff=0.01)


def test_no_thread_a_request(s3):
    "64 requests in flight: one event-loop thread in this process, no thread a request."
    before = {t.ident for t in threading.enumerate()}
    reads = [(s3.url('a/x.bin'), a, 100) for a in range(0, 64 * 4000, 4000)]
    O.object_get_many(reads)
    ours = [t.name for t in threading.enumerate() if t.ident not in before and t.name.startswith('timmdata')]
    assert ours in ([], ['timmdata-object-loop']), ours
    assert not [t for t in threading.enumerate() if t.name.startswith('timmdata-object-get')]


def _upload(s3, folder, prefix: str):
    for f in sorted(folder.rglob('*')):
        if f.is_file():
            s3.objects[f'{prefix}/{f.relative_to(folder).as_posix()}'] = f.read_bytes()


def _span_readers(s3, tmp_path) -> tuple:
    "(the shards' SpanReader over s3://, the same shards' read locally) of `remote_test_datasets`' shards with their index."
    from _helpers import remote_test_datasets
    from timmdata.index.dataset_index import dataset_spans
    from timmdata.index.span_reader import SpanReader
    from timmdata.sources.wds import WdsSource

    root = remote_test_datasets(tmp_path, 24, plain=False)
    _upload(s3, root / 'shards', 'shards')
    out = []
    for where in (s3.url('shards'), str(root / 'shards')):
        src = WdsSource(where, 'train', retries=0)
        spans, sizes = dataset_spans(src)
        out.append(SpanReader(src, spans, sizes=sizes))
    return tuple(out)


def test_span_reader_windows_as_local(s3, tmp_path):
    "Shards in a bucket: each sample (key, image, target) as read from the local copy, in the order asked; neighbours one request; no reader threads."
    remote, local = _span_readers(s3, tmp_path)
    pairs = [(s, m) for s in range(len(remote.source.shards)) for m in range(remote.lengths[s])]
    assert remote.read_ahead >= len(pairs) > len(remote.source.shards)  # one window: every shard's samples can merge
    for order in (pairs, random.Random(1).sample(pairs, len(pairs))):
        shards, members = [s for s, _ in order], [m for _, m in order]
        s3.log.clear()
        got = list(remote._reads(shards, members))
        assert got == list(local._reads(shards, members))
        # in order or shuffled, the window's reads of a shard (its samples back to back) are one request
        assert sorted(k for k, *_ in _asked(s3) if k.endswith('.tar')) == sorted(
            u.split('/', 3)[3] for u in remote.source.shards
        )
        assert len(_asked(s3)) < len(order)  # the index's reads (the first time) included
    s3.log.clear()
    list(remote._reads(*zip(*pairs)))  # in order: a shard's samples one request
    assert len(_asked(s3)) == len(remote.source.shards)
    assert remote._pool is None  # no threads of the reader's own


def test_span_reader_changed_shard_named(s3, tmp_path):
    "A shard replaced in the bucket by one of another size: the error a sample read alone gives (its size named), never another sample's bytes."
    from timmdata.sources.spans import ShardChangedError

    remote, _ = _span_readers(s3, tmp_path)
    key = next(k for k in s3.objects if k.endswith('.tar'))
    s3.objects[key] = s3.objects[key] + bytes(10240)
    s = remote.source.shards.index(s3.url(key))
    with pytest.raises(ShardChangedError, match='its spans were made'):
        list(remote._reads([s] * remote.lengths[s], list(range(remote.lengths[s]))))


def test_parquet_reader_windows_as_local(s3, tmp_path):
    "Parquet files in a bucket: each sample as read from the local copy, in the order asked; close images one request; no reader threads."
    pytest.importorskip('pyarrow')
    from _helpers import remote_test_datasets
    from timmdata.parquet.source import ParquetSource

    root = remote_test_datasets(tmp_path, 24, plain=False)
    _upload(s3, root / 'pq', 'pq')
    remote, local = (ParquetSource(w, 'train').by_position() for w in (s3.url('pq'), str(root / 'pq')))
    pairs = [(s, m) for s in range(len(remote.source.shards)) for m in range(remote.lengths[s])]
    for order in (pairs, random.Random(2).sample(pairs, len(pairs))):
        shards, members = [s for s, _ in order], [m for _, m in order]
        s3.log.clear()
        assert list(remote._reads(shards, members)) == list(local._reads(shards, members))
        assert len(_asked(s3)) < len(order)
    assert not [t for t in threading.enumerate() if t.name.startswith('timmdata-parquet')]
