"""Batch augmentations (issue 5): RandomErasing, Mixup/CutMix, FastCollateMixup.

Parity with timm (installed as a dev dependency), statistics over many draws, odd batches, a multi-worker
DataLoader with the collate, and the GPU paths (marked cuda)."""
import math
import numpy as np
import pytest
import torch
import timm.data.mixup as tm
import timm.data.random_erasing as tre
from timmdata.mixup import Mixup, FastCollateMixup, mixup_target, cutmix_bbox_and_lam, _mix_rows_
from timmdata.random_erasing import RandomErasing

MODES = ('batch', 'pair', 'elem')
CONFIGS = [dict(mixup_alpha=1.), dict(mixup_alpha=0., cutmix_alpha=1.), dict(mixup_alpha=0.8, cutmix_alpha=1., prob=0.7),
           dict(mixup_alpha=0., cutmix_minmax=(0.2, 0.8)), dict(mixup_alpha=0.3, cutmix_alpha=1., correct_lam=False, label_smoothing=0.)]


def ks_2samp(a, b):
    "Two-sample Kolmogorov-Smirnov: (statistic, asymptotic p-value); scipy is not a dependency."
    a, b = np.sort(np.asarray(a, np.float64)), np.sort(np.asarray(b, np.float64))
    allv = np.concatenate([a, b])
    d = np.abs(np.searchsorted(a, allv, 'right') / len(a) - np.searchsorted(b, allv, 'right') / len(b)).max()
    ne = len(a) * len(b) / (len(a) + len(b))
    z = (math.sqrt(ne) + 0.12 + 0.11 / math.sqrt(ne)) * d
    return d, min(1., max(0., 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * z * z) for k in range(1, 101))))


@pytest.fixture(scope='module')
def batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, 48, 56, generator=g)
    y = torch.randint(0, 100, (64,), generator=g)
    u = [(torch.randint(0, 256, (3, 48, 56), dtype=torch.uint8, generator=g), int(y[i])) for i in range(64)]
    return x, y, u


@pytest.mark.parametrize('mode', MODES + ('half',))
@pytest.mark.parametrize('cfg', range(len(CONFIGS)))
def test_parity_with_timm(batch, mode, cfg):
    "Same numpy seed, same batch and targets as timm, for float batches and for uint8 tensors and ndarrays."
    x, y, u = batch
    kw = dict(CONFIGS[cfg], mode=mode, num_classes=100)
    for seed in range(5):
        np.random.seed(seed); ours = FastCollateMixup(**kw)([(a.clone(), l) for a, l in u])
        np.random.seed(seed); theirs = tm.FastCollateMixup(**kw)([(a.clone(), l) for a, l in u])
        np.random.seed(seed); ours_np = FastCollateMixup(**kw)([(a.numpy().copy(), l) for a, l in u])
        # decoded images are CHW views of HWC memory: stacked channels-last (as fast_collate does), same pixels
        np.random.seed(seed); ours_cl = FastCollateMixup(**kw)([(a.permute(1, 2, 0).contiguous().permute(2, 0, 1), l) for a, l in u])
        assert torch.equal(ours[0], theirs[0]) and torch.equal(ours_np[0], theirs[0]) and torch.equal(ours_cl[0], theirs[0])
        assert ours_cl[0].is_contiguous(memory_format=torch.channels_last)
        assert torch.allclose(ours[1], theirs[1], atol=1e-6) and torch.allclose(ours_np[1], theirs[1], atol=1e-6)
        assert torch.allclose(ours_cl[1], theirs[1], atol=1e-6)
        if mode == 'half': continue
        np.random.seed(seed); ours = Mixup(**kw)(x.clone(), y)
        np.random.seed(seed); theirs = tm.Mixup(**kw)(x.clone(), y)
        assert torch.equal(ours[0], theirs[0])
        assert torch.allclose(ours[1], theirs[1], atol=1e-6)


def test_lambda_matches_numpy_beta():
    "Lambdas read back from soft targets vs numpy's Beta sampler: two-sample KS, for a spiky and a flat alpha."
    n = 64
    for alpha in (0.2, 1.0):
        m = Mixup(mixup_alpha=alpha, mode='elem', label_smoothing=0., num_classes=n, rng=np.random.RandomState(1))
        lam = np.concatenate([m(torch.zeros(n, 1, 2, 2), torch.arange(n))[1].diagonal().numpy() for _ in range(60)])
        ref = np.random.RandomState(2).beta(alpha, alpha, size=len(lam))
        assert ks_2samp(lam, ref)[1] > 0.01
    assert ks_2samp(lam, np.random.RandomState(3).beta(2., 2., size=len(lam)))[1] < 1e-6  # the test can tell


