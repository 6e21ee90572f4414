"""Exact mid-epoch resume (issue 16): state_dict() / load_state_dict() on what create_loader returns."""
import hashlib, json, os, pickle, random, signal, subprocess, sys, textwrap, time
import numpy as np
import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

import timmdata.scheduled_sampler as tss  # where create_loader's batch plan takes timm's sampler
from timmdata.distributed_sampler import OrderedDistributedSampler, RepeatAugSampler
from timmdata.loader import create_loader
from timmdata.mixup import FastCollateMixup
from timmdata.engine.prefetch import PrefetchLoader
from timmdata.engine.resume import ResumeStateError
from timmdata.tools.sample_data import make_sample_dataset
from _datasets import IndexDataset
from _helpers import run_epochs as _run, same_batches as _same

B = 4


@pytest.fixture(scope='module')
def root(tmp_path_factory):
    # 4 classes x 6 = 24 train images, small and varied: random crops, flips and erasing show in the pixels
    return make_sample_dataset(tmp_path_factory.mktemp('resume') / 'data', n_train=6, n_val=2,
                               classes=['a', 'b', 'c', 'd'], size=(40, 32))


def _loader(root, sampler=None, monkeypatch=None, mix=True, bs=B, **kw):
    "A training loader with every random step on: crop/flip, batch colour jitter, random erasing, mixup."
    if sampler is not None: monkeypatch.setattr(tss, 'timm_sampler', lambda ds, *a: sampler(ds))
    args = dict(is_training=True, num_workers=0, device='cpu', re_prob=0.5, re_mode='pixel', re_count=2,
                collate_fn=FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=24) if mix else None)
    args.update(kw)
    return create_loader(IndexDataset(str(root / 'train')), 24, bs, **args)


@pytest.mark.parametrize('kw', [
    dict(),  # prefetcher, main process
    dict(num_workers=2),  # workers prefetch batches: the ones in flight are neither lost nor repeated
    dict(num_workers=2, use_multi_epochs_loader=True),
    dict(use_prefetcher=False, mix=False),
], ids=['prefetch', 'workers', 'multi_epochs', 'no_prefetcher'])
@pytest.mark.slow
def test_resume_random_bit_identical(root, kw):
    torch.manual_seed(1)
    ref, _ = _run(_loader(root, **kw), 2)
    assert len(ref) == 12
    for stop in (2, 6):  # mid-epoch, and exactly at the epoch's end
        torch.manual_seed(1)
        head, sd = _run(_loader(root, **kw), 2, stop=stop)
        assert sd['batches_delivered'] == (stop - 1) % 6 + 1 and sd['epoch'] == 0 and sd['offset'] == stop * B
        torch.manual_seed(99)  # another seed drawn by the fresh loader: the saved one wins
        done = stop // 6  # a finished epoch: the trainer goes on with the next one
        tail, _ = _run(_loader(root, **kw), 2 - done, start=done, sd=sd)
        _same(head + tail, ref)


def test_resume_no_set_epoch_and_persistent_workers(root):
    "Without set_epoch every pass reshuffles; persistent workers; the state after a finished pass starts the next."
    torch.manual_seed(2)
    dl = _loader(root, num_workers=2, persistent_workers=True)
    ref = [[(x.clone(), y.clone()) for x, y in dl] for _ in range(3)]
    assert not torch.equal(ref[0][0][1], ref[1][0][1])
    dl = _loader(root, num_workers=2, persistent_workers=True, seed=dl.loader.plan.seed)
    got = [(x.clone(), y.clone()) for x, y in dl]
    it = iter(dl); got += [next(it) for _ in range(3)]
    sd = dl.state_dict(); del it
    dl2 = _loader(root, num_workers=2, persistent_workers=True)
    dl2.load_state_dict(sd)
    got += [(x.clone(), y.clone()) for x, y in dl2] + [(x.clone(), y.clone()) for x, y in dl2]
    _same(got, ref[0] + ref[1] + ref[2])


def test_prefetcher_in_flight(root):
    "A prefetcher working 3 batches ahead: the state counts what it handed out."
    torch.manual_seed(3)
    mk = lambda: PrefetchLoader(_loader(root, num_workers=2, seed=3).loader, device='cpu', re_prob=0.5, re_mode='pixel',
                                         re_count=2, num_prefetch=3, color_jitter=0.4)
    ref, _ = _run(mk(), 1)
    head, sd = _run(mk(), 1, stop=2)
    tail, _ = _run(mk(), 1, sd=sd)
    _same(head + tail, ref)


