"""Datasets in an object store: a real S3 server on this machine (moto's, `timmdata.net.local_s3.LocalS3`), started for
these tests and torn down after. WebDataset shards with and without their dataset index, and Parquet folders with and
without theirs, read by position over `s3://`: every sample once an epoch, the same batches as a local read of the same
files, exact resume on other ranks and workers, the dataset index in one request, the node cache shared by processes,
and a bucket that lies (wrong lengths, wrong ranges, throttling, stalls) named, never read on."""

import json, os, subprocess, sys

import numpy as np

import pytest

pytest.importorskip('obstore')
pytest.importorskip('moto')
pytest.importorskip('pyarrow')
from _helpers import REMOTE_KINDS, assert_read_as_local, epoch_labels, remote_test_datasets
from timmdata import create_dataset, create_loader
from timmdata.dataset import ImageDataset
from timmdata.net.local_s3 import LocalS3
from timmdata.sources.shard_io import ShardNotFoundError

N = 24  # samples, one a class: a batch's labels say which samples it holds
BATCH = 6


@pytest.fixture(scope='module')
def s3(tmp_path_factory):
    "A local S3 server with the sample-data generator's 24 images as shards (with their index, and a copy without) and as Parquet folders (with and without an index)."
    root = remote_test_datasets(tmp_path_factory.mktemp('s3data'), N)
    with LocalS3() as store:
        for name in ('shards', 'plain', 'pq', 'pq_plain'):
            store.upload(root / name, name)
        store.root = root
        yield store  # conftest's forks_as_before closes the clients when the file ends


def _labels(name, root, split, workers, epoch=0, **kw):
    return epoch_labels(name, root, split, workers, BATCH, epoch, **kw)


@pytest.mark.slow
@pytest.mark.parametrize('kind', list(REMOTE_KINDS))
def test_every_sample_once_and_as_local(s3, kind):
    "Each kind of dataset over s3:// gives, without workers and with two, the batches a local read of the same files gives; every sample once."
    assert_read_as_local(kind, s3.root, s3.url, N, BATCH)


def test_index_in_one_request(s3):
    "Shards with their dataset index: up to the first batch in hand, no listing and no HEAD; making the loader reads `_info.json` and the index whole (2 GETs at most); every read after that is a ranged read."
    s3.log.clear()
    ds = create_dataset('wds/x', root=s3.url('shards'), split='train', is_training=True, batch_size=BATCH)
    dl = create_loader(ds, (3, 16, 16), BATCH, is_training=True, num_workers=0, device='cpu')
    made = list(s3.log)
    x, y = next(iter(dl))  # the first batch in hand
    first = list(s3.log)
    assert len(y) == BATCH and len(first) > len(made)
    # the index once at most (a test before may have left it cached in this process)
    names = [p.rsplit('/', 1)[-1] for m, p, r in made]
    assert len(names) == len(set(names)) and set(names) <= {'_info.json', '_timmdata_dataset_index.json'}, made
    assert all(m == 'GET' and r is None for m, p, r in made), made
    assert not any('list-type' in p or m != 'GET' for m, p, r in first), first  # no LIST, no HEAD
    assert all(r is not None for m, p, r in first[len(made):]), first[len(made):]  # then ranged reads only


DRIVER = r'''
import json, sys
from timmdata import create_dataset, create_loader
root, world, batch, workers, stop, sd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), json.loads(sys.argv[6])
per_rank, states = [], []
for r in range(world):
    ds = create_dataset('wds/x', root=root, split='train', is_training=True, batch_size=batch, rank=r, world_size=world)
    dl = create_loader(ds, (3, 16, 16), batch, is_training=True, num_workers=workers, device='cpu')
    if sd:
        dl.load_state_dict(sd)
    out = []
    for _, y in dl:
        out.append(y.tolist())
        if len(out) == stop:
            break
    per_rank.append(out); states.append(dl.state_dict())
print(json.dumps([[sum((o[t] for o in per_rank), []) for t in range(len(per_rank[0]))], states[0]]))
'''