def test_batch_mode_lambda_and_cutmix_area():
    "Batch mode over many batches: one lambda per batch, Beta-distributed; CutMix's target equals the pasted area."
    N, C = 8, 8
    xc = torch.arange(N, dtype=torch.float32).view(N, 1, 1, 1).expand(N, 1, 30, 40).contiguous()
    m = Mixup(mixup_alpha=0.5, cutmix_alpha=0.5, mode='batch', label_smoothing=0., num_classes=C, rng=np.random.RandomState(0))
    mix_lams = []
    for _ in range(1500):
        x, t = m(xc.clone(), torch.arange(N))
        own = (x == xc).float().mean((1, 2, 3))
        if (own < 1).all() and (x != x.round()).any():  # mixup blended every pixel
            mix_lams.append(t[0, 0].item())
        elif (x == x.round()).all():  # cutmix (or nothing): target = area left
            assert torch.allclose(t[torch.arange(N), torch.arange(N)], own, atol=1e-6)
        assert torch.allclose(t.sum(1), torch.ones(N), atol=1e-5)
    assert len(mix_lams) > 500
    assert ks_2samp(mix_lams, np.random.RandomState(9).beta(0.5, 0.5, size=4000))[1] > 0.01


def test_label_smoothing_values():
    for C, s in ((10, 0.1), (1000, 0.1), (5, 0.3)):
        t = mixup_target(torch.arange(min(C, 8)), C, smoothing=s)
        off, on = s / C, 1 - s + s / C
        assert torch.allclose(t.sum(1), torch.ones(len(t)))
        assert torch.allclose(t.max(1).values, torch.full((len(t),), on))
        assert torch.allclose(t.min(1).values, torch.full((len(t),), off))


def test_cutmix_lambda_corrected():
    rng = np.random.RandomState(0)
    for H, W in ((224, 224), (31, 97)):
        lam0 = rng.beta(1., 1., size=5000)
        (yl, yh, xl, xh), lam = cutmix_bbox_and_lam((3, H, W), lam0, rng=rng)
        assert np.allclose(lam, 1 - (yh - yl) * (xh - xl) / (H * W))
        assert ((yl >= 0) & (yh <= H) & (xl >= 0) & (xh <= W)).all()
        assert (np.abs(lam - lam0) > 0.01).mean() > 0.2  # clipping matters, so correction matters


@pytest.mark.parametrize('n', [1, 3, 5, 63])
def test_odd_batches(batch, n):
    "Odd batches: the middle element is unmixed with its own smoothed label; 'half' gives n // 2 rows."
    x, y, u = batch
    mid = n // 2
    own = mixup_target(y[mid:mid + 1], 100, smoothing=0.1)[0]
    for mode in MODES:
        for cfg in CONFIGS:
            for seed in range(3):
                np.random.seed(seed)
                out, t = Mixup(mode=mode, num_classes=100, **cfg)(x[:n].clone(), y[:n])
                assert torch.equal(out[mid], x[mid]) and t.shape == (n, 100)
                assert torch.allclose(t.sum(1), torch.ones(n), atol=1e-5)
                if cfg.get('label_smoothing', 0.1) == 0.1: assert torch.allclose(t[mid], own)
                np.random.seed(seed)
                out, t = FastCollateMixup(mode=mode, num_classes=100, **cfg)(u[:n])
                assert torch.equal(out[mid], u[mid][0]) and out.shape[0] == n
    out, t = FastCollateMixup(mode='half', num_classes=100)(u[:n])
    assert out.shape[0] == t.shape[0] == n // 2


def _seed_numpy(w):
    np.random.seed(1234 + w)


def test_dataloader_workers_odd_last_batch():
    "FastCollateMixup as a DataLoader collate_fn in worker processes; the last batch (7 of 39) is odd."
    data = [(torch.full((3, 16, 16), i, dtype=torch.uint8), i % 10) for i in range(39)]
    dl = torch.utils.data.DataLoader(data, batch_size=8, num_workers=2, collate_fn=FastCollateMixup(mode='elem', num_classes=10),
                                     worker_init_fn=_seed_numpy)  # top level: forkserver and spawn pickle it
    sizes = []
    for xb, tb in dl:
        assert xb.dtype == torch.uint8 and tb.dtype == torch.float32
        assert torch.allclose(tb.sum(1), torch.ones(len(xb)), atol=1e-5)
        sizes.append(len(xb))
    assert sizes == [8, 8, 8, 8, 7]


