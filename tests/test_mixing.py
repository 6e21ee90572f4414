"""Mixing sources (issue 59) through create_loader: bit-identical resume with workers, on other numbers of ranks and
workers (gloo ranks: 2 ranks x 2 workers saved, 3 ranks x 1 worker resumed), exact-once per source with
exhausted='stop', the per-rank window accuracy, a changed mix refused by name, labels per source, wds shards as a
source, and 100 sources holding as many threads and open files as one."""
import hashlib, io, json, os, pickle, threading
import numpy as np
import pytest
import torch
from PIL import Image

from timmdata.loader import create_loader
from timmdata.readers.core import create_reader
from timmdata.mix.mixing import MIX_ORDER, MixChangedError, mix_batching, mix_datasets
from timmdata.tools.sample_data import make_sample_dataset
from _helpers import free_port, run_epochs, same_batches, write_shards

B = 4


@pytest.fixture(scope='module')
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp('mixing')
    return [make_sample_dataset(base / f's{i}', n_train=n, n_val=1, classes=['a', 'b', 'c'], size=(40, 32), seed=i, num_workers=0)
            for i, n in enumerate((8, 5, 3))]  # 24, 15 and 9 train images


def _mix(roots, **kw):
    args = dict(weights=[0.5, 0.3, 0.2], labels='stack') | kw
    return mix_datasets([str(r) for r in roots], **args)


def _loader(ds, **kw):
    args = dict(is_training=True, num_workers=0, device='cpu', seed=11, re_prob=0.5, re_mode='pixel') | kw
    return create_loader(ds, 24, B, **args)


def _key(img) -> str:
    return hashlib.sha1(img.numpy().tobytes()).hexdigest()


@pytest.mark.parametrize('kw', [dict(), dict(num_workers=2), dict(num_workers=2, worker_mode='thread')],
                         ids=['main', 'processes', 'threads'])
def test_resume_bit_identical(roots, kw):
    ref, _ = run_epochs(_loader(_mix(roots), **kw), 2)
    head, sd = run_epochs(_loader(_mix(roots), **kw), 2, stop=5)
    assert sd['mix']['exhausted'] == 'repeat' and sd['lanes'] == 1
    epochs_left = 1 if len(head) < len(ref) // 2 else 0
    tail, _ = run_epochs(_loader(_mix(roots), **kw), 1 + epochs_left, start=0, sd=sd)
    same_batches(head + tail, ref)


def test_every_worker_mode_the_same_batches(roots):
    a, _ = run_epochs(_loader(_mix(roots)), 1)
    b, _ = run_epochs(_loader(_mix(roots), num_workers=2), 1)
    same_batches(a, b)


def test_changed_mix_refused_or_continued(roots):
    _, sd = run_epochs(_loader(_mix(roots)), 1, stop=2)
    with pytest.raises(MixChangedError, match='schedule differ'):
        _loader(_mix(roots, weights=[0.2, 0.3, 0.5])).load_state_dict(sd)
    with pytest.raises(MixChangedError, match='entries'):
        _loader(_mix(roots[:2], weights=[0.5, 0.5])).load_state_dict(sd)
    dl = _loader(_mix(roots, weights=[0.2, 0.3, 0.5], on_mix_change='continue'))
    dl.load_state_dict(sd)
    got, sd2 = run_epochs(dl, 1)
    assert sd2['done'] and len(got) == len(dl) - 2  # the epoch goes on from where it was saved


# a state as timmdata saved it before the mix's order by position (each source's order then a listed permutation)
OLD_STATE = '{"version": 1, "kind": "map", "epoch": 0, "rep": 0, "offset": 8, "end": 48, "done": false, "batches_delivered": 2, "world_size": 1, "batch_size": 4, "drop_last": true, "dataset_len": 48, "seed": 11, "sampler": {"kind": "MixSampler"}, "mix": {"entries": [{"reader": "FolderReader", "samples": 24, "labels": 0}, {"reader": "FolderReader", "samples": 15, "labels": 3}, {"reader": "FolderReader", "samples": 9, "labels": 6}], "schedule": {"steps": [0], "weights": [[0.5, 0.3, 0.2]], "interpolate": "constant"}, "exhausted": "repeat", "epoch_length": null, "seed": null}, "lanes": 1, "samples_per_step": 4}'