def _sim(root, monkeypatch, make, W, epochs, start=0, sd=None, stop=None, **kw):
    "W simulated ranks stepping in lockstep: per rank its batches; each loader's state after `stop` batches."
    loaders = [_loader(root, lambda ds, r=r: make(ds, W, r), monkeypatch, distributed=False, seed=5, **kw) for r in range(W)]
    outs = [_run(l, epochs, start, stop, sd) for l in loaders]
    return [o[0] for o in outs], [o[1] for o in outs]


SAMPLERS = {
    'distributed': lambda ds, W, r: DistributedSampler(ds, num_replicas=W, rank=r, seed=4),
    'repeat_aug': lambda ds, W, r: RepeatAugSampler(ds, num_replicas=W, rank=r, num_repeats=3, selected_round=0),
}


@pytest.mark.parametrize('kind', list(SAMPLERS))
def test_resume_distributed_same_world(root, monkeypatch, kind):
    ref, _ = _sim(root, monkeypatch, SAMPLERS[kind], 2, 2)
    head, sds = _sim(root, monkeypatch, SAMPLERS[kind], 2, 2, stop=1)
    assert all(sd == sds[0] for sd in sds)  # ranks in lockstep: any rank's state is the state
    tail, _ = _sim(root, monkeypatch, SAMPLERS[kind], 2, 2, sd=sds[0])
    for r in range(2): _same(head[r] + tail[r], ref[r])


def test_resume_ordered_eval(root, monkeypatch):
    make = lambda ds, W, r: OrderedDistributedSampler(ds, num_replicas=W, rank=r)
    kw = dict(is_training=False, mix=False, re_prob=0.)
    ref, _ = _sim(root, monkeypatch, make, 3, 1, **kw)
    head, sds = _sim(root, monkeypatch, make, 3, 1, stop=1, **kw)
    tail, _ = _sim(root, monkeypatch, make, 3, 1, sd=sds[0], **kw)
    for r in range(3): _same(head[r] + tail[r], ref[r])


