"""Streams in thread mode: `create_loader(stream, worker_mode='thread')` over WebDataset shards (with and without the
dataset index, each training order and evaluation), a Parquet folder, `hfids/` and a mix gives the batches of worker
processes, bit for bit, in the same order and as many, every sample once an epoch; a state saved mid-epoch in one mode
resumes in the other with the same remaining batches."""

import io, warnings
from pathlib import Path
import pytest, torch
from PIL import Image

pytest.importorskip('webdataset')
from timmdata.loader import create_loader
from timmdata.streams.streaming import IterableImageDataset
from _helpers import run_epochs, same_batches, write_shards

N_SHARDS, PER_SHARD, N, B = 8, 5, 40, 4  # 40 samples, batches of 4; label i is sample i


def _jpeg(i, s=0):
    b = io.BytesIO()
    Image.new('RGB', (24, 20), ((37 * i) % 256, (91 * i) % 256, 60 + s)).save(b, 'JPEG')
    return b.getvalue()


@pytest.fixture(scope='module')
def plain(tmp_path_factory):
    "Shards without the dataset index (each parsed front to back)."
    root = tmp_path_factory.mktemp('plain')
    write_shards(root, 'ts', N_SHARDS, PER_SHARD, _jpeg)
    return root


@pytest.fixture(scope='module')
def indexed(tmp_path_factory):
    "The same shards with the dataset index (`timmdata index`): samples read by position."
    from timmdata.index.dataset_index import write_dataset_index

    root = tmp_path_factory.mktemp('indexed')
    write_shards(root, 'ts', N_SHARDS, PER_SHARD, _jpeg)
    write_dataset_index(root, progress=False)
    return root