def test_state_from_before_the_order_by_position(roots):
    "Refused by name (MixChangedError: no mix_order); with on_mix_change='continue' the epoch goes on from its position."
    with pytest.raises(MixChangedError, match="no mix_order"):
        _loader(_mix(roots)).load_state_dict(json.loads(OLD_STATE))
    dl = _loader(_mix(roots, on_mix_change='continue'))
    dl.load_state_dict(json.loads(OLD_STATE))
    got, sd = run_epochs(dl, 1)
    assert sd['done'] and len(got) == len(dl) - 2 and sd['mix_order'] == MIX_ORDER == 'quota'


# a state as the order before the quotas saved it (mix_order 'keyed': each position's source by its golden point, the
# counts position by position), by that code, after two batches
KEYED_STATE = '{"version": 1, "kind": "map", "epoch": 0, "rep": 0, "offset": 8, "end": 48, "done": false, "batches_delivered": 2, "world_size": 1, "batch_size": 4, "drop_last": true, "dataset_len": 48, "seed": 11, "sampler": {"kind": "MixSampler"}, "mix": {"entries": [{"reader": "FolderReader", "samples": 24, "labels": 0}, {"reader": "FolderReader", "samples": 15, "labels": 3}, {"reader": "FolderReader", "samples": 9, "labels": 6}], "schedule": {"steps": [0], "weights": [[0.5, 0.3, 0.2]], "interpolate": "constant"}, "exhausted": "repeat", "epoch_length": null, "seed": null}, "lanes": 1, "samples_per_step": 4, "mix_order": "keyed"}'


def test_state_from_the_order_before_the_quotas(roots):
    "Refused by name (MixChangedError: mix_order 'keyed'), the loader left as it was; with on_mix_change='continue' the epoch goes on from its position and the next epoch is whole."
    dl = _loader(_mix(roots))
    with pytest.raises(MixChangedError, match="saved with mix_order 'keyed'"):
        dl.load_state_dict(json.loads(KEYED_STATE))
    fresh, _ = run_epochs(_loader(_mix(roots)), 1)
    again, _ = run_epochs(dl, 1)
    assert len(again) == len(fresh) == len(dl)
    same_batches(again, fresh)  # the refused state changed nothing: the epoch from its start
    dl = _loader(_mix(roots, on_mix_change='continue'))
    dl.load_state_dict(json.loads(KEYED_STATE))
    got, sd = run_epochs(dl, 2)
    assert sd['done'] and len(got) == 2 * len(dl) - 2 and sd['mix_order'] == 'quota'


def test_exact_once_per_source_with_stop(roots):
    "exhausted='stop': the epoch ends when the first source runs out; no sample of any source comes twice."
    ds = _mix(roots, exhausted='stop', labels=None)
    dl = _loader(ds, is_training=False, use_prefetcher=False)
    keys = [(int(t), _key(x)) for xb, yb in run_epochs(dl, 1)[0] for x, t in zip(xb, yb, strict=True)]
    order = dl.batch_sampler.sampler.order()
    assert len(keys) == len(order) == len(set(keys))
    ent, _ = order.locate(np.arange(len(order)))
    counts = np.bincount(ent, minlength=3)
    assert counts.max() == counts[np.argmax(counts / ds.reader.lengths)] and (counts <= ds.reader.lengths).all()
    assert (counts == ds.reader.lengths).any()  # one source was read to its end


def test_window_accuracy_every_rank(roots):
    "In every window of 1,000 batches of every rank (4 ranks, a ramped schedule), each share within 1 point of its weight."
    sched = [(0, [0.6, 0.3, 0.1]), (1500, [0.2, 0.3, 0.5])]
    ds = _mix(roots, weights=None, schedule=sched, interpolate='linear', epoch_length=4 * 8 * 3000)
    for r in range(4):
        plan = mix_batching(ds, 8, is_training=True, seed=0, num_replicas=4, rank=r)[1]['batch_sampler']
        flat = np.array([[i for i, _ in b] for b in plan])
        ent = np.searchsorted(ds.reader.starts, flat, side='right') - 1  # batches x 8
        steps = np.arange(len(flat))  # one global batch a step (samples_per_step: 4 ranks x 8)
        w = ds.schedule.at(steps)
        for k in range(0, len(flat) - 999, 250):
            share = np.bincount(ent[k:k + 1000].ravel(), minlength=3) / 8000
            assert np.abs(share - w[k:k + 1000].mean(0)).max() < 0.01, (r, k, share)


