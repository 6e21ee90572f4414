"""Loader threads over a stream look ahead as worker processes do, each worker slot its own lookahead (one stream object
serves all threads: `timmdata.streams.lookahead.AheadBySlot`), with the processes' batches, every sample once; and the
same dataset handed after them to a loader of worker processes (forked, or pickled by spawn) carries none of the
threads' lookaheads into its workers: every sample once an epoch, the batches of a dataset that never met threads."""

import pickle, warnings

import pytest

pytest.importorskip('webdataset')
from timmdata.loader import create_loader
from timmdata.streams.streaming import IterableImageDataset
from _helpers import run_epochs, same_batches, write_shards
from test_thread_streams import B, N, N_SHARDS, PER_SHARD, _jpeg  # the same 40 samples in 8 shards, batches of 4


@pytest.fixture(scope='module')
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp('shards')
    write_shards(root, 'ts', N_SHARDS, PER_SHARD, _jpeg)
    return root


def _stream(root):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return IterableImageDataset(str(root), reader='wds/ts', split='train', is_training=True, batch_size=B,
                                    shuffle_size=8, shuffle_initial=2, block_shards=3)


def _loader(ds, mode):
    return create_loader(ds, (3, 16, 16), B, is_training=True, num_workers=2, device='cpu', seed=5, worker_mode=mode)


def _each_once(batches, epochs):
    ys = [int(t) for _, y in batches for t in y]
    assert len(ys) == N * epochs, (len(ys), N * epochs)
    for e in range(epochs):
        assert sorted(ys[e * N : (e + 1) * N]) == list(range(N)), f'epoch {e}'


def test_threads_look_ahead_per_worker_slot(root):
    "Each thread's slot makes its next pass's first batch while the epoch ends, and the next pass takes it: the batches are the processes'."
    threads_ds = _stream(root)
    threads = run_epochs(_loader(threads_ds, 'thread'), 3)[0]
    procs = run_epochs(_loader(_stream(root), 'process'), 3)[0]
    same_batches(threads, procs)
    _each_once(threads, 3)
    taken, _ = threads_ds.made_ahead
    assert taken > 0, threads_ds.made_ahead  # the threads looked ahead, and their next passes used it
    assert len(threads_ds.slots()) == 2  # one slot a worker thread


@pytest.mark.slow
@pytest.mark.parametrize('context', [None, 'spawn'])
def test_thread_dataset_then_worker_processes(root, context):
    "A dataset read by loader threads (their lookaheads left in its slots), then by worker processes: every sample once, the batches of a fresh dataset's."
    ds = _stream(root)
    run_epochs(_loader(ds, 'thread'), 2)
    assert any(a is not None for a, _ in ds.slots().values())  # lookaheads for epoch 2 left by the threads
    assert dict(pickle.loads(pickle.dumps(ds.slots()))) == {}  # what a spawned worker receives: none of them
    ld = _loader(ds, 'process')
    if context is not None:  # workers started by spawn: each gets the dataset pickled (forkserver, Python 3.14's default, too)
        (ld.loader if hasattr(ld, 'loader') else ld).multiprocessing_context = context
    after = run_epochs(ld, 2, start=2)[0]
    fresh = run_epochs(_loader(_stream(root), 'process'), 2, start=2)[0]
    same_batches(after, fresh)
    _each_once(after, 2)


_EXITS = r'''
import atexit, os, sys, threading, time, warnings
def check():  # registered before timmdata is imported: runs after its exit handlers, before the interpreter is torn down
    alive = [t.name for t in threading.enumerate() if t.name == 'timmdata-lookahead']
    print('alive at exit:', len(alive), flush=True)
    if alive:
        os._exit(3)
atexit.register(check)
import timmdata.streams.lookahead as la
from timmdata.loader import create_loader
from timmdata.streams.streaming import IterableImageDataset
made = la.made_now
la.made_now = lambda *a: time.sleep(0.5) or made(*a)  # each sample made ahead takes 0.5 s: still making at the exit
with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    ds = IterableImageDataset(sys.argv[1], reader='wds/ts', split='train', is_training=True, batch_size=4)
ld = create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=2, device='cpu', seed=5, worker_mode='thread')
n = sum(len(y) for _ in range(2) for _, y in ld)
print('images', n, 'lookaheads running', sum(t.name == 'timmdata-lookahead' for t in threading.enumerate()), flush=True)
'''


@pytest.mark.slow
def test_a_program_ending_after_its_last_epoch_exits_cleanly(root, tmp_path):
    """A training script's end: the loader threads' lookaheads are making the next epoch's first batch when the
    program returns; the exit stops them after their sample and waits (a daemon thread in torch's code while the
    interpreter is torn down can abort the process: 'terminate called without an active exception')."""
    import subprocess, sys
    script = tmp_path / 'ends.py'
    script.write_text(_EXITS)
    out = subprocess.run([sys.executable, str(script), str(root)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr[-2000:])
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f'images {2 * N} lookaheads running ') and int(lines[0].split()[-1]) > 0, lines
    assert lines[-1] == 'alive at exit: 0', lines
