"""Orders by position for map-style epochs (`create_loader(..., order='global')`): bit-identical resume on other numbers
of ranks and workers (2 ranks x 2 workers saved, 3 ranks x 1 worker resumed), timm's samplers kept as the default, a
billion-sample epoch's order in bounded memory, and what it refuses by name."""
import hashlib, tracemalloc
import numpy as np
import pytest

from timmdata.dataset import ImageDataset
from timmdata.distributed_sampler import PositionOrder, PositionSampler, SeededRandomSampler
from timmdata.loader import create_loader
from timmdata.tools.sample_data import make_sample_dataset
from _helpers import run_epochs

B = 4


@pytest.fixture(scope='module')
def root(tmp_path_factory):
    return make_sample_dataset(tmp_path_factory.mktemp('position') / 'd', n_train=16, n_val=1, classes=['a', 'b', 'c'],
                               size=(40, 32), seed=0, num_workers=0)  # 48 train images


def _loader(root, **kw):
    args = dict(is_training=True, num_workers=0, device='cpu', seed=11, order='global', color_jitter=None,
                use_prefetcher=False) | kw
    return create_loader(ImageDataset(str(root), split='train'), 24, B, **args)


def _ranks(root, monkeypatch, W, workers, stop=None, sd=None):
    "Each of W simulated ranks' batches (targets and pixel hashes) with `workers` worker processes, and each rank's state after `stop` batches."
    import timmdata.scheduled_sampler as ss
    runs, states = [], []
    for r in range(W):
        monkeypatch.setattr(ss, 'PositionSampler', lambda ds, seed, *_: PositionSampler(ds, seed, W, r))
        dl = _loader(root, num_workers=workers)
        take = lambda b: [(int(t), hashlib.sha1(x.numpy().tobytes()).hexdigest()) for x, t in zip(*b, strict=True)]
        batches, state = run_epochs(dl, 1, stop=stop, sd=sd, take=take)
        runs.append(batches); states.append(state)
    return runs, states


@pytest.mark.slow
def test_resume_on_other_ranks_and_workers(root, monkeypatch):
    "2 ranks x 2 workers save after 3 batches; 3 ranks x 1 worker go on: the rest of the global order, bit for bit."
    ref, _ = _ranks(root, monkeypatch, 2, 2)
    head, states = _ranks(root, monkeypatch, 2, 2, stop=3)
    assert states[0] == states[1] and states[0]['offset'] == 3 * B * 2
    assert states[0]['sampler'] == dict(kind='PositionSampler')
    for r in range(2): assert head[r] == ref[r][:3]
    tail, _ = _ranks(root, monkeypatch, 3, 1, sd=states[0])
    glob = lambda runs: [runs[r][k][i] for k in range(len(runs[0])) for i in range(len(runs[0][k])) for r in range(len(runs))]
    want, got = glob([r[3:] for r in ref]), glob(tail)
    assert len(want) == 48 - 3 * B * 2 and len(got) >= len(want) and got[:len(want)] == want
    assert sorted(t for t, _ in glob(ref)) == sorted(t for t, _ in glob(head) + want)  # every sample once


def test_threads_and_processes_the_same_batches(root):
    a, _ = run_epochs(_loader(root, num_workers=2), 2)
    b, _ = run_epochs(_loader(root, num_workers=2, worker_mode='thread'), 2)
    c, _ = run_epochs(_loader(root), 2)
    for x, y, z in zip(a, b, c, strict=True):
        for u, v, w in zip(x, y, z, strict=True): assert (u == v).all() and (u == w).all()


def test_timm_order_stays_the_default(root):
    assert isinstance(_loader(root, order=None).batch_sampler.sampler, SeededRandomSampler)
    assert isinstance(_loader(root).batch_sampler.sampler, PositionSampler)
    _, sd = run_epochs(_loader(root, order=None), 1, stop=1)
    from timmdata.engine.batch_plan import ResumeStateError
    with pytest.raises(ResumeStateError, match='sampler'):  # a state of the other order: refused by name
        _loader(root).load_state_dict(sd)


def test_refused_by_name(root):
    with pytest.raises(ValueError, match="order must be None"):
        _loader(root, order='random')
    with pytest.raises(ValueError, match='num_aug_repeats'):
        _loader(root, num_aug_repeats=3, distributed=False)


def test_a_billion_samples_in_bounded_memory():
    "A rank of 1,024 reading a run of its positions of a 10^9-sample epoch: the order holds one run, not the epoch."
    class Sized:
        def __len__(self): return 10**9
    s = PositionSampler(Sized(), seed=3, num_replicas=1024, rank=5)
    tracemalloc.start()
    order, total, W, rank = s.global_order()
    start = 10**8 // W * W + rank  # a resume deep into the epoch: this rank's positions from there
    got = [order[p] for p in range(start, start + 256 * 20 * W, W)]
    held = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert held < 64e6, held
    assert isinstance(order, PositionOrder) and len(set(got)) == len(got)
    assert got[:100] == PositionOrder(10**9, order.seed).take(np.arange(start, start + 100 * W, W)).tolist()
