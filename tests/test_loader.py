"""create_loader / PrefetchLoader: parity with timm, multi-worker coverage and seeding, consumer lifetime, CUDA."""
import os
from functools import partial

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from timmdata.dataset import ImageDataset
from timmdata.engine.collate import BatchCollate
from timmdata.loader import (MultiEpochsDataLoader, PrefetchLoader, worker_init, create_loader, fast_collate)
from timmdata.tools.sample_data import make_sample_image
from timmdata.transforms import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from _datasets import IndexDataset, SeedDataset

MEAN = torch.tensor(IMAGENET_DEFAULT_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(IMAGENET_DEFAULT_STD).view(1, 3, 1, 1)
LO, HI = -MEAN / STD, (1 - MEAN) / STD


def _levels(a, b):
    "abs difference of two normalised batches, in uint8 grey levels."
    return ((a - b) * STD * 255).abs()


def test_eval_parity_with_timm(sample_root):
    from timm.data import create_loader as timm_create_loader, ImageDataset as TimmImageDataset
    ours = create_loader(ImageDataset(str(sample_root / 'val')), (3, 224, 224), 8, num_workers=0, device='cpu')
    theirs = timm_create_loader(TimmImageDataset(str(sample_root / 'val')), (3, 224, 224), 8, num_workers=0,
                                use_prefetcher=True, device=torch.device('cpu'))
    assert len(ours) == len(theirs) == 4
    n = 0
    for (x, y), (xt, yt) in zip(ours, theirs, strict=True):
        assert x.shape == xt.shape and x.dtype == xt.dtype == torch.float32
        assert torch.equal(y, yt)
        d = _levels(x, xt)
        assert d.max() <= 2 + 1e-3, d.max()
        assert d.mean() <= 0.5, d.mean()
        n += len(y)
    assert n == 30


def _linked_folder(root, img, n=256):
    "One image saved once and hard-linked `n` times into one class folder: every sample differs only by its augmentation."
    (root / 'a').mkdir(parents=True)
    img.save(root / 'a' / 'i0.jpg', quality=100)
    for i in range(1, n): os.link(root / 'a' / 'i0.jpg', root / 'a' / f'i{i}.jpg')
    return root


GW, GH, GS = 128, 96, 24  # the coordinate image's size, the output size


@pytest.fixture(scope='module')
def stat_roots(tmp_path_factory):
    "A coordinate image (red = x, green = y: a crop's box and flip can be read off the output) and a photo."
    x, y = np.meshgrid(np.arange(GW) * 255 / (GW - 1), np.arange(GH) * 255 / (GH - 1))
    grad = Image.fromarray(np.stack([x, y, np.full_like(x, 128)], -1).round().astype(np.uint8))
    tmp = tmp_path_factory.mktemp('parity_stats')
    return _linked_folder(tmp / 'grad', grad), _linked_folder(tmp / 'photo', make_sample_image(3).resize((96, 72)))


@pytest.fixture
def one_thread():
    "One intra-op thread while both loaders run in this process (two threads on two shared cores cost 20x in resizes)."
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _geometry(loader, epochs):
    "Per sample: crop area / image area, log(crop width / height), flipped; read off the coordinate image's output."
    out = []
    for _ in range(epochs):
        for x, _ in loader:
            assert x.shape[1:] == (3, GS, GS) and x.dtype == torch.float32
            v = (x * STD + MEAN) * 255
            r, g = v[:, 0].mean(1), v[:, 1].mean(2)  # red along a row, green down a column
            w = (r[:, -1] - r[:, 0]) * GS / (GS - 1) * (GW - 1) / 255  # first and last pixel centres: (GS - 1) / GS of the crop
            h = (g[:, -1] - g[:, 0]) * GS / (GS - 1) * (GH - 1) / 255
            out.append(torch.stack([w.abs() * h.abs() / (GW * GH), (w.abs() / h.abs()).log(), (w < 0).double()], 1))
    return torch.cat(out).double().numpy()


def _photometric(loader, epochs):
    "Per sample: each channel's mean and standard deviation, and whether a region was erased (pixels exactly 0 in all channels)."
    out = []
    for _ in range(epochs):
        for x, _ in loader:
            assert (x >= LO - 1e-5).all() and (x <= HI + 1e-5).all()
            erased = (x == 0).all(1).flatten(1).any(1)  # 0 is no pixel value normalised: only the erasing's constant fill
            out.append(torch.cat([x.mean((2, 3)), x.std((2, 3)), erased[:, None].float()], 1))
    return torch.cat(out).double().numpy()


Z, KS_C = 4.5, 2.5  # a two-sided false alarm of 7e-6 per comparison (~1e-4 over the 30 below) for any seed: Z standard
# errors of a normal; for the KS distance c = sqrt(-log(7e-6 / 2) / 2) = 2.5 (Smirnov's asymptotic tail 2 exp(-2 c^2))


def _ks(a, b):
    "The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical distribution functions."
    z = np.sort(np.concatenate([a, b]))
    return np.abs(np.searchsorted(np.sort(a), z, 'right') / len(a) - np.searchsorted(np.sort(b), z, 'right') / len(b)).max()


def _same_distribution(a, b, name):
    """`a` (ours) and `b` (timm's) are draws of one distribution: means within Z standard errors of their difference
    (sqrt(var_a/n + var_b/n), from the data), spreads within Z standard errors of log(sd) (delta method: sqrt(kurtosis - 1) / (2 sqrt(n))),
    and the KS distance below its critical value at the same false-alarm rate, KS_C * sqrt(2 / n) (0.11 at n = 1024)."""
    n = len(a); assert n == len(b) and n >= 500
    se = np.sqrt(a.var() / n + b.var() / n)
    assert abs(a.mean() - b.mean()) <= Z * se, f'{name}: means {a.mean():.4f} vs timm {b.mean():.4f} (bound {Z * se:.4f})'
    if a.std() > 0 and b.std() > 0:
        kurt = lambda v: ((v - v.mean()) ** 4).mean() / v.var() ** 2
        se_log = np.sqrt((kurt(a) - 1) / (4 * n) + (kurt(b) - 1) / (4 * n))
        assert abs(np.log(a.std() / b.std())) <= Z * se_log, f'{name}: sd {a.std():.4f} vs timm {b.std():.4f} (bound {Z * se_log:.3f} in log)'
    d, crit = _ks(a, b), KS_C * np.sqrt(2 / n)
    assert d <= crit, f'{name}: KS distance {d:.3f} > {crit:.3f}'


def test_train_parity_with_timm(stat_roots, one_thread):
    """create_loader's training augmentation draws from timm's distributions: crop area and aspect, flip rate, colour
    jitter's effect on each channel's mean and spread, the erasing rate; 1024 samples a side, one image each, so only
    the augmentation varies. Each bound is the sampling error at that count (`_same_distribution`); a real difference
    fails (each tried on our side): scale=(0.2, 1) moves the mean crop area 0.44 -> 0.48 (bound 0.04), ratio=(0.7, 1.4)
    widens the log-aspect spread by 20% (bound 10%), hflip=0.35 the flip rate 0.49 -> 0.35 (bound 0.10), color_jitter=0.3
    narrows the spread of channel means by 25% (bound 11%), re_prob=0.4 the erased rate 0.25 -> 0.40 (bound 0.09).
    Not caught at this count: flip rates within ~0.1 of each other (hflip=0.42 passes)."""
    from timm.data import create_loader as timm_create_loader, ImageDataset as TimmImageDataset
    grad, photo = (str(r) for r in stat_roots)
    kw = dict(is_training=True, num_workers=0, color_jitter=0.)
    ours = _geometry(create_loader(ImageDataset(grad), GS, 64, device='cpu', **kw), 4)
    theirs = _geometry(timm_create_loader(TimmImageDataset(grad), GS, 64, device=torch.device('cpu'), **kw), 4)
    assert len(ours) == len(theirs) == 1024
    for k, name in enumerate(['crop area', 'log aspect', 'hflip']): _same_distribution(ours[:, k], theirs[:, k], name)
    # the supports: scale (0.08, 1), ratio (3/4, 4/3), as read through a 24-pixel output (a smallest crop is ~30 x 25
    # source pixels: up to a pixel of reading error a side, 0.01 in area, 0.05 in log aspect)
    assert 0.07 <= ours[:, 0].min() and ours[:, 0].max() <= 1.01 and np.abs(ours[:, 1]).max() <= np.log(4 / 3) + 0.05
    assert abs(ours[:, 2].mean() - 0.5) <= Z * np.sqrt(0.25 / 1024)  # flips: binomial(1024, 0.5) about timm's default

    kw = dict(is_training=True, num_workers=0, re_prob=0.25, color_jitter=0.4)
    ours = _photometric(create_loader(ImageDataset(photo), GS, 64, device='cpu', **kw), 4)
    theirs = _photometric(timm_create_loader(TimmImageDataset(photo), GS, 64, device=torch.device('cpu'), **kw), 4)
    assert len(ours) == len(theirs) == 1024
    for k, name in enumerate(['mean R', 'mean G', 'mean B', 'sd R', 'sd G', 'sd B', 'erased']):
        _same_distribution(ours[:, k], theirs[:, k], name)
    assert abs(ours[:, 6].mean() - 0.25) <= Z * np.sqrt(0.25 * 0.75 / 1024)  # erased: binomial(1024, re_prob)


def test_seed_notebook_code(sample_root):
    dataset = ImageDataset(str(sample_root))
    img, target = dataset[0]
    assert target == 0 and img.size == (426, 320)
    train_loader = create_loader(dataset, (3, 224, 224), 4)
    n = 0
    for x, y in train_loader:
        assert x.shape[1:] == (3, 224, 224) and x.dtype == torch.float32
        n += len(y)
    assert n == len(dataset)


@pytest.mark.parametrize('multi_epochs', [False, True])
def test_two_workers_every_sample_once_per_epoch(sample_root, multi_epochs):
    ds = IndexDataset(str(sample_root / 'train'))
    loader = create_loader(ds, 64, 6, is_training=True, num_workers=2, device='cpu',
                           use_multi_epochs_loader=multi_epochs)
    assert len(loader) == 10
    orders = []
    for epoch in range(3):
        seen = torch.cat([y for _, y in loader]).tolist()
        assert sorted(seen) == list(range(60)), (epoch, sorted(seen))
        orders.append(seen)
    assert orders[0] != orders[1]  # shuffled anew each epoch


def test_eval_two_workers_in_order(sample_root):
    ds = IndexDataset(str(sample_root / 'val'))
    loader = create_loader(ds, 32, 7, num_workers=2, device='cpu')
    assert torch.cat([y for _, y in loader]).tolist() == list(range(30))


def _first_draws(loader):
    draws = [tuple(int(t[0]) for t in y) for _, y in loader]
    return draws[0], draws[1]  # batch 0 from worker 0, batch 1 from worker 1 (round robin)


def _seed_by_id(info):
    return 1000 + info.id


@pytest.mark.parametrize('seeding', ['all', 'part', 'callable'])
def test_worker_seeds_differ_per_worker_and_rank(seeding):
    def make(rank):
        torch.manual_seed(0)  # every "rank" seeded alike, as a careless script would
        ws = _seed_by_id if seeding == 'callable' else seeding  # top level: forkserver and spawn pickle it
        return DataLoader(SeedDataset(), batch_size=1, num_workers=2, collate_fn=fast_collate,
                          worker_init_fn=partial(worker_init, worker_seeding=ws, rank=rank))
    r0, r1 = _first_draws(make(0)), _first_draws(make(1))
    assert r0[0] != r0[1]  # workers differ (numpy, torch and random)
    assert all(a != b for a, b in zip(*r0, strict=True))
    if seeding == 'all':
        assert set(r0).isdisjoint(r1)  # ranks differ even though torch was seeded alike
        assert r0 == _first_draws(make(0))  # and it is repeatable
    if seeding == 'part':  # torch's own per-worker seeding only: the same for every rank seeded alike
        assert r0 == r1
    if seeding == 'callable':
        rng = np.random.RandomState(1000)
        assert r0[0][0] == rng.randint(0, 2**31 - 1)


def test_consumer_keeping_every_batch_sees_correct_data(sample_root):
    "A consumer that keeps all batches (and views of them) over two epochs finds them unchanged."
    ds = ImageDataset(str(sample_root / 'val'))
    loader = create_loader(ds, 48, 4, num_workers=2, device='cpu')
    kept = [(x, x[1:3], y) for _ in range(2) for x, y in loader]
    ref = create_loader(ImageDataset(str(sample_root / 'val')), 48, 4, num_workers=0, device='cpu')
    expect = [x.clone() for _ in range(2) for x, _ in ref]
    assert len(kept) == len(expect) == 16
    ptrs = {x.data_ptr() for x, _, _ in kept}
    assert len(ptrs) == 16  # every kept batch has its own memory
    for (x, v, _), e in zip(kept, expect, strict=True):
        assert torch.equal(x, e) and torch.equal(v, e[1:3])


def test_consumer_with_jitter_and_erasing_sees_correct_data():
    g = torch.Generator().manual_seed(0)
    raw = [(torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8, generator=g), torch.arange(6)) for _ in range(20)]
    torch.manual_seed(3)  # random erasing draws from torch's generator
    kept = [x for x, _ in PrefetchLoader(raw, device='cpu', color_jitter=0.4, re_prob=0.5, seed=1)]
    torch.manual_seed(3)
    again = [x.clone() for x, _ in PrefetchLoader(raw, device='cpu', color_jitter=0.4, re_prob=0.5, seed=1)]
    assert len(kept) == 20
    for a, b in zip(kept, again, strict=True): assert torch.equal(a, b)
    plain = [x for x, _ in PrefetchLoader(raw, device='cpu', color_jitter=0.4, seed=1)]
    assert any(not torch.equal(a, b) for a, b in zip(kept, plain, strict=True))  # erasing really ran


