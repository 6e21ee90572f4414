"""What a new user meets in the first hour, through worker processes and the command line: a damaged image in a worker
is one short error of its own kind, the CLI's `--debug` shows the worker's traceback, `timmdata cache` caches every
split, and `bad_sample='replace'` keeps batches whole alike in every worker mode and across a resume."""
import os, subprocess, sys, traceback
from pathlib import Path

import pytest
import torch
from timmdata.dataset import ImageDataset
from timmdata.loader import create_loader
from timmdata.pixels.decode import ImageDecodeError
from timmdata.tools.sample_data import make_sample_dataset

SCRIPT = Path(sys.executable).parent / 'timmdata'
CMD = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, '-m', 'timmdata.tools.cli']


@pytest.fixture(scope='module')
def damaged(tmp_path_factory):
    "A small train/val tree with a truncated JPEG (train/a/a_00001.JPEG) and a text file named .jpg in train/b/."
    root = make_sample_dataset(tmp_path_factory.mktemp('fh') / 'data', n_train=6, n_val=2, classes=['a', 'b'],
                               size=(64, 48), num_workers=0)
    f = root / 'train' / 'a' / 'a_00001.JPEG'
    f.write_bytes(f.read_bytes()[:600])
    (root / 'train' / 'b' / 'text.jpg').write_text('hello, not an image')
    return root


def first_error(root, **kw):
    ds = ImageDataset(str(root), split='train')
    loader = create_loader(ds, input_size=(3, 32, 32), batch_size=4, device='cpu', **kw)
    with pytest.raises(ImageDecodeError) as info:
        for _ in loader:
            pass
    return info.value


@pytest.mark.parametrize('mode,workers', [('process', 1), ('thread', 2), ('process', 0)])
def test_worker_error_is_one_short_error_naming_the_sample(damaged, monkeypatch, mode, workers):
    monkeypatch.delenv('TIMMDATA_DEBUG', raising=False)
    e = first_error(damaged, num_workers=workers, worker_mode=mode)
    assert str(e).startswith('sample 1 (') and 'a_00001.JPEG' in str(e) and "bad_sample='skip'" in str(e), str(e)
    assert 'Original Traceback' not in str(e) and 'Caught' not in str(e), str(e)
    tb = ''.join(traceback.format_exception(type(e), e, e.__traceback__))
    assert len(tb.splitlines()) < 30 and 'Original Traceback' not in tb and 'direct cause' not in tb, tb  # was 64 to 83 lines
    assert 'File "' in e.worker_traceback and '_on_bad' in e.worker_traceback  # kept, not printed
    monkeypatch.setenv('TIMMDATA_DEBUG', '1')
    e = first_error(damaged, num_workers=workers, worker_mode=mode)
    tb = ''.join(traceback.format_exception(type(e), e, e.__traceback__))
    assert '_on_bad' in tb and 'WorkerTraceback' in tb, tb  # printed in full, as the cause


def test_workers_told_to_stop_when_an_error_frees_the_loader(damaged, monkeypatch):
    """A loader that ended on a worker's error is freed with it by the cycle collector (its traceback's frames hold the
    loader and its iterator). When torch's iterator then stops its workers, its index queues still send: the stop
    reaches the worker at once. Without `torch_compat.keep_index_queues` the collector had ended the queues' feeder
    threads first, the stop was never sent, and torch waited 5 s for each worker, then killed it."""
    import gc, multiprocessing
    from multiprocessing.queues import _sentinel
    from torch.utils.data import dataloader

    seen, shut = [], dataloader._MultiProcessingDataLoaderIter._shutdown_workers

    def shutdown(it):  # what each index queue can do when the workers are told to stop
        if not it._shutdown and set(it._workers) & mine:  # this test's loader (earlier tests' may be collected too)
            seen.append([q._thread is not None and q._thread.is_alive() and all(x is not _sentinel for x in q._buffer)
                         for q in it._index_queues])  # a feeder thread that sends, not one told to end
        return shut(it)

    monkeypatch.setattr(dataloader._MultiProcessingDataLoaderIter, '_shutdown_workers', shutdown)
    mine = set()  # filled before the collector may free the loader: automatic collection is off until then
    gc.disable()
    try:
        before = set(multiprocessing.active_children())
        e = first_error(damaged, num_workers=1, worker_mode='process')
        mine.update(set(multiprocessing.active_children()) - before)
    finally:
        gc.enable()
    assert len(mine) == 1, mine
    del e
    gc.collect()
    assert seen == [[True]], seen