@pytest.mark.parametrize('W2', [2, 1])
def test_world_size_change(root, monkeypatch, W2):
    "Saved on 4 ranks after one step, resumed on 2 or 1: the rest of the epoch, each sample once, same pixels; then epoch 1."
    make, kw = SAMPLERS['distributed'], dict(mix=False, re_prob=0., color_jitter=None, bs=2)  # per-sample randomness only
    ref, _ = _sim(root, monkeypatch, make, 4, 1, **kw)  # 24 samples: 6 per rank, 3 batches of 2
    head, sds = _sim(root, monkeypatch, make, 4, 1, stop=1, **kw)
    assert sds[0]['offset'] == 4 * 2 and sds[0]['end'] == 24
    tail, sds2 = _sim(root, monkeypatch, make, W2, 1, sd=sds[0], **kw)
    rest = lambda runs: sorted((int(y), hashlib.sha1(x.numpy().tobytes()).hexdigest())
                               for run in runs for xb, yb in run for x, y in zip(xb, yb, strict=True))
    assert rest([r[1:] for r in ref]) == rest(tail)  # the same samples, each once, with the same random crops
    assert len(rest(tail)) == 16 and all(len(t) == 16 // W2 // 2 for t in tail)
    assert sds2[0]['done'] and sds2[0]['world_size'] == W2
    nxt, _ = _sim(root, monkeypatch, make, W2, 1, start=1, **kw)
    again, _ = _sim(root, monkeypatch, make, W2, 1, start=1, sd=sds2[0], **kw)
    for r in range(W2): _same(again[r], nxt[r])


def test_mismatch_errors(root, monkeypatch):
    torch.manual_seed(0)
    _, sd = _run(_loader(root, seed=7), 1, stop=1)
    with pytest.raises(ResumeStateError, match='batch_size: saved 4'):
        create_loader(IndexDataset(str(root / 'train')), 24, 3, is_training=True, num_workers=0, device='cpu').load_state_dict(sd)
    with pytest.raises(ResumeStateError, match='dataset_len: saved 24'):
        create_loader(IndexDataset(str(root / 'val')), 24, 4, is_training=True, num_workers=0, device='cpu').load_state_dict(sd)
    with pytest.raises(ResumeStateError, match='seed: saved 7, this loader 8'):
        _loader(root, seed=8).load_state_dict(sd)
    with pytest.raises(ResumeStateError, match="kind.*DistributedSampler"):
        _loader(root, lambda ds: DistributedSampler(ds, 2, 0), monkeypatch).load_state_dict(sd)
    monkeypatch.undo()
    with pytest.raises(ResumeStateError, match='state version 0'):
        _loader(root).load_state_dict({**sd, 'version': 0})
    _loader(root).load_state_dict(sd)  # a drawn seed gives way
    with pytest.raises(ResumeStateError, match='the state is from a map loader; this one uses scheduled batching'):
        _loader(root, input_size_choices=[24, 32]).load_state_dict(sd)


_SCHED = dict(input_size_choices=[16, 24, 32], batch_size_choices=[6, 4, 2], batch_choice_weights=[1, 1, 2])


@pytest.mark.parametrize('kw', [
    dict(num_batches=7),  # a fixed number of batches: the order wraps within the epoch
    pytest.param(dict(num_workers=2, num_batches=7, batch_choice_schedule='progressive', batch_schedule_epochs=2),
                 marks=pytest.mark.slow),  # worker processes: seconds each
    # the sample-budget schedule (MultiEpochsDataLoader is refused with it, as timm refuses it)
    pytest.param(dict(num_workers=2), marks=pytest.mark.slow),
], ids=['main', 'workers_progressive', 'workers_budget'])
def test_resume_scheduled_batching(root, kw):
    "input_size_choices: batches of several sizes, cut anywhere, resumed bit for bit (shapes too)."
    torch.manual_seed(3)
    ref, _ = _run(_loader(root, **_SCHED, **kw), 2)
    n = len(ref) // 2
    assert len({x.shape for x, _ in ref}) > 1
    for stop in (1, n - 1, n, n + 2):
        torch.manual_seed(3)
        head, sd = _run(_loader(root, **_SCHED, **kw), 2, stop=stop)
        assert sd['kind'] == 'scheduled' and sd['batches_delivered'] == (stop - 1) % n + 1
        torch.manual_seed(50)
        done = stop // n
        tail, _ = _run(_loader(root, **_SCHED, **kw), 2 - done, start=done, sd=sd)
        _same(head + tail, ref)


def test_resume_scheduled_two_ranks(root, monkeypatch):
    "Scheduled batching over DistributedSampler ranks: each rank resumes its own batches; another world size is refused."
    for rank in (0, 1):
        mk = lambda: _loader(root, lambda ds: DistributedSampler(ds, 2, rank), monkeypatch, **_SCHED, num_batches=4, seed=5)
        ref, _ = _run(mk(), 2)
        head, sd = _run(mk(), 2, stop=3)
        tail, _ = _run(mk(), 2, sd=sd)
        _same(head + tail, ref)
    monkeypatch.undo()
    with pytest.raises(ResumeStateError, match='world_size: saved 2, this loader 1'):
        _loader(root, **_SCHED, num_batches=4, seed=5).load_state_dict(sd)


_REPRO = textwrap.dedent('''
    import hashlib, sys, torch
    sys.path.insert(0, {tests!r})
    from _datasets import IndexDataset
    from timmdata.loader import create_loader
    from timmdata.mixup import FastCollateMixup
    torch.manual_seed(int(sys.argv[1]))
    dl = create_loader(IndexDataset({train!r}), 24, 4, is_training=True, num_workers=0, device='cpu', re_prob=0.5,
                       collate_fn=FastCollateMixup(mixup_alpha=0.8, num_classes=24))
    h = hashlib.sha1()
    for x, y in dl: h.update(x.numpy().tobytes()); h.update(y.numpy().tobytes())
    print(h.hexdigest())
''')


@pytest.mark.slow
def test_two_fresh_processes_reproducible(root, tmp_path):
    script = tmp_path / 'repro.py'
    script.write_text(_REPRO.format(tests=os.path.dirname(__file__), train=str(root / 'train')))
    procs = [subprocess.Popen([sys.executable, str(script), s], stdout=subprocess.PIPE, text=True) for s in ('0', '0', '1')]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1] and outs[0] != outs[2]