def test_pass_throughs():
    class Sampler(list):
        epoch = None
        def set_epoch(self, e): self.epoch = e
    class Mix(BatchCollate):  # a mixing collate, declared as such
        mixes, mixup_enabled = True, True
        def __call__(self, b): return fast_collate(b)
    s = Sampler(range(4))
    dl = DataLoader([(torch.zeros(3, 2, 2, dtype=torch.uint8), 0)] * 4, batch_size=2, sampler=s, collate_fn=Mix())
    pl = PrefetchLoader(dl, device='cpu')
    pl.set_epoch(7)
    assert s.epoch == 7
    assert pl.mixup_enabled
    pl.mixup_enabled = False
    assert dl.collate_fn.mixup_enabled is False
    assert len(pl) == 2 and pl.sampler is s and pl.dataset is dl.dataset and pl.batch_sampler is dl.batch_sampler
    assert not PrefetchLoader([], device='cpu').mixup_enabled


class _ToMeta:  # stands in for a transform that moves to CUDA (no GPU needed to test the guard)
    input_format = 'tensor'
    def __call__(self, x): return torch.empty(3, 8, 8, dtype=torch.uint8, device='meta')

class _CudaInitFails:  # what a forked worker raises when a Dataset calls .cuda()
    input_format = 'tensor'
    def __call__(self, x): raise RuntimeError('CUDA error: initialization error')

