"""Object stores that lie or never end, against a fake S3 server in this process (`_fake_s3.FakeS3`, for what moto's
real one will not do): an ETag that changes under a store that ignores `If-Match`, listings without end or that
repeat, a continuation token that makes the client panic, a `Last-Modified` in the year 99999, a body that drips
slowly but steadily, a redirect to another host. Each is a named error (never a wrong sample, never a dead worker,
never a token sent elsewhere) or, for the slow body, read whole."""
import itertools, threading, time
import pytest

pytest.importorskip('obstore')
from _fake_s3 import FakeS3, _Handler, _Server
from timmdata.core.untrusted import resident_bytes
from timmdata.net import object_store as O
from timmdata.sources import shard_io


@pytest.fixture
def s3():
    with FakeS3() as s:
        s.objects['a/x.bin'] = bytes(range(256)) * 4
        yield s


def test_etag_checked_when_if_match_is_ignored(s3):
    "The object replaced between two reads, behind a store that ignores If-Match: ObjectChangedError naming it, not the old offsets read."
    url = s3.url('a/x.bin')
    O.object_range(url, 0, 10)
    s3.etag = lambda key: '"replaced"'
    with pytest.raises(O.ObjectChangedError, match=r's3://fake/a/x\.bin changed while it was read'):
        O.object_range(url, 10, 10, retries=0)
    with pytest.raises(shard_io.ShardError, match='changed while it was read'), shard_io.as_shard_errors():
        O.object_range(url, 10, 10, retries=0)


def test_etag_checked_on_concurrent_reads(s3):
    "The same through object_get_many (the readers' concurrent, merged reads): the replaced object named, no old bytes handed out."
    url = s3.url('a/x.bin')
    assert [len(b) for _, b in O.object_get_many([(url, 0, 10), (url, 600, 10)])] == [10, 10]
    s3.etag = lambda key: '"replaced"'
    with pytest.raises(O.ObjectChangedError, match=r's3://fake/a/x\.bin changed while it was read'):
        O.object_get_many([(url, 100, 10), (url, 900, 10)], retries=0)


def test_year_99999_is_a_named_error(s3):
    "A Last-Modified the client cannot turn into a date: the store's error, from a HEAD, a ranged read and a stream."
    s3.last_modified = 'Fri, 01 Jan 99999 00:00:00 GMT'
    url = s3.url('a/x.bin')
    for call in (lambda: O.object_head(url), lambda: O.object_range(url, 0, 10, retries=0), lambda: O.ObjectReader(url)):
        with pytest.raises(O.ObjectStoreError, match=r'a/x\.bin: .*year 99999'):
            call()
    with pytest.raises(shard_io.ShardError, match='year 99999'):
        shard_io.open_shard(url)


def test_client_panic_is_a_named_error(s3):
    "A 200 KB continuation token: the client's Rust code panics (a BaseException): an ObjectStoreError naming the folder."
    s3.lister = lambda q: ([('a/k%f' % time.time(), 1)], [], 'T' * 200_000)
    with pytest.raises(O.ObjectStoreError, match='s3://fake/a: '):
        O.list_objects(s3.url('a'), recursive=True)


def test_listing_without_end_stops_at_its_deadline(s3):
    "Pages that never end (empty, each with a new token): a ListingError at the deadline, recursive or not; no page asked after."
    count = itertools.count()
    s3.lister = lambda q: ([], [], f'tok{next(count)}')
    for recursive in (True, False):
        with pytest.raises(O.ListingError, match='not listed within 1 s.*timmdata index'):
            O.list_objects(s3.url('a'), recursive=recursive, deadline=1.0)
        pages = s3.pages
        time.sleep(0.5)
        assert s3.pages - pages <= 1, 'the listing went on after its deadline'


def test_listing_of_empty_pages_stops_when_idle(s3, monkeypatch):
    "Empty pages without end, under a long deadline: a recursive listing stops after LIST_IDLE without a new object, naming it."
    count = itertools.count()
    s3.lister = lambda q: ([], [], f'tok{next(count)}')
    monkeypatch.setattr(O, 'LIST_IDLE', 0.5)
    t0 = time.monotonic()
    with pytest.raises(O.ListingError, match=r's3://fake/a: no object listed for 0.5 s, after 0 \(a store that answers empty pages'):
        O.list_objects(s3.url('a'), recursive=True, deadline=60)
    assert time.monotonic() - t0 < 30
    pages = s3.pages
    time.sleep(0.5)
    assert s3.pages - pages <= 1, 'the listing went on after it was stopped'