def _stream(root, train=True, order=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # order='shards' without an index says so once
        return IterableImageDataset(
            str(root),
            reader='wds/ts',
            split='train',
            is_training=train,
            batch_size=B,
            order=order,
            shuffle_size=8,
            shuffle_initial=2,
            block_shards=3,
            **kw,
        )


def _loader(ds, mode, workers=2, train=True, **kw):
    args = dict(is_training=train, num_workers=workers, device='cpu', seed=5, re_prob=0.25, worker_mode=mode) | kw
    ld = create_loader(ds, (3, 16, 16), B, **args)
    assert (ld.loader.worker_mode if hasattr(ld, 'loader') else ld.worker_mode) == mode
    return ld


def _each_once(batches, n, epochs):
    "Every sample (its label) once in each epoch's batches."
    ys = [int(t) for _, y in batches for t in y]
    assert len(ys) == n * epochs, (len(ys), n * epochs)
    per = len(ys) // epochs
    for e in range(epochs):
        assert sorted(ys[e * per : (e + 1) * per]) == list(range(n)), f'epoch {e}'


WORKERS_3 = pytest.mark.filterwarnings('ignore:This DataLoader will create 3 worker processes')  # on a 2-core machine
CASES = {  # (fixture, is_training, order, workers)
    'shards-order': ('plain', True, 'shards', 2),  # shards dealt to workers, a buffer shuffle
    'global-by-blocks': ('plain', True, 'global', 2),  # the global order, each block's shards read from their starts
    'eval-uneven': ('plain', False, None, 3),  # 3 workers: shares of 15, 15 and 10 samples, short last batches
    'indexed-global': ('indexed', True, None, 2),  # the global order, each sample read by position
    'indexed-shards': ('indexed', True, 'shards', 2),  # shards order, positions shuffled and read by position
    'indexed-eval': ('indexed', False, None, 3),
}


@WORKERS_3
@pytest.mark.parametrize('case', list(CASES))
def test_threads_give_the_process_batches(case, request):
    fixture, train, order, workers = CASES[case]
    root = request.getfixturevalue(fixture)
    run = lambda mode: run_epochs(_loader(_stream(root, train, order), mode, workers, train), 2)[0]
    procs, threads = run('process'), run('thread')
    assert len(threads) == len(procs) > 0
    same_batches(threads, procs)
    _each_once(threads, N, 2)


@pytest.mark.parametrize('order', ['shards', 'global'])
@pytest.mark.parametrize('first,then', [('thread', 'process'), ('process', 'thread')])
def test_resume_across_modes(indexed, plain, order, first, then):
    "Cut mid-epoch after 3 batches (worker 1's turn next) in one mode, resumed in the other: the uninterrupted run's batches."
    root = plain if order == 'shards' else indexed
    mk = lambda mode: _loader(_stream(root, True, order), mode)
    ref, _ = run_epochs(mk(first), 2)
    head, sd = run_epochs(mk(first), 2, stop=3)
    assert sd['epoch'] == 0 and sd['batches_delivered'] == 3
    tail, _ = run_epochs(mk(then), 2, sd=sd)
    assert len(head) + len(tail) == len(ref) == 2 * N // B
    same_batches(head + tail, ref)
    _each_once(head + tail, N, 2)


def test_parquet_folder(tmp_path):
    pytest.importorskip('pyarrow')
    from timmdata.dataset_factory import create_dataset
    from timmdata.parquet.source import write_sample_parquet

    write_sample_parquet(
        tmp_path, [(_jpeg(i), i) for i in range(N)], [f'c{i}' for i in range(N)], files=4, row_group_size=4
    )
    mk = lambda: create_dataset(
        'parquet/x', root=str(tmp_path), split='train', is_training=True, batch_size=B, block_shards=3
    )
    procs = run_epochs(_loader(mk(), 'process'), 2)[0]
    threads = run_epochs(_loader(mk(), 'thread'), 2)[0]
    assert len(threads) == len(procs) == 2 * N // B
    same_batches(threads, procs)
    _each_once(threads, N, 2)


def test_hfids(tmp_path):
    "hfids/ (a Hugging Face stream of local Parquet files, its files the shards)."
    datasets = pytest.importorskip('datasets')
    feats = datasets.Features({'image': datasets.Image(), 'label': datasets.Value('int64')})
    files = []
    for k in range(4):
        rows = {
            'image': [{'bytes': _jpeg(i), 'path': None} for i in range(4 * k, 4 * k + 4)],
            'label': list(range(4 * k, 4 * k + 4)),
        }
        files.append(str(tmp_path / f'part{k}.parquet'))
        datasets.Dataset.from_dict(rows, features=feats).to_parquet(files[-1])
    mk = lambda: IterableImageDataset(
        None,
        reader='hfids/parquet',
        split='train',
        data_files=files,
        is_training=True,
        num_samples=16,
        batch_size=B,
        order='shards',
    )
    procs = run_epochs(_loader(mk(), 'process'), 2)[0]
    threads = run_epochs(_loader(mk(), 'thread'), 2)[0]
    assert len(threads) == len(procs) == 2 * 16 // B
    same_batches(threads, procs)
    _each_once(threads, 16, 2)


def test_mix_of_shards(indexed, plain):
    "A mix of two shard folders (read by position), each sample at most once (exhausted='stop'), threads as processes."
    from timmdata.mix.mixing import mix_datasets
    from timmdata.readers.core import create_reader

    mk = lambda: mix_datasets(
        [create_reader('wds/ts', root=str(r), split='train') for r in (indexed, plain)],
        weights=[0.6, 0.4],
        labels=[0, 100],
        exhausted='stop',
    )
    procs = run_epochs(_loader(mk(), 'process', train=False), 1)[0]
    threads = run_epochs(_loader(mk(), 'thread', train=False), 1)[0]
    assert len(threads) == len(procs) > 0
    same_batches(threads, procs)
    ys = [int(t) for _, y in threads for t in y]
    assert len(ys) == len(set(ys)) and all(y % 100 < N for y in ys)


def test_stopped_pass_and_next_pass(indexed):
    "A pass left after 2 batches: the next pass (a new epoch) stops its threads first and gives the whole epoch."
    ld = _loader(_stream(indexed), 'thread')
    it = iter(ld)
    next(it)
    next(it)
    ld.set_epoch(1)
    got = [(x.clone(), y.clone()) for x, y in ld]
    ref = run_epochs(_loader(_stream(indexed), 'process'), 1, start=1)[0]
    assert len(got) == len(ref) == N // B
    same_batches(got, ref)


def test_refused_with_a_reason(indexed):
    "A stream that is not timmdata's, or a transform drawing from the global generators, is refused by name."

    class Own(torch.utils.data.IterableDataset):
        transform = None

        def __iter__(self):
            yield torch.zeros(3, 16, 16, dtype=torch.uint8), 0

    with pytest.raises(NotImplementedError, match='not timmdata.IterableImageDataset'):
        create_loader(Own(), (3, 16, 16), B, num_workers=2, device='cpu', worker_mode='thread')
    from timmdata.engine.resume import ResumableDataLoader
    from timmdata.engine.threads import ThreadWorkers

    ds = _stream(indexed)
    ds.transform = lambda img: torch.zeros(3, 16, 16, dtype=torch.uint8) + torch.randint(0, 2, ())  # global draws
    with pytest.raises(ValueError, match='draws explicitly|random draws explicitly'):
        ResumableDataLoader(ds, batch_size=B, workers=ThreadWorkers(2))


@pytest.mark.slow
@pytest.mark.parametrize('fixture,cache', [('plain', True), ('indexed', True), ('indexed', False)])
def test_http_shards(fixture, cache, request, tmp_path):
    "Shards over http(s), through a node cache (cache_dir: the threads share this process's) or by ranged reads: the process mode's batches."
    from _helpers import http_folder

    root = request.getfixturevalue(fixture)
    kw = lambda mode: dict(cache_dir=str(tmp_path / mode), cache_limit='10MB') if cache else {}
    with http_folder(root) as url:
        mk = lambda mode: _loader(_stream(url, True, None, **kw(mode)), mode)
        procs = run_epochs(mk('process'), 2)[0]
        threads = run_epochs(mk('thread'), 2)[0]
    assert len(threads) == len(procs) == 2 * N // B
    same_batches(threads, procs)
    _each_once(threads, N, 2)


@pytest.mark.slow
def test_bad_samples(tmp_path):
    "An undecodable sample: skipped and counted as the processes count it, or raised at the same batch, naming it."
    from timmdata.pixels.decode import ImageDecodeError

    write_shards(tmp_path, 'ts', N_SHARDS, PER_SHARD, lambda i, s: b'\xff\xd8 broken' if i == 13 else _jpeg(i, s))

    def run(mode, bad):
        out, ds = [], _stream(tmp_path, True, 'shards', bad_sample=bad)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                for x, y in _loader(ds, mode):
                    out.append((x.clone(), y.clone()))
        except ImageDecodeError as e:
            return out, str(e).splitlines()[0]
        return out, ds.bad_sample_count

    (procs, n), (threads, m) = run('process', 'skip'), run('thread', 'skip')
    assert n == m == 1 and len(threads) == len(procs) == N // B
    same_batches(threads, procs)
    assert sorted(int(t) for _, y in threads for t in y) == [i for i in range(N) if i != 13]
    (procs, e1), (threads, e2) = run('process', 'raise'), run('thread', 'raise')
    assert len(threads) == len(procs) < N // B and 'train_00013' in e1 and e1 == e2, (e1, e2)
    same_batches(threads, procs)


@pytest.mark.slow
def test_a_pass_left_stops_its_threads(indexed):
    "An iterator dropped in the middle of a pass stops its threads; a program that exits there does not wait on them."
    import gc, subprocess, sys, threading

    ld = _loader(_stream(indexed), 'thread')
    it = iter(ld)
    next(it)
    assert any(t.name.startswith('timmdata-stream-') for t in threading.enumerate())
    del it
    gc.collect()
    assert not any(t.name.startswith('timmdata-stream-') for t in threading.enumerate())
    code = (
        'import sys; sys.path.insert(0, "tests"); from pathlib import Path; from test_thread_streams import _loader, _stream; '
        f'it = iter(_loader(_stream(Path({str(indexed)!r})), "thread")); next(it); print("left", flush=True)'
    )
    out = subprocess.run(
        [sys.executable, '-c', code], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent
    )
    assert out.returncode == 0 and out.stdout.strip() == 'left', out.stderr[-2000:]