@pytest.mark.parametrize('transform', [_ToMeta(), _CudaInitFails()])
def test_cuda_in_worker_is_a_clear_error(sample_root, transform):
    ds = ImageDataset(str(sample_root / 'val'))
    loader = create_loader(ds, 8, 2, num_workers=1, persistent_workers=False, device='cpu', worker_mode='process')
    ds.transform = transform
    with pytest.raises(RuntimeError, match='move to the device in the loader, not in the Dataset'):
        next(iter(loader))


def test_bad_input(sample_root):
    ds = ImageDataset(str(sample_root / 'val'))
    for kw, msg in [(dict(batch_size=0), 'batch_size must be an int >= 1'),
                    (dict(batch_size=2.5), 'batch_size must be an int >= 1'),
                    (dict(input_size=(224, 'x')), 'input_size must be'),
                    (dict(input_size=(3, 224, 224, 3)), 'input_size must be'),
                    (dict(device='gpu:0'), 'device must be a torch.device'),
                    (dict(worker_seeding='none'), "worker_seeding must be 'all', 'part' or a callable"),
                    (dict(tf_preprocessing=True), 'not implemented')]:
        args = dict(input_size=32, batch_size=2); args.update(kw)
        with pytest.raises((ValueError, NotImplementedError), match=msg):
            create_loader(ds, **args)
    with pytest.raises(TypeError, match='could not set list.transform'):
        create_loader(list(range(10)), 32, 2)