@pytest.mark.slow
def test_cli_debug_prints_the_workers_traceback(damaged):
    env = {k: v for k, v in os.environ.items() if k != 'TIMMDATA_DEBUG'}
    args = ['demo', '--root', str(damaged), '--workers', '1', '--batch-size', '4', '--no-progress', '--out', str(damaged.parent / 'b.png')]
    r = subprocess.run(CMD + args, capture_output=True, text=True, env=env, timeout=300)
    named = lambda err: 'a_00001.JPEG' in err or 'text.jpg' in err  # the epoch is shuffled: either damaged file first
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and named(r.stderr), r.stderr
    r = subprocess.run(CMD + args + ['--debug'], capture_output=True, text=True, env=env, timeout=300)
    assert 'WorkerTraceback' in r.stderr and '_on_bad' in r.stderr and named(r.stderr), r.stderr


def test_make_demo_installs_the_library_without_the_development_extras(tmp_path):
    "`make demo` installs the library (torch, torchvision); `make test` the development extras (a dry run of each)."
    root = Path(__file__).resolve().parents[1]
    run = lambda target: subprocess.run(['make', '-n', target, f'VENV={tmp_path}/venv'], cwd=root, capture_output=True,
                                        text=True, timeout=60).stdout
    demo, test = run('demo'), run('test')
    assert "pip install -q -e ." in demo and '[dev]' not in demo, demo
    assert "pip install -q -e '.[dev]'" in test, test


KW = dict(input_size=96, batch_size=8, is_training=True, device='cpu', seed=7, re_prob=0.25)


def batches(root, mode, workers, stop=None, state=None):
    "(batches as (x, y) copies, the state after the last one, the dataset) of a training loader with bad_sample='replace'."
    ds = ImageDataset(str(root), bad_sample='replace')
    ld = create_loader(ds, **KW, num_workers=workers, worker_mode=mode)
    if state is not None:
        ld.load_state_dict(state)
    out = []
    for x, y in ld:
        out.append((x.clone(), y.clone()))
        if stop is not None and len(out) == stop:
            break
    return out, ld.state_dict(), ds


def same(a, b):
    assert len(a) == len(b)
    for (x1, y1), (x2, y2) in zip(a, b):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_bad_sample_replace_keeps_batches_whole_alike_in_every_mode_and_on_resume(sample_root, tmp_path):
    import shutil, warnings
    bad = tmp_path / 'train'
    shutil.copytree(sample_root / 'train', bad)
    victims = sorted(bad.rglob('*.JPEG'))[::7]
    for f in victims:
        f.write_bytes(f.read_bytes()[:200])  # truncated: undecodable
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        runs = {(m, n): batches(bad, m, n) for m, n in (('process', 2), ('thread', 2), ('process', 0))}
        full = runs['process', 2][0]
        assert [len(y) for _, y in full] == [8] * 7  # no batch one short: the bad ones replaced
        for out, _, ds in runs.values():
            same(out, full)  # worker processes, threads and the main process replace alike
        hit = runs['process', 2][2].bad_samples
        names = {str(v.relative_to(bad)) for v in victims}
        assert hit and {runs['process', 2][2].filename(i) for i in hit} <= names, hit
        assert runs['thread', 2][2].bad_samples == hit == runs['process', 0][2].bad_samples
        head, sd, _ = batches(bad, 'process', 2, stop=3)
        rest, _, _ = batches(bad, 'thread', 2, state=sd)
        same(head + rest, full)  # resumed in another mode: the same replacements


def test_cache_caches_every_split_or_the_one_named(sample_root, tmp_path, capsys):
    from timmdata.tools.cli import main
    assert main(['cache', str(sample_root), str(tmp_path / 'all'), '--workers', '0']) == 0
    out = capsys.readouterr().out.splitlines()[-1]
    assert out == f"cached 2 splits: train: 60 images in {tmp_path / 'all' / 'train'}; val: 30 images in {tmp_path / 'all' / 'val'}", out
    assert len(ImageDataset(str(tmp_path / 'all'), split='validation')) == 30  # timm's synonym finds the val store
    assert len(ImageDataset(str(tmp_path / 'all'), split='train')) == 60
    assert main(['cache', str(sample_root), str(tmp_path / 'one'), '--workers', '0', '--split', 'valid']) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"cached 1 split: val: 30 images in {tmp_path / 'one' / 'val'}"
    assert sorted(p.name for p in (tmp_path / 'one').iterdir()) == ['val']
    with pytest.raises(SystemExit):
        main(['cache', str(sample_root), str(tmp_path / 'none'), '--split', 'test'])
    err = capsys.readouterr().err
    assert "no split 'test'" in err and 'it holds train, val' in err and len(err.splitlines()) == 1, err