def test_labels_per_source(roots):
    ds = _mix(roots)  # 'stack': source 1's classes after source 0's three, source 2's after those
    _, y = next(iter(_loader(ds, use_prefetcher=False, num_workers=0)))
    assert set(ds.reader.targets) == set(range(9)) and all(0 <= int(t) < 9 for t in y)
    assert mix_datasets([str(r) for r in roots[:2]], labels=[0, {0: 2, 1: 1, 2: 0}]).reader[24][1] in (0, 1, 2)


def test_wds_shards_as_a_source(roots, tmp_path):
    b = io.BytesIO(); Image.new('RGB', (20, 16), (90, 30, 60)).save(b, 'JPEG')
    write_shards(tmp_path, 'mx', 3, 4, lambda i, s: b.getvalue())
    shards = create_reader('wds/mx', root=str(tmp_path), split='train')
    ds = mix_datasets([str(roots[0]), shards], weights=[0.5, 0.5], labels=[0, 100])
    assert len(ds) == 24 + 12 and ds.reader[24 + 5][1] == 105
    xs, ys = next(iter(_loader(ds, use_prefetcher=False)))
    assert xs.shape[0] == B


def _ranks(roots, monkeypatch, W, workers, stop=None, sd=None):
    "Each of W simulated ranks' batches (targets and pixel hashes) with `workers` worker processes, and rank 0's state after `stop` batches."
    import timmdata.loader as tl
    runs, states = [], []
    for r in range(W):
        monkeypatch.setattr(tl, 'mix_batching', lambda ds, bs, **kw: mix_batching(ds, bs, **(kw | dict(num_replicas=W, rank=r))))
        ds = _mix(roots, epoch_length=96)
        dl = _loader(ds, num_workers=workers, color_jitter=None, re_prob=0.0, use_prefetcher=False)
        batches, state = run_epochs(dl, 1, stop=stop, sd=sd, take=lambda b: [(int(t), _key(x)) for x, t in zip(*b, strict=True)])
        runs.append(batches); states.append(state)
    return runs, states


def test_resume_on_other_ranks_and_workers(roots, monkeypatch):
    "2 ranks x 2 workers save after 3 batches; 3 ranks x 1 worker go on: the rest of the global order, bit for bit."
    ref, _ = _ranks(roots, monkeypatch, 2, 2)
    head, states = _ranks(roots, monkeypatch, 2, 2, stop=3)
    assert states[0] == states[1] and states[0]['offset'] == 3 * B * 2 and states[0]['lanes'] == 2
    for r in range(2): assert head[r] == ref[r][:3]
    tail, _ = _ranks(roots, monkeypatch, 3, 1, sd=states[0])
    glob = lambda runs: [runs[r][k][i] for k in range(len(runs[0])) for i in range(len(runs[0][k])) for r in range(len(runs))]
    want, got = glob([r[3:] for r in ref]), glob(tail)
    assert len(got) >= len(want) and got[:len(want)] == want


def _threads_and_files(dl) -> tuple:
    "Threads and open files of the loader's worker processes, idle after a whole epoch (persistent: each has sent its batches, so its queue's thread runs and no image is open); and how many there are."
    from timmdata.tools.bench import worker_pids
    for _ in dl: pass
    kids = worker_pids(dl)
    threads = sum(len(os.listdir(f'/proc/{p}/task')) for p in kids)
    files = sum(len(os.listdir(f'/proc/{p}/fd')) for p in kids)
    return threads, files, len(kids)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir('/proc/self/task'), reason='counts threads in /proc (Linux)')