def test_random_erasing_area_distribution_matches_timm():
    "Erased fraction per image (one box): within [min_area, max_area] up to pixel rounding, and distributed as timm's."
    import random
    H, W, n = 40, 56, 3000
    ours = RandomErasing(1., min_area=0.05, max_area=0.4, device='cpu', generator=torch.Generator().manual_seed(0))
    fr_ours = (ours(torch.ones(n, 1, H, W)) == 0).double().mean((1, 2, 3)).numpy()
    random.seed(0)
    theirs = tre.RandomErasing(1., min_area=0.05, max_area=0.4, device='cpu')
    fr_timm = (theirs(torch.ones(n, 1, H, W)) == 0).double().mean((1, 2, 3)).numpy()
    tol = (H + W) / 2 / (H * W) * 2
    assert fr_ours.min() >= 0.05 - tol and fr_ours.max() <= 0.4 + tol
    assert ks_2samp(fr_ours, fr_timm)[1] > 0.01


def test_random_erasing_box_shape_matches_timm():
    "Heights and widths of the boxes (and so aspect ratios) are distributed as timm's; boxes inside the image."
    import random
    H, W, n = 64, 64, 3000
    def hw(x0, x):
        er = (x != x0)[:, 0]
        rows, cols = er.any(2), er.any(1)
        ok = er.any((1, 2))
        h, w = rows.sum(1)[ok], cols.sum(1)[ok]
        assert ((h * w) == er.sum((1, 2))[ok]).all()  # the erased set is one full rectangle
        return h.numpy(), w.numpy()
    x0 = torch.randn(n, 1, H, W, generator=torch.Generator().manual_seed(1))
    h1, w1 = hw(x0, RandomErasing(1., min_aspect=0.2, device='cpu', generator=torch.Generator().manual_seed(0))(x0.clone()))
    random.seed(0)
    h2, w2 = hw(x0, tre.RandomErasing(1., min_aspect=0.2, device='cpu')(x0.clone()))
    assert ks_2samp(h1, h2)[1] > 0.01 and ks_2samp(w1, w2)[1] > 0.01
    assert ks_2samp(np.log(h1 / w1), np.log(h2 / w2))[1] > 0.01


def test_random_erasing_same_box_same_output():
    "Given the box timm drew, erasing it here gives timm's tensor exactly (const and rand modes)."
    import random
    x0 = torch.randn(1, 3, 32, 40, generator=torch.Generator().manual_seed(0))
    for seed in range(20):
        random.seed(seed)
        t = tre.RandomErasing(1., mode='const', device='cpu')(x0.clone())
        er = (t != x0)[0].any(0)
        if not er.any(): continue
        rows, cols = er.any(1).nonzero()[:, 0], er.any(0).nonzero()[:, 0]
        box = torch.tensor([[[rows[0], cols[0], len(rows), len(cols)]]])
        for how in ('slice', 'mask'):
            assert torch.equal(RandomErasing(mode='const').erase(x0.clone(), box, how=how), t)


@pytest.mark.cuda
def test_random_erasing_cuda_matches_cpu():
    re = RandomErasing(0.7, mode='rand', max_count=3, generator=torch.Generator().manual_seed(0))
    x = torch.randn(16, 3, 64, 64)
    boxes = re.get_params(16, 64, 64)
    torch.manual_seed(0); g = re.erase(x.cuda(), boxes)  # the mask path
    assert ((g.cpu() != x).any(1) == (re.erase(x.clone(), boxes, how='slice') != x).any(1)).all()
    torch.manual_seed(0)
    for mode in ('const', 'rand', 'pixel'):
        for dt in (torch.float32, torch.float16):
            y = RandomErasing(1., mode=mode)(x.cuda().to(dt))
            assert y.dtype == dt and y.is_cuda and (y.cpu().float() != x.to(dt).float()).any()


@pytest.mark.cuda
def test_mixup_cuda_matches_cpu(batch):
    x, y, _ = batch
    for mode in MODES:
        for cfg in CONFIGS:
            np.random.seed(0); a, ta = Mixup(mode=mode, num_classes=100, **cfg)(x.clone(), y)
            np.random.seed(0); b, tb = Mixup(mode=mode, num_classes=100, **cfg)(x.cuda(), y.cuda())
            assert torch.allclose(a, b.cpu(), atol=1e-5) and torch.allclose(ta, tb.cpu(), atol=1e-5)


def test_mask_and_slice_paste_agree(batch):
    x, _, u = batch
    rng = np.random.RandomState(0)
    lam = rng.rand(64).astype(np.float32)
    cut = rng.rand(64) < 0.5
    (yl, yh, xl, xh), _ = cutmix_bbox_and_lam(x.shape, lam, rng=rng)
    boxes = np.stack([yl, yh, xl, xh], -1)
    xu = torch.stack([a for a, _ in u])
    for xb in (x, xu):
        a = _mix_rows_(xb.clone(), xb.flip(0), lam, cut, boxes, masks=True, chunk=64)
        b = _mix_rows_(xb.clone(), xb.flip(0), lam, cut, boxes, masks=False, chunk=4)
        assert torch.equal(a, b)
        for masks in (True, False):
            assert torch.equal(_mix_rows_(xb.clone(), None, lam, cut, boxes, masks=masks), a)
