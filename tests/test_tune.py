"""`create_loader(..., num_workers='auto')` (issue 43, timmdata.engine.tune): the batches are those of fixed settings whatever it
switches to and when, a state taken after a switch resumes in a loader with fixed settings, bad values are named, and
the search reports what it tried. No assertion on times: the switches a test needs are scripted (`next_setting`
replaced), the real search is checked for what it reports."""
import json, logging
import pytest, torch
import timmdata.engine.tune as tune
from timmdata import ImageDataset, create_loader
from timmdata.engine.tune import AutoLoader, Budget
from _helpers import run_epochs, same_batches

KW = dict(input_size=64, batch_size=8, is_training=True, device='cpu', seed=11, re_prob=0.25)  # 60 images: 7 batches


@pytest.fixture(scope='module')
def root(sample_root): return str(sample_root / 'train')


def fixed(root, workers, mode='process', pf=None):
    return create_loader(ImageDataset(root), **KW, num_workers=workers, worker_mode=mode, prefetch_factor=pf)


def scripted(monkeypatch, settings):
    "The tuner tries `settings` in turn, then stops (whatever it measured)."
    todo = list(settings)
    monkeypatch.setattr(tune, 'next_setting', lambda *a, **k: todo.pop(0) if todo else None)


def auto(root, **kw):
    ld = create_loader(ImageDataset(root), **KW, num_workers='auto', worker_mode='auto', prefetch_factor='auto', **kw)
    assert isinstance(ld, AutoLoader)
    ld.settle, ld.window, ld.seconds = 1, 2, 0  # a switch every 3 batches (no shortest time): several in an epoch of 7
    return ld


@pytest.mark.slow
def test_batches_do_not_depend_on_workers_or_mode(root):
    ref, _ = run_epochs(fixed(root, 0), 2)
    assert len(ref) == 14
    for workers, mode, pf in ((1, 'process', None), (2, 'process', 4), (2, 'thread', None), (1, 'thread', 4)):
        got, _ = run_epochs(fixed(root, workers, mode, pf), 2)
        same_batches(got, ref)


@pytest.mark.slow
def test_auto_switches_mid_epoch_same_batches(root, monkeypatch):
    scripted(monkeypatch, [('process', 2, 2), ('thread', 2, 4), ('process', 1, 4)])
    ld = auto(root)
    ref, _ = run_epochs(fixed(root, 1), 3)
    got, _ = run_epochs(ld, 3)
    same_batches(got, ref)
    t = ld.tuning()
    assert t['done'] and len(t['trials']) == 4  # the start and the three scripted settings, each measured
    assert [tr['batches'] for tr in t['trials']] == [2, 2, 2, 2]
    tried = [(x['mode'], x['workers'], x['prefetch']) for x in t['trials']]
    assert tuple(t['chosen'].values()) in tried and ld.tuning() == t  # settled: nothing moves after the search


def test_state_after_a_switch_resumes_with_fixed_settings(root, monkeypatch):
    scripted(monkeypatch, [('process', 2, 4)])
    ld = auto(root)
    ref, _ = run_epochs(fixed(root, 2, 'thread'), 2)
    head, sd = run_epochs(ld, 2, stop=5)  # the switch came after batch 3: the state is the new loader's
    assert [t.setting for t in ld.trials][-1] == ('process', 2, 4) and ld.loader is not None
    fresh = fixed(root, 1, 'thread')  # another mode and count: the state carries the position, not the setting
    tail, _ = run_epochs(fresh, 2, sd=sd)
    assert len(head) == 5 and len(tail) == 2 + 7
    same_batches(head + tail, ref)


def test_resume_into_an_auto_loader(root, monkeypatch):
    "A state from a fixed loader goes into an auto loader (before and after its switches) and the rest is the same."
    scripted(monkeypatch, [('thread', 1, 2)])
    ref, _ = run_epochs(fixed(root, 2), 2)
    head, sd = run_epochs(fixed(root, 2), 2, stop=4)
    tail, _ = run_epochs(auto(root), 2, sd=sd)
    same_batches(head + tail, ref)


def test_mixup_switch_carried_over(root, monkeypatch):
    "timm's train.py turns mixup off late by setting `loader.mixup_enabled`: it reaches the current loader, and the next."
    from timmdata.mixup import FastCollateMixup
    scripted(monkeypatch, [('process', 1, 2)])
    ld = auto(root, collate_fn=FastCollateMixup(mixup_alpha=0.8, num_classes=10))
    assert ld.mixup_enabled
    ld.mixup_enabled = False
    first = ld.loader
    assert not first.mixup_enabled
    run_epochs(ld, 1)
    assert ld.loader is not first and not ld.loader.mixup_enabled and not ld.mixup_enabled


