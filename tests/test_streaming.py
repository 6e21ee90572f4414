"""Streaming shards (issue 15, read side): WebDataset shards in timm's layout, epochs over workers and ranks through
create_loader, persistent workers and set_epoch, bad samples, missing/truncated shards, shards over HTTP with retries."""
import functools, http.server, io, json, socket, subprocess, sys, tarfile, threading, time, warnings
from pathlib import Path
import pytest, torch
from PIL import Image

wds = pytest.importorskip('webdataset')
from timmdata.loader import create_loader
from timmdata.sources.shard_io import ShardNotFoundError, ShardTruncatedError, TransientShardError
from timmdata.sources.wds import WdsSource
from timmdata.streams.streaming import IterableImageDataset
from _helpers import free_port

N_SHARDS, PER_SHARD = 8, 4  # 32 samples; 2 workers x batches of 4: 16 per worker, every sample once per epoch


def _jpeg(i):
    b = io.BytesIO(); Image.new('RGB', (20, 16), ((37 * i) % 256, (91 * i) % 256, 60)).save(b, 'JPEG'); return b.getvalue()


def write_timm_shards(root, n_shards=N_SHARDS, per_shard=PER_SHARD, split='train', bad=()):
    "Shards written by webdataset's ShardWriter in timm's wds layout; the class is the sample's index (to see which came)."
    root = Path(root); root.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(root / f'toy-{split}-%06d.tar'), maxcount=per_shard, verbose=0) as w:
        for i in range(n_shards * per_shard):
            w.write({'__key__': f'{split}_{i:05d}', 'jpg': b'\xff\xd8 broken' if i in bad else _jpeg(i), 'cls': i})
    names = sorted(p.name for p in root.glob(f'toy-{split}-*.tar'))
    info = {'name': 'toy', 'splits': {split: {'name': split, 'num_samples': n_shards * per_shard, 'filenames': names,
                                              'shard_lengths': [per_shard] * n_shards}}}
    (root / '_info.json').write_text(json.dumps(info))
    return root


@pytest.fixture(scope='module')
def shards(tmp_path_factory): return write_timm_shards(tmp_path_factory.mktemp('shards'))


def _epoch(loader):
    "(targets in order, batch count) of one pass of a PrefetchLoader."
    ys, n = [], 0
    for x, y in loader:
        assert x.dtype == torch.float32 and x.shape[1:] == (3, 16, 16)
        ys += y.tolist(); n += 1
    return ys, n


def test_timm_layout_shards_open(shards):
    src = WdsSource(shards, 'train')
    assert src.num_samples == 32 and len(src.shards) == N_SHARDS and src.shard_lengths == [PER_SHARD] * N_SHARDS
    keys = [k for s in src.shards for k, _, _ in src.iter_shard(s)]
    assert keys == [f'train_{i:05d}' for i in range(32)]
    ds = IterableImageDataset(shards, reader='wds/toy', split='train')
    img, y = next(iter(ds))
    assert img.size == (20, 16) and y == 0 and len(ds) == 32


def test_epochs_persistent_workers_prefetcher(shards):
    "2 persistent workers through create_loader: every sample once per epoch, new order per epoch seen by the workers."
    ds = IterableImageDataset(shards, reader='wds/toy', is_training=True, batch_size=4, shuffle_size=16, shuffle_initial=4)
    loader = create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=2, persistent_workers=True, device='cpu')
    assert len(loader) == 8
    epochs = []
    for e in range(3):
        ds.set_epoch(e)  # timm's train script does this (distributed) before each epoch; the workers are already running
        ys, n = _epoch(loader)
        assert n == 8 and sorted(ys) == list(range(32)), f'epoch {e}: {sorted(ys)}'
        epochs.append(ys)
    assert epochs[0] != epochs[1] != epochs[2]
    # the order persistent workers gave in epoch 2 is the one a fresh loader gives for epoch 2: no stale epoch
    fresh = IterableImageDataset(shards, reader='wds/toy', is_training=True, batch_size=4, shuffle_size=16, shuffle_initial=4)
    fresh.set_epoch(2)
    ys, _ = _epoch(create_loader(fresh, (3, 16, 16), 4, is_training=True, num_workers=2, device='cpu'))
    assert ys == epochs[2]
    # the persistent workers looked ahead (the loader turned it on: a batch each), their guesses taken where right; an
    # epoch again (the guess, 3, dropped) gives that epoch's order once more
    assert ds._ahead_size == 4
    ds.set_epoch(2)
    ys, n = _epoch(loader)
    assert n == 8 and ys == epochs[2]