def test_listing_page_bounded_in_memory(s3, monkeypatch):
    """A listing page of 1 GiB (blanks in it): past LIST_MEMORY added to the process's memory, a ListingError naming
    the folder and the bound, and the client's request dropped (far from the whole page read), recursive or not."""
    if resident_bytes() is None:
        pytest.skip('no /proc/self/statm here: listings are bounded by their deadline and object caps alone')
    monkeypatch.setattr(O, 'LIST_MEMORY', 32 << 20)
    monkeypatch.setattr(O, 'LISTED_BYTES', 0)
    s3.page_pad = 1 << 30
    for recursive in (True, False):
        s3.page_sent = 0
        with pytest.raises(O.ListingError, match=r's3://fake/a: this process grew by \d+ MiB while listing it, past the bound of 32 MiB'):
            O.list_objects(s3.url('a'), recursive=recursive, deadline=60)
        assert 0 < s3.page_sent < 512 << 20, s3.page_sent
    with pytest.raises(O.ListingError, match='past the bound'):
        O.list_folders(s3.url('a'))


def test_listing_that_repeats_is_stopped(s3):
    "The same page again and again (a continuation token given back): named after the second page, not listed until the deadline."
    page = [(f'a/k{i:04d}', 1) for i in range(1000)]
    s3.lister = lambda q: (page, [], 'same')
    with pytest.raises(O.ListingError, match='its listing repeats'):
        O.list_objects(s3.url('a'), recursive=True, deadline=60)


def test_listing_caps(s3, monkeypatch):
    "More objects than the cap: a ListingError saying what to do (the caller's advice); objects not kept count too (MAX_SEEN)."
    for i in range(30):
        s3.objects[f'a/f{i:02d}.jpg'] = b'x'
    with pytest.raises(O.ListingError, match='holds over 10 objects: do this'):
        O.list_objects(s3.url('a'), recursive=True, limit=10, advice='do this')
    monkeypatch.setattr(O, 'MAX_SEEN', 20)
    with pytest.raises(O.ListingError, match='holds over 20 objects'):
        O.list_objects(s3.url('a'), '.tar', recursive=True, limit=5)


def test_one_level_with_a_delimiter(s3):
    "Not recursive: one listing with a delimiter (what is below the folder is not listed); its folders listed alone."
    for i in range(5):
        s3.objects[f'a/sub/deep{i}.tar'] = b'x'
    s3.log.clear()
    assert O.list_objects(s3.url('a'), relative=True) == ['x.bin']
    assert [dict(p.split('=') for p in path.split('?')[1].split('&')).get('delimiter') for m, path, h in s3.log] == ['%2F']
    assert O.list_folders(s3.url('a')) == ['sub']


def test_slow_steady_body_comes_through(s3, monkeypatch):
    "A stream that sends a part every 0.2 s: read whole with an idle bound of 1 s, past its deadline of 1 s (it grows with the size); a drip slower than that named."
    s3.objects['a/slow.bin'] = bytes(range(256)) * 160  # 40 KB, in 4 KB parts: about 2 s
    s3.pause, s3.chunk = 0.2, 4096
    monkeypatch.setattr(O, 'READ_RATE', 10_000, raising=False)  # 1 s + 40 KB at 10 KB/s: 5 s
    with O.object_open(s3.url('a/slow.bin'), timeout=1.0, deadline=1.0) as f:
        assert f.read() == s3.objects['a/slow.bin']
    monkeypatch.setattr(O, 'READ_RATE', 1 << 30, raising=False)  # no growth: the 1 s deadline holds
    with pytest.raises(O.DeadlineError, match='deadline of 1 s'):
        with O.object_open(s3.url('a/slow.bin'), timeout=1.0, deadline=1.0) as f:
            f.read()


def test_no_redirect_to_another_host(s3, monkeypatch):
    "A 307 to another host: not followed, so the session token (x-amz-security-token) never reaches it; a named error."
    other = FakeS3()
    srv = _Server(('127.0.0.1', 0), _Handler)
    srv.s3 = other
    threading.Thread(target=srv.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True).start()
    try:
        other.objects['a/x.bin'] = b'elsewhere'
        monkeypatch.setenv('AWS_SESSION_TOKEN', 'SESSION-SECRET')
        O.close_clients()
        s3.redirects['r.bin'] = f'http://localhost:{srv.server_port}/fake/a/x.bin'
        with pytest.raises(O.ObjectStoreError, match='redirect to another host is not followed') as e:
            O.object_range(s3.url('r.bin'), 0, 9, retries=0)
        assert 'SESSION-SECRET' not in str(e.value)
        assert other.log == [], [h.get('x-amz-security-token') for _, _, h in other.log]
        assert O.object_range(s3.url('a/x.bin'), 0, 4, retries=0)[1] == bytes(range(4))  # the store's own host: read
    finally:
        srv.shutdown(); srv.server_close(); O.close_clients()
