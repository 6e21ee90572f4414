"""Issue 5 end to end: create_loader's random erasing, AugMix splits and a FastCollateMixup collate_fn,
with and without the prefetcher (CPU)."""
import pytest, torch
from timmdata import ImageDataset, AugMixDataset, create_loader, FastCollateMixup, Mixup

SIZE = (3, 64, 64)

def erased_fraction(x):
    "Per image, the fraction of pixels erased with the 'const' mode (zero in every channel of a normalised image)."
    return (x == 0).all(1).float().mean((1, 2))

@pytest.mark.parametrize('use_prefetcher', [True, False])
def test_random_erasing_end_to_end(sample_root, use_prefetcher):
    ds = ImageDataset(sample_root)
    on = create_loader(ds, SIZE, 8, is_training=True, re_prob=1.0, re_mode='const', re_count=1, num_workers=0,
                       use_prefetcher=use_prefetcher)
    x, y = next(iter(on))
    assert x.dtype == torch.float32 and x.shape == (8, *SIZE)
    frac = erased_fraction(x)
    # every image erased: at least timm's min_area (2%) of the pixels, at most max_area (1/3) plus rounding
    assert (frac >= 0.015).all() and (frac <= 0.36).all(), frac
    off = create_loader(ds, SIZE, 8, is_training=True, re_prob=0.0, num_workers=0, use_prefetcher=use_prefetcher)
    assert erased_fraction(next(iter(off))[0]).max() < 0.01

def test_random_erasing_modes_and_count_with_workers(sample_root):
    "re_mode and re_count reach the eraser, and with re_prob=1 every image comes out different from every clean image."
    ds = ImageDataset(sample_root)
    # deterministic per-sample pipeline (whole-image crop, no flip, no jitter): only erasing changes pixels
    kw = dict(is_training=True, num_workers=2, hflip=0., color_jitter=None, scale=(1., 1.), ratio=(1., 1.))
    clean = torch.cat([x for x, _ in create_loader(ds, SIZE, 8, re_prob=0.0, **kw)])
    assert len(clean) == len(ds) // 8 * 8
    # images are compared pixel for pixel: a sum can match another image's by chance (it did, once in ~300 runs)
    assert len({img.numpy().tobytes() for img in clean}) == len(clean), 'the sample images must all differ'
    for mode in ('rand', 'pixel'):
        ld = create_loader(ds, SIZE, 8, re_prob=1.0, re_mode=mode, re_count=3, **kw)
        assert ld.random_erasing.mode == mode and ld.random_erasing.max_count == 3
        n = 0
        for x, y in ld:
            assert torch.isfinite(x).all() and x.shape[1:] == SIZE
            same = (x[:, None] == clean[None]).flatten(2).all(-1)  # (batch, clean): image equals a clean image
            assert not same.any(), f'{mode}: an image was not erased'
            n += len(x)
        assert n == len(ds) // 8 * 8  # training drops the last partial batch, as timm

@pytest.mark.parametrize('use_prefetcher', [True, False])
def test_augmix_splits_end_to_end(sample_root, use_prefetcher):
    ds = AugMixDataset(ImageDataset(sample_root), num_splits=2)
    ld = create_loader(ds, SIZE, 8, is_training=True, num_aug_splits=2, auto_augment='augmix-m5-w4-d2',
                       re_prob=1.0, re_split=True, num_workers=0, use_prefetcher=use_prefetcher)
    x, y = next(iter(ld))
    if use_prefetcher:  # fast_collate stacks the splits: split 0 is rows 0..7, split 1 rows 8..15
        assert x.shape == (16, *SIZE) and y.shape == (16,)
        assert torch.equal(y[:8], y[8:])
        assert erased_fraction(x[:8]).max() < 0.01, 'the clean split must not be erased'
        assert (erased_fraction(x[8:]) > 0.015).all(), 'the augmented split must be erased'
    else:  # torch's default collate keeps the tuple of splits
        assert isinstance(x, (list, tuple)) and len(x) == 2 and all(t.shape == (8, *SIZE) for t in x)