_TRAIN = textwrap.dedent('''
    import hashlib, os, pickle, sys, time, torch
    sys.path.insert(0, {tests!r})
    from _datasets import IndexDataset
    from timmdata.loader import create_loader
    from timmdata.mixup import FastCollateMixup
    def main():  # guarded: forkserver and spawn (Python 3.14, macOS) import the script again in each worker
        out, every, epochs = sys.argv[1], int(sys.argv[2]), 2
        torch.manual_seed(0)
        dl = create_loader(IndexDataset({train!r}), 24, 2, is_training=True, num_workers=2, device='cpu', re_prob=0.5,
                           re_mode='pixel', collate_fn=FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=24))
        hashes, state = os.path.join(out, 'hashes.txt'), os.path.join(out, 'state.pkl')
        start, step = 0, 0
        if os.path.exists(state):
            with open(state, 'rb') as f: ck = pickle.load(f)
            dl.load_state_dict(ck['loader']); start, step = ck['epoch'], ck['steps']
            with open(hashes) as f: kept = f.readlines()[:step]  # batches after the last save are done again
            with open(hashes, 'w') as f: f.writelines(kept)
        with open(hashes, 'a') as f:
            for epoch in range(start, epochs):
                dl.set_epoch(epoch)
                for x, y in dl:
                    f.write(hashlib.sha1(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest() + chr(10)); f.flush()
                    step += 1
                    if step % every == 0:
                        sd = dl.state_dict()
                        with open(state + '.tmp', 'wb') as g: pickle.dump(dict(loader=sd, epoch=epoch + sd['done'], steps=step), g)
                        os.replace(state + '.tmp', state)
                    time.sleep(0.05)
    if __name__ == '__main__':
        main()
''')


@pytest.mark.slow
def test_sigkill_resume(root, tmp_path):  # in `make test`: the definition of done (about 14 s)
    "A training process (2 workers) saves its loader state every 3 steps, is SIGKILLed at a random step, and resumes."
    script = tmp_path / 'train.py'
    script.write_text(_TRAIN.format(tests=os.path.dirname(__file__), train=str(root / 'train')))
    ref, run = tmp_path / 'ref', tmp_path / 'run'
    ref.mkdir(); run.mkdir()
    subprocess.run([sys.executable, str(script), str(ref), '3'], check=True, timeout=300)
    want = (ref / 'hashes.txt').read_text().splitlines()
    assert len(want) == 24
    kill_at = random.Random().randint(4, 20)
    p = subprocess.Popen([sys.executable, str(script), str(run), '3'], start_new_session=True)
    t0 = time.time()
    while not (run / 'hashes.txt').exists() or len((run / 'hashes.txt').read_text().splitlines()) < kill_at:
        assert p.poll() is None and time.time() - t0 < 300, 'the training process ended before it was killed'
        time.sleep(0.01)
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    subprocess.run([sys.executable, str(script), str(run), '3'], check=True, timeout=300)
    assert (run / 'hashes.txt').read_text().splitlines() == want, f'killed at step {kill_at}'


def _gloo_rank(rank, world, port, train, out, stop):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world)
    try:
        torch.manual_seed(rank)  # ranks seeded differently (as timm does): the loader seed is rank 0's
        dl = create_loader(IndexDataset(train), 24, 2, is_training=True, distributed=True, num_workers=1, device='cpu',
                           color_jitter=None)
        res = dict(samples=[], state=None)
        sd_path = os.path.join(out, 'state.pkl')
        if stop is None and os.path.exists(sd_path):
            with open(sd_path, 'rb') as f: dl.load_state_dict(pickle.load(f))
        dl.set_epoch(0)
        for i, (x, y) in enumerate(dl):
            res['samples'] += [(int(t), hashlib.sha1(im.numpy().tobytes()).hexdigest()) for im, t in zip(x, y, strict=True)]
            if stop is not None and i + 1 == stop: res['state'] = dl.state_dict(); break
        with open(os.path.join(out, f'{world}-{rank}-{stop}.pkl'), 'wb') as f: pickle.dump(res, f)
        if stop is not None and rank == 0:
            with open(sd_path, 'wb') as f: pickle.dump(res['state'], f)
    finally: dist.destroy_process_group()


@pytest.mark.slow
def test_gloo_two_ranks_resume_on_one(root, tmp_path):
    "2 gloo ranks save after 2 steps; one process (a gloo world of 1) reads the rest: each remaining sample once, same pixels."
    import socket
    import torch.multiprocessing as mp
    def port():
        with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]
    train = str(root / 'train')
    for world, stop in ((2, None), (2, 2), (1, None)):
        if world == 2 and stop is None: os.makedirs(tmp_path / 'ref')
        out = str(tmp_path / 'ref') if stop is None and world == 2 else str(tmp_path)
        mp.spawn(_gloo_rank, args=(world, port(), train, out, stop), nprocs=world, join=True)
    load = lambda p: pickle.loads((tmp_path / p).read_bytes())
    ref = [load(f'ref/2-{r}-None.pkl')['samples'] for r in range(2)]
    cut = [load(f'2-{r}-2.pkl') for r in range(2)]
    assert cut[0]['state'] == cut[1]['state'] and cut[0]['state']['offset'] == 2 * 2 * 2
    for r in range(2): assert cut[r]['samples'] == ref[r][:4]
    rest = load('1-0-None.pkl')['samples']
    assert sorted(rest) == sorted(ref[0][4:] + ref[1][4:]) and len(rest) == 16