def test_num_workers_zero_and_defaults(sample_root):
    loader = create_loader(ImageDataset(str(sample_root / 'val')), 32, 10, num_workers=0)
    assert sum(len(y) for _, y in loader) == 30
    assert loader.device.type == ('cuda' if torch.cuda.is_available() else 'cpu')


def test_channels_last_and_dtype(sample_root):
    loader = create_loader(ImageDataset(str(sample_root / 'val')), 32, 10, num_workers=0, device='cpu',
                           channels_last=True, img_dtype=torch.bfloat16)
    x, _ = next(iter(loader))
    assert x.dtype == torch.bfloat16 and x.shape == (10, 3, 32, 32)
    loader = create_loader(ImageDataset(str(sample_root / 'train')), 32, 10, num_workers=0, device='cpu',
                           channels_last=True, is_training=True)
    x, _ = next(iter(loader))
    assert x.is_contiguous(memory_format=torch.channels_last)


def test_use_prefetcher_false_is_a_plain_dataloader(sample_root):
    loader = create_loader(ImageDataset(str(sample_root / 'val')), 32, 10, num_workers=0, use_prefetcher=False)
    assert isinstance(loader, DataLoader)
    x, y = next(iter(loader))
    assert x.dtype == torch.float32 and x.shape == (10, 3, 32, 32)