def _run(s3, world, batch, workers, stop=0, sd=None):
    "Global batches (every rank's t-th batch, rank after rank) and rank 0's state: a child process, as a user runs it."
    out = subprocess.run(
        [
            sys.executable,
            '-c',
            DRIVER,
            s3.url('shards'),
            str(world),
            str(batch),
            str(workers),
            str(stop),
            json.dumps(sd),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.slow
def test_resume_on_other_ranks_and_workers(s3):
    "Global batch 12: cut after one global batch on 2 ranks x 2 workers, resumed on 1 rank x 1 worker: the same global batches as an uncut run; every sample once."
    ref, _ = _run(s3, 1, 12, 0)
    assert len(ref) == 2 and sorted(sum(ref, [])) == list(range(N))
    head, sd = _run(s3, 2, 6, 2, stop=1)
    tail, _ = _run(s3, 1, 12, 1, sd=sd)
    assert len(head) == 1 and len(tail) == 1 and head + tail == ref


@pytest.mark.slow
def test_node_cache_shared_by_processes(s3, tmp_path):
    "With cache_dir, each shard is downloaded once for the node: two worker processes and a second run read the cache's copies."
    name, split = REMOTE_KINDS['shards'][0], 'train'
    folder = s3.upload(s3.root / 'shards', 'cached')  # a prefix this process has not read
    s3.requests.clear()
    s3.log.clear()
    first = _labels(name, folder, split, 2, cache_dir=str(tmp_path / 'cache'))
    gets = s3.requests['GET']
    cached = [p for p in (tmp_path / 'cache').rglob('*.shard')]
    assert len(cached) == 4, cached
    shards = [p for m, p, _ in s3.log if m == 'GET' and p.endswith('.tar')]
    assert len(shards) == 4 and len(set(shards)) == 4, s3.log  # each shard downloaded once, whichever worker asked
    again = _labels(name, folder, split, 2, cache_dir=str(tmp_path / 'cache'))
    assert again == first and sorted(sum(first, [])) == list(range(N))
    assert s3.requests['GET'] - gets <= 2, s3.log  # the second run: _info.json (and the index), no shard


def test_missing_and_lying(s3):
    "A missing object, a store that answers another range, or more bytes than asked, or throttles past its retries: a named error, one line, never a wrong sample."
    with pytest.raises((ShardNotFoundError, FileNotFoundError), match='no .tar shards|not found|no such'):
        create_dataset('wds/x', root=s3.url('nothing-here'), split='train', is_training=True, batch_size=BATCH)
    for fault, says in (('range', 'not the range asked'), ('long', 'longer'), ('503', 'throttled')):
        ds = create_dataset(
            'wds/x', root=s3.url('shards'), split='train', is_training=True, batch_size=BATCH, retries=0
        )
        dl = create_loader(ds, (3, 16, 16), BATCH, is_training=True, num_workers=0, device='cpu')
        s3.fault = lambda method, path, headers, f=fault: f if 'Range' in headers else None
        try:
            with pytest.raises(Exception, match=says) as e:
                list(dl)
            assert '\n' not in str(e.value)
        finally:
            s3.fault = None


def _cli(*args):
    return subprocess.run(
        [sys.executable, '-m', 'timmdata.tools.cli', *args], capture_output=True, text=True, timeout=300, env=os.environ
    )


@pytest.mark.slow
def test_index_and_check_in_the_bucket(s3):
    "`timmdata index` over s3:// writes the index into the bucket (shards: scanned by ranged reads; Parquet: read by ranges), and streams then read it; `timmdata check` decodes every image there; a URL given to `timmdata cache` is one line saying what to do."
    plain = s3.upload(s3.root / 'plain', 'to_index')
    out = _cli('index', plain)
    assert out.returncode == 0 and '_timmdata_dataset_index.json' in out.stdout, out.stderr
    s3.log.clear()
    local = _labels('wds/x', str(s3.root / 'shards'), 'train', 0)
    assert _labels('wds/x', plain, 'train', 0) == local
    assert any(p.endswith('/to_index/_timmdata_dataset_index.json') for m, p, r in s3.log), s3.log  # the index read
    pq = s3.upload(s3.root / 'pq_plain', 'pq_to_index')
    out = _cli('index', pq)
    assert out.returncode == 0 and 'exact reads' in out.stdout, out.stderr
    assert _labels('parquet/x', pq, 'train', 0) == _labels('parquet/x', str(s3.root / 'pq'), 'train', 0)
    for root, more in ((pq, []), (s3.url('shards'), ['--split', 'train'])):
        out = _cli('check', root, '--workers', '0', '--no-progress', *more)
        assert out.returncode == 0 and f'checked {N} images' in out.stdout, (out.stdout, out.stderr)


@pytest.mark.slow
@pytest.mark.slow
def test_cache_past_folder_markers(s3, tmp_path):
    "Folder markers as the S3 console makes them (empty `folder/` objects, which obstore lists without their last `/`): `timmdata cache s3://` skips them, says how many, and builds every split."
    import urllib.request

    url = s3.upload(s3.root / 'photos', 'marked')
    for key in ('marked/', 'marked/train/', 'marked/val/'):  # put past obstore, which drops a key's last '/'
        req = urllib.request.Request(f'http://127.0.0.1:{s3.port}/{s3.bucket}/{key}', data=b'', method='PUT')
        urllib.request.urlopen(req, timeout=30).read()
    out = _cli('cache', url, str(tmp_path / 'store'), '--workers', '0')
    assert out.returncode == 0 and 'cached 2 splits' in out.stdout, out.stderr
    assert 'marked/train: skipped 1 folder marker(s)' in out.stderr, out.stderr  # each split is listed on its own
    assert sorted(p.name for p in (tmp_path / 'store').iterdir() if p.is_dir()) == ['train', 'val']


def test_cache_from_the_bucket(s3, tmp_path):
    "`timmdata cache s3://...` builds each split's store as from the local folder (the same pixels and labels); run again, it lists the bucket and downloads nothing; a web address is one line saying what to do."
    photos = s3.upload(s3.root / 'photos', 'photos')
    assert _cli('cache', str(s3.root / 'photos'), str(tmp_path / 'local'), '--workers', '0').returncode == 0
    out = _cli('cache', photos, str(tmp_path / 'remote'), '--workers', '0')
    assert out.returncode == 0 and 'cached 2 splits' in out.stdout, out.stderr
    for split in ('train', 'val'):
        a, b = ImageDataset(str(tmp_path / 'local' / split)), ImageDataset(str(tmp_path / 'remote' / split))
        assert len(a) == len(b) > 0
        for i in range(len(a)):
            (x, y), (x2, y2) = a[i], b[i]
            assert y == y2 and np.array_equal(np.asarray(x), np.asarray(x2)), (split, i)
    assert sorted(os.listdir(tmp_path)) == ['local', 'remote']  # the downloaded copies are gone
    s3.log.clear()
    out = _cli('cache', photos, str(tmp_path / 'remote'), '--workers', '0')
    assert out.returncode == 0 and out.stdout.count('up to date') == 2, out.stdout
    assert s3.log and all('list-type=2' in p for m, p, r in s3.log), s3.log  # listings only
    out = _cli('cache', 'https://example.invalid/photos', str(tmp_path / 'web'))
    assert out.returncode == 2 and 'cache_dir=' in out.stderr and out.stderr.count('\n') == 1, out.stderr