def test_stream_resume(root, tmp_path):
    "A stream (wds shards, 2 workers, batch jitter and erasing) cut after 3 batches and again 4 batches later gives the uninterrupted run's batches."
    pytest.importorskip('webdataset')
    from timmdata.tools.shards import write_shards
    from timmdata.streams.streaming import IterableImageDataset
    write_shards(root, tmp_path / 's', shard_size=6, progress=False)
    def mk():
        ds = IterableImageDataset(str(tmp_path / 's'), reader='wds/s', split='train', is_training=True, batch_size=B,
                                  shuffle_size=8, shuffle_initial=2)
        return create_loader(ds, 24, B, is_training=True, num_workers=2, device='cpu', re_prob=0.5)  # batch jitter and erasing
    def run(dl, stop=None, sd=None):
        if sd is not None: dl.load_state_dict(json.loads(json.dumps(sd)))
        out = []
        for e in range(sd['epoch'] if sd else 0, 2):
            dl.set_epoch(e)
            for x, y in dl:
                out.append((x.clone(), y.clone()))
                if len(out) == stop: return out, dl.state_dict()
        return out, None
    torch.manual_seed(0); ref, _ = run(mk())
    torch.manual_seed(0); head, sd = run(mk(), stop=3)
    torch.manual_seed(0); mid, sd2 = run(mk(), stop=4, sd=sd)  # a resumed run cut again: its state counts from the epoch's start
    assert sd2['batches_delivered'] != 4 or sd2['epoch'] != sd['epoch']
    torch.manual_seed(1); tail, _ = run(mk(), sd=sd2)
    _same(head + mid + tail, ref)


def _flat(b) -> list:
    "A batch's tensors and values in a fixed order (NaFlex batches are (dict, targets))."
    if isinstance(b, dict): return [v for k in sorted(b) for v in _flat(b[k])]
    if isinstance(b, (tuple, list)): return [v for x in b for v in _flat(x)]
    return [b.clone() if isinstance(b, torch.Tensor) else b]


@pytest.fixture(scope='module')
def kinds(root, tmp_path_factory):
    "One maker per kind of loader create_loader / create_naflex_loader returns (main process unless the kind needs more)."
    from timmdata.dataset import ImageDataset
    from timmdata.naflex_loader import create_naflex_loader
    train = str(root / 'train')
    cl = lambda ds, **kw: create_loader(ds, 24, B, **{**dict(num_workers=0, device='cpu', seed=5), **kw})
    kinds = {
        'map_train': lambda: _loader(root, seed=5),
        'map_eval': lambda: cl(IndexDataset(train)),
        'distributed': ('distributed', lambda: cl(IndexDataset(train), is_training=True)),
        'repeat_aug': ('repeat_aug', lambda: cl(IndexDataset(train), is_training=True)),
        'scheduled': lambda: _loader(root, **_SCHED, num_batches=5, seed=5),
        'multi_epochs': lambda: cl(IndexDataset(train), is_training=True, num_workers=1, use_multi_epochs_loader=True),
        'thread': lambda: cl(IndexDataset(train), is_training=True, num_workers=2, worker_mode='thread'),
        'naflex': lambda: create_naflex_loader(ImageDataset(train), train_seq_lens=(4, 8), batch_size=4, is_training=True,
                                               num_workers=0, device='cpu', seed=3, re_prob=0.5),
    }
    try:
        import torchcodec  # noqa: F401  the device-decode path's decoder (its CPU run here)
        kinds['device_decode'] = lambda: cl(IndexDataset(train), is_training=True, re_prob=0.5, decode_device='cpu')
    except ImportError: pass
    try:
        import webdataset  # noqa: F401
        from timmdata.tools.shards import write_shards
        from timmdata.streams.streaming import IterableImageDataset
        out = tmp_path_factory.mktemp('json_stream')
        write_shards(root, out / 's', shard_size=6, progress=False)
        stream = lambda: IterableImageDataset(str(out / 's'), reader='wds/s', split='train', is_training=True, batch_size=B,
                                              shuffle_size=8, shuffle_initial=2)
        kinds['stream'] = lambda: cl(stream(), is_training=True)
        kinds['naflex_stream'] = lambda: create_naflex_loader(stream(), train_seq_lens=(4, 8), batch_size=4, is_training=True,
                                                              num_workers=0, device='cpu', seed=3)
    except ImportError: pass
    return kinds