def test_100_sources_as_many_threads_as_one(roots):
    "The workers of a 100-source loader hold as many threads and open files as a 1-source one (the mix adds no thread or file: its order is made in the main process, in numpy, without threads)."
    one = mix_datasets([str(roots[0])])
    many = mix_datasets([str(roots[0])] * 100)  # 100 entries (each its own permutation) over one folder
    a = _threads_and_files(_loader(one, num_workers=2, persistent_workers=True))
    b = _threads_and_files(_loader(many, num_workers=2, persistent_workers=True))
    # open files: each batch's shared memory still in flight may hold a descriptor for a moment (up to 2 workers x
    # a prefetch factor of 2 of them, seen under load); a file or a thread per source would add 100
    assert a[2] == b[2] == 2 and b[0] == a[0] and abs(b[1] - a[1]) <= 2 * 2, (a, b)


def _gloo_rank(rank, world, workers, port, roots, out, stop, sd_path):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world)
    try:
        torch.manual_seed(rank)  # ranks seeded differently: the loader's seed is rank 0's
        ds = mix_datasets([str(r) for r in roots], weights=[0.5, 0.3, 0.2], labels='stack', epoch_length=96)
        dl = create_loader(ds, 24, 2, is_training=True, distributed=True, num_workers=workers, device='cpu',
                           color_jitter=None, persistent_workers=False)
        if stop is None and os.path.exists(sd_path):
            with open(sd_path) as f: dl.load_state_dict(json.load(f))
        got, state = [], None
        dl.set_epoch(0)
        for i, (x, y) in enumerate(dl):
            got.append([(int(t), _key(im)) for im, t in zip(x, y, strict=True)])
            if stop is not None and i + 1 == stop:
                state = dl.state_dict(); break
        with open(os.path.join(out, f'{world}-{rank}-{stop}.pkl'), 'wb') as f: pickle.dump(dict(batches=got, state=state), f)
        if state is not None and rank == 0:
            with open(sd_path, 'w') as f: json.dump(state, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # about 5 min on a loaded 2-core machine (18 processes start); run: TIMMDATA_SLOW=1 pytest -m slow tests/test_mixing.py
def test_gloo_2x2_resumed_on_3x1(roots, tmp_path):
    "2 gloo ranks x 2 workers save after 3 steps; 3 ranks x 1 worker read the rest: the same global order, bit for bit."
    import torch.multiprocessing as mp
    sd_path, ref_dir = str(tmp_path / 'state.json'), tmp_path / 'ref'
    ref_dir.mkdir()
    for world, workers, stop, out in ((2, 2, None, ref_dir), (2, 2, 3, tmp_path), (3, 1, None, tmp_path)):
        mp.spawn(_gloo_rank, args=(world, workers, free_port(), roots, str(out), stop, sd_path), nprocs=world, join=True)
    load = lambda p: pickle.loads(p.read_bytes())
    ref = [load(ref_dir / f'2-{r}-None.pkl')['batches'] for r in range(2)]
    cut = [load(tmp_path / f'2-{r}-3.pkl') for r in range(2)]
    rest = [load(tmp_path / f'3-{r}-None.pkl')['batches'] for r in range(3)]
    assert cut[0]['state'] == cut[1]['state'] and cut[0]['state']['offset'] == 3 * 2 * 2
    for r in range(2): assert cut[r]['batches'] == ref[r][:3]
    glob = lambda runs: [runs[r][k][i] for k in range(len(runs[0])) for i in range(len(runs[0][k])) for r in range(len(runs))]
    want, got = glob([r[3:] for r in ref]), glob(rest)
    assert len(got) >= len(want) and got[:len(want)] == want  # the rest of the epoch, in the global order, same pixels


def test_refused_with_what_a_mix_cannot_take(roots):
    with pytest.raises(NotImplementedError, match='decode_device'):
        create_loader(_mix(roots), 24, B, decode_device='cuda')
    with pytest.raises(ValueError, match='num_aug_repeats'):
        _loader(_mix(roots), num_aug_repeats=3)
    with pytest.raises(NotImplementedError, match='input_size_choices'):
        _loader(_mix(roots), input_size_choices=[24, 32])