def test_multi_epochs_loader_keeps_its_workers():
    dl = MultiEpochsDataLoader(list(range(10)), batch_size=4, num_workers=2)
    assert [b.tolist() for b in dl] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    it = dl._iterator
    assert [b.tolist() for b in dl][0] == [0, 1, 2, 3]
    assert dl._iterator is it  # the same worker pool served both epochs


# ---- CUDA (skipped without a GPU) ----

def _host_batches(n=12, b=16, hw=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 256, (b, 3, hw, hw), dtype=torch.uint8, generator=g).pin_memory(), torch.arange(b))
            for _ in range(n)]


@pytest.mark.cuda
def test_cuda_device_and_dtype(sample_root):
    loader = create_loader(ImageDataset(str(sample_root / 'train')), 64, 8, is_training=True, num_workers=2,
                           img_dtype=torch.float16, channels_last=True, re_prob=0.5)
    assert loader.device.type == 'cuda' and loader.loader.pin_memory
    for x, y in loader:
        assert x.device.type == 'cuda' and x.dtype == torch.float16 and y.device.type == 'cuda' and y.dtype == torch.int64
        assert x.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.cuda
def test_cuda_matches_cpu():
    host = _host_batches(n=3)
    for jit in (None, 0.4):
        cpu = [x for x, _ in PrefetchLoader(host, device='cpu', color_jitter=jit, seed=5)]
        gpu = [x.cpu() for x, _ in PrefetchLoader(host, device='cuda', color_jitter=jit, seed=5)]
        for a, b in zip(cpu, gpu, strict=True): torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.cuda
def test_cuda_consumer_lifetime():
    host = _host_batches()
    expect = [((x.float() / 255 - MEAN) / STD) for x, _ in host]
    # 1. a consumer keeping every batch
    kept = [x for x, _ in PrefetchLoader(host, device='cuda')]
    torch.cuda.synchronize()
    for a, e in zip(kept, expect, strict=True): torch.testing.assert_close(a.cpu(), e, atol=1e-5, rtol=0)
    del kept
    # 2. a consumer that queues slow GPU work reading the batch, then drops its reference at once: the memory
    #    must not be rewritten by the next batch's copy before that work has run
    for num_prefetch in (1, 2):
        it, copies = iter(PrefetchLoader(host, device='cuda', num_prefetch=num_prefetch)), []
        while True:
            try: x, _ = next(it)
            except StopIteration: break
            torch.cuda._sleep(50_000_000)  # tens of ms of GPU time on the consumer stream before the read
            copies.append(x.clone())
            del x
        torch.cuda.synchronize()
        for a, e in zip(copies, expect, strict=True): torch.testing.assert_close(a.cpu(), e, atol=1e-5, rtol=0)


@pytest.mark.cuda
def test_cuda_reserved_memory_flat_over_epochs():
    host = _host_batches(n=10, b=64, hw=224)
    loader = PrefetchLoader(host, device='cuda', color_jitter=0.4)
    reserved = []
    for epoch in range(5):
        for x, y in loader: (x * 2).sum()
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved())
    assert loader.stream is not None
    # a new stream per epoch (timm issue 2781) would add ~100+ MiB every epoch here
    assert max(reserved) - reserved[0] <= 64 * 2**20, [r / 2**20 for r in reserved]


def test_dropped_loader_is_freed_by_reference_count(sample_root):
    "No reference cycle: dropping the loader frees its DataLoader (and stops its workers) at once, not at a later GC."
    import gc, weakref
    ds = ImageDataset(str(sample_root / 'train'))
    loader = create_loader(ds, 64, 8, is_training=True, num_workers=2, device='cpu')
    next(iter(loader))
    dl = weakref.ref(loader.loader)
    gc.disable()
    try:
        del loader
        assert dl() is None, 'the DataLoader outlived its PrefetchLoader: a reference cycle keeps it (and its workers) alive'
    finally: gc.enable()