def test_fast_collate_mixup_with_prefetcher(sample_root):
    ds = ImageDataset(sample_root)
    mix = FastCollateMixup(mixup_alpha=1.0, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=10)
    ld = create_loader(ds, SIZE, 8, is_training=True, collate_fn=mix, num_workers=2)
    assert ld.mixup_enabled
    batches = list(ld)
    assert len(batches) == len(ds) // 8
    for x, y in batches:
        assert x.dtype == torch.float32 and x.shape == (8, *SIZE)
        assert y.shape == (8, 10) and torch.allclose(y.sum(1), torch.ones(8), atol=1e-5)
        assert y.min() >= 0.1 / 10 - 1e-6  # label smoothing: no class below smoothing / num_classes
    # mixed: unmixed rows peak at 1 - 0.1 + 0.1 / 10 = 0.91; a mixed row of two labels peaks at 0.01 + 0.9 * max(lam, 1 - lam).
    # Each batch draws one lam (mode 'batch'), so all 7 batches staying above 0.86 (lam > 0.94) is a ~1e-9 chance
    assert min(y.max(1).values.min().item() for _, y in batches) < 0.91 - 0.05, 'no batch was mixed'
    ld.mixup_enabled = False
    assert not mix.mixup_enabled
    x, y = next(iter(ld))
    assert torch.allclose(y.max(1).values, torch.full((8,), 1 - 0.1 + 0.1 / 10))  # unmixed: one-hot, smoothed

def test_mixup_without_prefetcher(sample_root):
    "Without the prefetcher a mixing collate_fn is refused with the fix; Mixup on the float batch works instead."
    ds = ImageDataset(sample_root)
    with pytest.raises(ValueError, match='needs use_prefetcher=True'):
        create_loader(ds, SIZE, 8, is_training=True, collate_fn=FastCollateMixup(num_classes=10), use_prefetcher=False)
    ld = create_loader(ds, SIZE, 8, is_training=True, num_workers=0, use_prefetcher=False)
    x, y = next(iter(ld))
    xm, ym = Mixup(mixup_alpha=1.0, num_classes=10)(x, y)
    assert xm.shape == x.shape and ym.shape == (8, 10) and torch.allclose(ym.sum(1), torch.ones(8))


@pytest.mark.parametrize('recipe', [dict(auto_augment='rand-m9-mstd0.5-inc1', re_prob=0.25),
                                    dict(auto_augment='augmix-m5-w4-d2'),
                                    dict(auto_augment='3a', color_jitter=0.3)])
def test_recipe_same_batches_in_every_worker_mode(sample_root, recipe):
    "A policy on the fast path (the crop from the undecoded JPEG, then the policy on it) draws only the sample's own"
    " generators: the main process, worker processes and loader threads give the same batches, and so does a second run."
    from timmdata.pixels import decode
    ds = ImageDataset(sample_root)
    runs = []
    for mode, workers in (('process', 0), ('process', 2), ('thread', 2), ('process', 2)):
        ld = create_loader(ds, (3, 96, 96), 8, is_training=True, num_workers=workers, worker_mode=mode, seed=7,
                           use_prefetcher=False, **recipe)
        if decode.NATIVE.module is not None:
            assert ld.dataset.transform.input_format == 'encoded'
        runs.append(torch.cat([x for x, _ in ld]))
    assert runs[0].shape[0] == len(ds) // 8 * 8
    for r in runs[1:]:
        assert torch.equal(r, runs[0])


@pytest.mark.parametrize('recipe', [dict(auto_augment='rand-m9-mstd0.5-inc1', re_prob=0.25, interpolation='random'),
                                    dict(auto_augment='3a', color_jitter=0.3)])
def test_policy_in_the_batch_gives_the_per_sample_batches(sample_root, recipe, monkeypatch):
    "With the prefetcher, a policy runs on each crop's row of the batch after the batch's one decode (`Compose.deferred`):"
    " in every worker mode the batches are the ones the per-sample path gives (the crop, then the policy, image by image)."
    from timmdata.pixels import decode, handover
    from timmdata.transforms import Compose
    if decode.NATIVE.module is None:
        pytest.skip('the batch decode needs the C extension')
    ds = ImageDataset(sample_root)
    posts = []
    real_finish = handover.finish_row
    monkeypatch.setattr(handover, 'finish_row', lambda *a, **k: (posts.append(1), real_finish(*a, **k))[1])

    def batches(workers, mode='process'):
        ld = create_loader(ds, (3, 96, 96), 8, is_training=True, num_workers=workers, worker_mode=mode, seed=7,
                           device='cpu', **recipe)
        return torch.cat([x for x, _ in ld])

    runs = [batches(0), batches(2), batches(2, 'thread')]
    assert len(posts) >= len(ds) // 8 * 8  # the main process's run and the threads' ran the policy in the batch
    monkeypatch.setattr(Compose, '_defer_policy', lambda self, img, rng: None)
    n = len(posts)
    per_sample = batches(0)
    assert len(posts) == n  # this one did not
    assert per_sample.shape == (len(ds) // 8 * 8, 3, 96, 96)
    for r in runs:
        assert r.shape == per_sample.shape and torch.equal(r, per_sample)