def test_bad_values_named(root):
    ds = ImageDataset(root)
    with pytest.raises(ValueError, match="num_workers must be an int >= 0 or 'auto'; got 'many'"):
        create_loader(ds, 64, 8, num_workers='many')
    with pytest.raises(ValueError, match="prefetch_factor must be None, an int >= 1 or 'auto'; got 'lots'"):
        create_loader(ds, 64, 8, num_workers='auto', prefetch_factor='lots')
    with pytest.raises(ValueError, match="worker_mode must be one of 'process', 'thread', 'auto'; got 'threads'"):
        create_loader(ds, 64, 8, num_workers='auto', worker_mode='threads')
    with pytest.raises(ValueError, match="num_workers must be an int >= 0 or 'auto'; got -1"):
        create_loader(ds, 64, 8, num_workers=-1)


def test_real_search_reports_and_logs_once(root, caplog):
    "Unscripted: whatever the machine measures, the choice is a setting it tried, within the budget, logged once."
    budget = Budget(cores=2, memory=2 << 30, shm=1 << 30)
    from timmdata.loader import LoaderOptions, auto_loader
    o = LoaderOptions(**KW, num_workers='auto', worker_mode='auto')
    ld = auto_loader(ImageDataset(root), o, budget)
    ld.settle, ld.window, ld.seconds = 1, 2, 0
    with caplog.at_level(logging.INFO, logger='timmdata'):
        got, _ = run_epochs(ld, 4)
    assert len(got) == 28
    t = ld.tuning()
    json.dumps(t)  # plain data
    assert t['done'] and 1 <= t['chosen']['num_workers'] <= 2 and t['chosen']['prefetch_factor'] == 2
    tried = [(x['mode'], x['workers'], x['prefetch']) for x in t['trials']]
    assert tuple(t['chosen'].values()) in tried and len(set(tried)) == len(tried)
    for x in t['trials']:
        if x['batches']:
            assert 0 <= x['stall'] <= 1 and x['step_ms'] > 0 and x['work_ms'] >= 0 and 0 <= x['consumer_cpu'] <= 1
    lines = [r.getMessage() for r in caplog.records if "num_workers='auto'" in r.getMessage()]
    assert len(lines) == 1 and t['why'] in lines[0]
    assert t['searches'] == 1 and 0 < t['cost']['batches'] < 28 and t['cost']['seconds'] > 0


def test_windows_by_time(root, monkeypatch):
    "A window lasts its shortest time, however many batches that takes (the clock made to tick 0.1 s a batch)."
    scripted(monkeypatch, [('thread', 2, 2)])
    ld, ticks = auto(root), iter(range(10**6))
    ld.clock = lambda: next(ticks) * 0.1
    ld.window, ld.seconds = 2, 0.75  # 2 batches at least, and 0.75 s: 8 batches of 0.1 s
    ref, _ = run_epochs(fixed(root, 1), 4)
    got, _ = run_epochs(ld, 4)
    same_batches(got, ref)
    t = ld.tuning()
    assert [x['batches'] for x in t['trials']] == [8, 8] and all(x['seconds'] >= 0.75 for x in t['trials'])
    assert t['cost']['batches'] == 2 * (1 + 8)  # settle and a window per setting, across the epochs' ends


@pytest.mark.slow
def test_searches_again_when_the_wait_grows(root, monkeypatch):
    "After the decision, two watched windows in a row whose wait grew start a search from the kept setting; batches stay the same."
    scripted(monkeypatch, [('process', 2, 2), None, ('thread', 1, 4)])  # None: a search ends
    monkeypatch.setattr(tune, 'choose', lambda trials, *a: trials[0])  # keep each search's first setting
    monkeypatch.setattr(tune, 'wait_grew', lambda kept, now, target: now.round == 1)  # the wait grows once
    ld = auto(root)
    ld.watch, ld.max_searches = 0, 2  # watched windows of `window` batches; one search after the first
    ref, _ = run_epochs(fixed(root, 2), 5)
    got, _ = run_epochs(ld, 5)
    same_batches(got, ref)
    t = ld.tuning()
    assert t['done'] and t['searches'] == 2
    rounds = [(x['round'], x['mode'], x['workers'], x['prefetch']) for x in t['trials']]
    assert rounds[0][0] == rounds[1][0] == 0 and rounds[2][0] == 1 and rounds[2][1:] == rounds[0][1:]
    assert rounds[3] == (1, 'thread', 1, 4)  # the search again, from the kept setting


class _Stream(torch.utils.data.IterableDataset):  # top level: forkserver and spawn pickle it by name
    transform = None

    def __iter__(self):
        yield from ((torch.zeros(3, 8, 8, dtype=torch.uint8), 0) for _ in range(8))


def test_stream_keeps_its_first_setting():
    ld = create_loader(_Stream(), 8, 4, num_workers='auto', device='cpu', collate_fn=None, use_prefetcher=False)
    t = ld.tuning()
    assert t['done'] and 'stream' in t['why'] and len(t['trials']) == 1
    assert sum(len(x) for x, _ in ld) == 8