def test_main_process_loader_and_uint8_fast_path(shards):
    "0 workers; the train transform gets encoded JPEGs (crop-aware decode) and batches are uint8 until the prefetcher."
    ds = IterableImageDataset(shards, reader='wds/toy', is_training=True, batch_size=4, shuffle_size=16, shuffle_initial=4)
    loader = create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=0, device='cpu')
    assert ds._encoded, 'the train transform should take not-yet-decoded JPEGs'
    raw = next(iter(loader.loader))
    assert raw[0].dtype == torch.uint8
    ys, n = _epoch(loader)
    assert n == 8 and sorted(ys) == list(range(32))


def test_equal_counts_per_rank_uneven_shards(shards):
    "order='shards': 8 shards over 3 ranks x 1 worker: each rank yields ceil(32/3)=11 -> 12 (whole batches of 4); a short one wraps round."
    counts, seen = [], []
    for r in range(3):
        d = IterableImageDataset(shards, reader='wds/toy', is_training=True, batch_size=4, rank=r, world_size=3,
                                 shuffle_size=16, shuffle_initial=4, order='shards')
        ys = [y for _, y in d]
        counts.append(len(ys)); seen.append(ys)
        assert len(ys) == len(d) == 12
    assert counts == [12, 12, 12]
    # the rank with 2 shards (8 samples) wraps round and gives 4 of them twice; those with 3 shards give each of 12 once
    assert sorted(len(set(s)) for s in seen) == [8, 12, 12]
    assert len(set(sum(seen, []))) == 32
    with pytest.raises(RuntimeError, match='8 shards cannot feed 9 global workers'):
        list(IterableImageDataset(shards, reader='wds/toy', is_training=True, rank=0, world_size=9, order='shards'))


def test_validation_exactly_once_over_ranks_and_workers(shards):
    got = []
    for r in range(3):
        d = IterableImageDataset(shards, reader='wds/toy', rank=r, world_size=3)
        loader = create_loader(d, (3, 16, 16), 5, num_workers=2, device='cpu')
        ys, _ = _epoch(loader)
        assert len(ys) == len(d)
        got += ys
    assert sorted(got) == list(range(32))


def test_bad_sample_skip_counted_across_workers(tmp_path):
    root = write_timm_shards(tmp_path, n_shards=4, per_shard=4, bad=(5, 10))
    with pytest.raises(OSError, match=r"sample 'train_00005' of shard .*toy-train-000001.tar could not be decoded"):
        list(IterableImageDataset(root, reader='wds/toy'))
    ds = IterableImageDataset(root, reader='wds/toy', is_training=True, batch_size=4, bad_sample='skip')
    loader = create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=2, device='cpu')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ys, n = _epoch(loader)
    assert n == 4 and sorted(ys) == sorted(set(range(16)) - {5, 10}) and ds.bad_sample_count == 2