KINDS = ['map_train', 'map_eval', 'distributed', 'repeat_aug', 'scheduled', 'multi_epochs', 'thread', 'naflex', 'stream',
         'naflex_stream', 'device_decode']


@pytest.mark.parametrize('kind', KINDS)
def test_state_is_json_for_every_loader_kind(kinds, monkeypatch, kind):
    "json.dumps(state_dict()) works for every kind of loader, and the state read back from JSON resumes bit for bit."
    if kind not in kinds: pytest.skip('webdataset (streams) or torchcodec (device decode) is not installed')
    make = kinds[kind]
    if isinstance(make, tuple):  # rank 0 of 2
        which, make = make
        monkeypatch.setattr(tss, 'timm_sampler', lambda ds, *a: SAMPLERS[which](ds, 2, 0))
    def run(dl, stop=None, sd=None):
        if sd is not None: dl.load_state_dict(sd)
        out = []
        for b in dl:
            out.append(_flat(b))
            if len(out) == stop: break
        return out, dl.state_dict()
    torch.manual_seed(0); ref, end = run(make())
    assert len(ref) >= 3
    json.dumps(end)  # after a whole epoch too
    torch.manual_seed(0); head, sd = run(make(), stop=2)
    text = json.dumps(sd)
    assert json.loads(text) == sd
    torch.manual_seed(1); tail, _ = run(make(), sd=json.loads(text))
    got = head + tail
    assert len(got) == len(ref), (len(got), len(ref))
    for i, (a, b) in enumerate(zip(got, ref, strict=True)):
        assert len(a) == len(b) and all(torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v
                                        for u, v in zip(a, b, strict=True)), f'batch {i} differs'


def test_checks_with_workers():
    "With worker processes: a plan that drops a batch is named at the end of the pass; in_order=False is refused."
    from torch.utils.data import SequentialSampler
    from timmdata.engine.resume import ResumableBatchSampler, ResumableDataLoader, SeededDataset
    class Drops(ResumableBatchSampler):
        def __iter__(self): yield from (b for k, b in enumerate(super().__iter__()) if k != 1)
    def dl(cls, **kw):
        return ResumableDataLoader(SeededDataset(list(range(6))), batch_sampler=cls(SequentialSampler(range(6)), 2, seed=1),
                                   num_workers=1, **kw)
    assert [b.tolist() for b in dl(ResumableBatchSampler)] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(RuntimeError, match=r'ended its pass with 1 batch\(es\) of its plan \(Drops\) not delivered'):
        list(dl(Drops))
    with pytest.raises(ValueError, match='in_order=True'):
        iter(dl(ResumableBatchSampler, in_order=False))


class _FailsAt12(torch.utils.data.Dataset):
    "Each sample's target is the pid of the worker process that made it; sample 12 fails."
    transform = None
    def __len__(self): return 32
    def __getitem__(self, i):
        if i == 12: raise ValueError('sample 12 is bad')
        from PIL import Image
        return self.transform(Image.new('RGB', (8, 8))), os.getpid()


def _alive(pid):
    try: os.kill(pid, 0)  # a worker joined is reaped: no such process
    except ProcessLookupError: return False
    return True


def test_failing_pass_stops_workers():
    "A pass of a resumable loader without persistent workers that fails: the feeder stops its workers (through resume's DeliveredIterator), not torch's clean-up later."
    ld = create_loader(_FailsAt12(), (3, 8, 8), B, num_workers=2, persistent_workers=False, device='cpu')
    assert isinstance(ld, PrefetchLoader) and ld.resumes and not ld.loader.persistent_workers
    pids = set()
    with pytest.raises(ValueError, match='sample 12 is bad') as err:  # held: its frames keep torch's iterator alive
        for _, y in ld: pids.update(y.tolist())
    assert len(pids) == 2 and os.getpid() not in pids, pids  # batches 0-2 came from both workers
    assert [p for p in pids if _alive(p)] == []
    with pytest.raises(ValueError, match='sample 12 is bad'):  # the next pass starts new workers, and fails the same way
        list(ld)