def test_missing_and_truncated_shards_named(tmp_path):
    root = write_timm_shards(tmp_path, n_shards=2, per_shard=4)
    data = (root / 'toy-train-000001.tar').read_bytes()
    (root / 'toy-train-000001.tar').write_bytes(data[:len(data) // 2])
    ds = IterableImageDataset(root, reader='wds/toy')
    import timmdata.sources.shard_io as sio
    waits = []  # a truncated local file is not worth retrying: no back-off wait before the error
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sio.time, 'sleep', waits.append)
        with pytest.raises(ShardTruncatedError, match='toy-train-000001.tar is truncated'):
            list(ds)
    assert waits == [], waits
    (root / 'toy-train-000001.tar').unlink()
    with pytest.raises(ShardNotFoundError, match='toy-train-000001.tar does not exist'):
        list(ds)



def test_shard_cut_between_members_is_an_error_not_a_short_shard(tmp_path):
    "Why the tar reader is ours: webdataset's (tarfile in stream mode) reads a shard cut between two samples as a shorter shard."
    root = write_timm_shards(tmp_path, n_shards=1, per_shard=6)
    path = root / 'toy-train-000000.tar'
    with tarfile.open(path) as tf: starts = [m.offset for m in tf.getmembers()]
    data = path.read_bytes()
    path.write_bytes(data[:starts[6]])  # members are (cls, jpg) pairs: the cut falls right after the third sample
    assert len(list(wds.WebDataset(str(path), shardshuffle=False))) == 3  # silently 3 of 6 samples
    with pytest.raises(ShardTruncatedError, match='toy-train-000000.tar is truncated'):
        list(IterableImageDataset(root, reader='wds/toy'))


@pytest.fixture(scope='module')
def http_root(shards):
    "`python -m http.server` in a subprocess serving the shard folder."
    port = free_port()
    p = subprocess.Popen([sys.executable, '-m', 'http.server', str(port), '--bind', '127.0.0.1', '--directory', str(shards)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f'http://127.0.0.1:{port}'
    for _ in range(100):
        try:
            socket.create_connection(('127.0.0.1', port), timeout=0.2).close(); break
        except OSError: time.sleep(0.05)
    yield url
    p.terminate(); p.wait()


def test_http_shards(http_root, shards):
    ds = IterableImageDataset(http_root, reader='wds/toy', is_training=True, batch_size=4, shuffle_size=16, shuffle_initial=4, order='shards')
    assert ds.source.shards[0] == http_root + '/toy-train-000000.tar' and ds.num_samples == 32
    loader = create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=2, device='cpu')
    ys, n = _epoch(loader)
    assert n == 8 and sorted(ys) == list(range(32))
    local = IterableImageDataset(shards, reader='wds/toy', is_training=True, batch_size=4, shuffle_size=16, shuffle_initial=4, order='shards')
    ys_local, _ = _epoch(create_loader(local, (3, 16, 16), 4, is_training=True, num_workers=2, device='cpu'))
    assert ys == ys_local  # the same stream whether read from disk or over HTTP
    with pytest.raises(ShardNotFoundError, match=r'toy-train-000099.tar not found \(HTTP 404\)'):
        list(WdsSource(http_root, 'toy-train-000099.tar').iter_shard(http_root + '/toy-train-000099.tar'))


class _Flaky(http.server.SimpleHTTPRequestHandler):
    "Fails some requests: 'refuse' answers 503, 'cut' sends half the promised bytes and hangs up."
    plan = []
    def do_GET(self):
        what = self.plan.pop(0) if self.plan else 'ok'
        if what == '503': self.send_error(503); return
        if what == 'cut':
            data = Path(self.directory, self.path.lstrip('/')).read_bytes()
            self.send_response(200); self.send_header('Content-Length', str(len(data))); self.end_headers()
            self.wfile.write(data[:len(data) // 2 + 700]); self.wfile.flush(); self.close_connection = True; return
        super().do_GET()
    def log_message(self, *a): pass


def test_http_retry_transient_failures(shards):
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(_Flaky, directory=str(shards)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f'http://127.0.0.1:{srv.server_port}'
    try:
        src = WdsSource(url, 'train', backoff=0.01)  # reads _info.json: one request
        shard = src.shards[3]
        _Flaky.plan[:] = ['503', 'cut', 'ok']  # a busy server, then a connection cut mid-shard, then fine
        got = [k for k, _, _ in src.iter_shard(shard)]
        assert got == [f'train_{i:05d}' for i in range(12, 16)]  # no sample lost or given twice across the retries
        assert _Flaky.plan == []
        _Flaky.plan[:] = ['503'] * 5
        with pytest.raises(TransientShardError, match=r'toy-train-000003.tar failed 4 times .*HTTP 503.*check the network'):
            list(src.iter_shard(shard))
    finally:
        srv.shutdown(); _Flaky.plan[:] = []


def test_hfids_reader_split_over_ranks(tmp_path):
    "hfids/ through S2's HfidsSource: a Hugging Face stream's data files are the shards, dealt over ranks like tar shards."
    datasets = pytest.importorskip('datasets')
    feats = datasets.Features({'image': datasets.Image(), 'label': datasets.Value('int64')})
    files = []
    for k in range(2):
        rows = {'image': [{'bytes': _jpeg(i), 'path': None} for i in range(6 * k, 6 * k + 6)], 'label': list(range(6 * k, 6 * k + 6))}
        files.append(str(tmp_path / f'part{k}.parquet')); datasets.Dataset.from_dict(rows, features=feats).to_parquet(files[-1])
    got = []
    for r in range(2):
        d = IterableImageDataset(None, reader='hfids/parquet', split='train', data_files=files, is_training=True, num_samples=12,
                                 batch_size=2, rank=r, world_size=2, order='shards')
        ys = [y for _, y in d]
        assert len(ys) == len(d) == 6
        got += ys
    assert sorted(got) == list(range(12))



def test_hfids_with_loader_workers(tmp_path):
    "hfids/ read by two DataLoader workers: each worker reads the whole of the files it is dealt (datasets would split a file's rows among the workers again, leaving one without samples)."
    datasets = pytest.importorskip('datasets')
    from timmdata import create_loader
    feats = datasets.Features({'image': datasets.Image(), 'label': datasets.Value('int64')})
    files = []
    for k in range(4):
        rows = {'image': [{'bytes': _jpeg(i), 'path': None} for i in range(4 * k, 4 * k + 4)], 'label': list(range(4 * k, 4 * k + 4))}
        files.append(str(tmp_path / f'part{k}.parquet')); datasets.Dataset.from_dict(rows, features=feats).to_parquet(files[-1])
    d = IterableImageDataset(None, reader='hfids/parquet', split='train', data_files=files, is_training=True, num_samples=16, batch_size=4,
                             order='shards')
    dl = create_loader(d, (3, 16, 16), 4, is_training=True, num_workers=2, device='cpu')
    ys = [y for _, t in dl for y in t.tolist()]
    assert sorted(ys) == list(range(16))

def test_fsspec_url_shards(shards):
    "Any other scheme (s3://, gs://...) goes through fsspec: here its in-memory filesystem, _info.json included."
    fsspec = pytest.importorskip('fsspec')
    fs = fsspec.filesystem('memory')
    for p in Path(shards).iterdir(): fs.pipe(f'/fsspec_shards/{p.name}', p.read_bytes())
    ds = IterableImageDataset('memory://fsspec_shards', reader='wds/toy', split='train')
    assert sorted(y for _, y in ds) == list(range(32))
    with pytest.raises(ShardNotFoundError, match='fsspec_shards/missing'):
        list(IterableImageDataset('memory://fsspec_shards', reader='wds/toy', split='missing-{000000..000001}.tar|8'))


@pytest.mark.parametrize('order', ['shards', 'global'])
def test_stream_defers_pixels_with_the_same_batches(shards, order):
    "A stream's training crops wait for the collate (one native call per batch), declared, not found by a type check: the batches are those made sample by sample, bit for bit."
    def run(defer):
        ds = IterableImageDataset(shards, reader='wds/toy', is_training=True, batch_size=4, order=order)
        ld = create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=2, device='cpu', seed=5, re_prob=0.25)
        assert ds.defer_pixels is True and ds.can_defer  # told by the loader: fast_collate makes pending pixels
        ds.defer_pixels = defer
        return [(x.clone(), y.clone()) for x, y in ld]
    a, b = run(True), run(False)
    assert len(a) == len(b) == 32 // 4
    for (x1, y1), (x2, y2) in zip(a, b, strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
