"""timm's train.py / validate.py (timm 1.0.31) with timmdata's loaders: our own short driver making the calls the
scripts make into timm.data, with the same keywords (see the issue 13 notes: the keyword lists below follow the
scripts' `common_loader_kwargs` / `train_loader_kwargs` / `eval_loader_kwargs` and validate.py's calls), on CPU.

The datasets come from timm's `create_dataset` as in the scripts: timmdata has no create_dataset, so its loaders
must take timm's `ImageDataset`."""
import inspect

import pytest
import torch

import timm.data as timm_data
from timm.data.scheduled_sampler import ScheduledBatchSampler as TimmScheduledBatchSampler

from timmdata import create_loader, resolve_data_config, Mixup, FastCollateMixup, AugMixDataset
from timmdata.transforms import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

NUM_CLASSES = 10  # the sample tree's classes
MEAN = torch.tensor(IMAGENET_DEFAULT_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(IMAGENET_DEFAULT_STD).view(1, 3, 1, 1)
CPU = torch.device('cpu')


def _dataset(root, split, is_training):
    "What train.py / validate.py build (timm's create_dataset, the ImageFolder reader)."
    return timm_data.create_dataset('', root=str(root), split=split, is_training=is_training, class_map='',
                                    download=False, batch_size=8, seed=42, input_img_mode='RGB', input_key=None,
                                    target_key=None, num_samples=None, trust_remote_code=False)


def _common(use_prefetcher=True, distributed=False):
    "train.py's common_loader_kwargs (mean/std from data_config, --pin-mem off, float32 model, one process)."
    return dict(mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, pin_memory=False, img_dtype=torch.float32,
                device=CPU, distributed=distributed, use_prefetcher=use_prefetcher)


def _train(batch_size=8, num_workers=0, **over):
    "train.py's train_loader_kwargs at the argparse defaults (note grayscale/gaussian-blur prob None, remode 'pixel')."
    kw = dict(batch_size=batch_size, is_training=True, no_aug=False, re_prob=0., re_mode='pixel', re_count=1,
              re_split=False, train_crop_mode=None, scale=[0.08, 1.0], ratio=[3. / 4., 4. / 3.], hflip=0.5, vflip=0.,
              color_jitter=0.4, color_jitter_prob=None, grayscale_prob=None, gaussian_blur_prob=None, auto_augment=None,
              num_aug_repeats=0, num_aug_splits=0, interpolation='random', num_workers=num_workers, worker_seeding='all')
    kw.update(over)
    return kw


def _mixup_args(**over):
    "train.py's mixup_args for --mixup 0.8 --cutmix 1.0 (other flags at their defaults)."
    kw = dict(mixup_alpha=0.8, cutmix_alpha=1.0, cutmix_minmax=None, prob=1.0, switch_prob=0.5, mode='batch',
              label_smoothing=0.1, num_classes=NUM_CLASSES)
    kw.update(over)
    return kw


def _scheduled(**over):
    "The 1.0.31 scheduled-batching keywords at their defaults (train.py passes them always)."
    kw = dict(input_size_choices=None, batch_size_choices=None, batch_choice_weights=None, batch_choice_seed=42,
              batch_choice_schedule='constant', batch_schedule_epochs=None, batch_schedule_spread=0.65,
              batch_schedule_random_mix=0.1, num_batches=None)
    kw.update(over)
    return kw


# ---------------------------------------------------------------- signatures

@pytest.mark.parametrize('name, ours', [
    ('create_loader', 'timmdata.loader.create_loader'),
    ('create_naflex_loader', 'timmdata.naflex_loader.create_naflex_loader'),
    ('Mixup', 'timmdata.mixup.Mixup'),
    ('FastCollateMixup', 'timmdata.mixup.FastCollateMixup'),
    ('NaFlexMixup', 'timmdata.naflex_mixup.NaFlexMixup'),
    ('AugMixDataset', 'timmdata.dataset.AugMixDataset'),
    ('resolve_data_config', 'timmdata.config.resolve_data_config'),
])
def test_signatures_cover_timm(name, ours):
    "Every parameter of timm's function is one of ours, with the same kind (keyword-only stays keyword-only)."
    import importlib
    mod, attr = ours.rsplit('.', 1)
    ours = inspect.signature(getattr(importlib.import_module(mod), attr)).parameters
    theirs = inspect.signature(getattr(timm_data, name)).parameters
    missing = [p for p in theirs if p not in ours]
    assert not missing, f'{name}: timmdata lacks {missing}'
    for p, tp in theirs.items():
        if tp.kind == tp.KEYWORD_ONLY: assert ours[p].kind == tp.KEYWORD_ONLY, (name, p)
        if tp.kind == tp.POSITIONAL_OR_KEYWORD and ours[p].kind == tp.POSITIONAL_OR_KEYWORD:
            assert list(ours).index(p) == list(theirs).index(p), f'{name}: {p} moved (positional callers break)'


# ---------------------------------------------------------------- (a) scheduled batching, train.py's create_loader call

def test_scheduled_defaults_are_a_plain_train_loader(sample_root):
    "train.py always passes the scheduled keywords; with input_size_choices=None they change nothing."
    ds = _dataset(sample_root, 'train', True)
    loader = create_loader(ds, input_size=(3, 32, 32), collate_fn=None, use_multi_epochs_loader=False,
                           **_common(), **_train(batch_size=8), **_scheduled())
    assert len(loader) == len(ds) // 8
    shapes = {tuple(x.shape) for x, _ in loader}
    assert shapes == {(8, 3, 32, 32)}


def test_device_decode_takes_train_py_defaults(sample_root):
    """train.py's whole train call with decode_device added (the one argument a user adds): options train.py leaves off
    arrive as None (--grayscale-prob, --gaussian-blur-prob, --color-jitter-prob) and mean off, not refused."""
    from timmdata.pixels import decode
    if decode.torchcodec_jpeg() is None: pytest.skip('the device decode path needs torchcodec')
    ds = _dataset(sample_root, 'train', True)
    loader = create_loader(ds, input_size=(3, 32, 32), collate_fn=None, use_multi_epochs_loader=False,
                           decode_device='cpu', **_common(), **_train(batch_size=8), **_scheduled())
    batches = [(x.shape, x.dtype, y.shape) for x, y in loader]
    assert len(batches) == len(ds) // 8 > 0
    assert set(batches) == {((8, 3, 32, 32), torch.float32, (8,))}
    with pytest.raises(ValueError, match='grayscale_prob=0.2 is not supported on the device decode path'):
        create_loader(ds, input_size=(3, 32, 32), decode_device='cpu', **_common(), **_train(grayscale_prob=0.2))


@pytest.mark.parametrize('schedule, num_batches, num_workers', [
    ('progressive', 5, 0), ('progressive', 5, 2), ('constant', None, 0)])
def test_scheduled_train_loader_matches_timm_schedule(sample_root, schedule, num_batches, num_workers):
    sizes, batch_sizes, weights, seed = (32, 48, 64), (12, 8, 4), (1., 2., 1.), 3
    ds = _dataset(sample_root, 'train', True)
    loader = create_loader(
        ds, input_size=(3, 64, 64), collate_fn=None, use_multi_epochs_loader=False,
        **_common(), **_train(batch_size=8, num_workers=num_workers),
        **_scheduled(input_size_choices=sizes, batch_size_choices=batch_sizes, batch_choice_weights=weights,
                     batch_choice_seed=seed, batch_choice_schedule=schedule,
                     batch_schedule_epochs=2 if schedule == 'progressive' else None,
                     batch_schedule_spread=0.65, batch_schedule_random_mix=0.1, num_batches=num_batches))
    ref = TimmScheduledBatchSampler(torch.utils.data.SequentialSampler(range(len(ds))), batch_sizes=batch_sizes,
                                    choice_weights=weights, seed=seed, drop_last=True, num_batches=num_batches,
                                    choice_schedule=schedule, schedule_epochs=2 if schedule == 'progressive' else None,
                                    schedule_spread=0.65, schedule_random_mix=0.1)
    assert len(loader) == len(ref)
    seen = []
    for epoch in range(2):  # train.py: set the epoch on the loader's batch sampler before each epoch
        loader.batch_sampler.set_epoch(epoch)
        ref.set_epoch(epoch)
        want = [(batch_sizes[b[0][1]], sizes[b[0][1]]) for b in ref]
        got = []
        for x, y in loader:
            assert x.dtype == torch.float32 and x.device.type == 'cpu'
            assert x.shape[1] == 3 and x.shape[2] == x.shape[3] and y.shape == (x.shape[0],)
            assert (x.shape[0], x.shape[-1]) in set(zip(batch_sizes, sizes, strict=True))
            assert y.min() >= 0 and y.max() < NUM_CLASSES
            got.append((x.shape[0], x.shape[-1]))
        assert got == want, f'epoch {epoch}: timmdata {got} vs timm {want}'
        seen.append(got)
    if schedule == 'progressive':  # the progressive window moved: the last epoch is not smaller than the first
        assert sum(s for _, s in seen[1]) >= sum(s for _, s in seen[0])


def test_scheduled_with_fast_collate_mixup(sample_root):
    "Scheduled sizes with the prefetcher and FastCollateMixup as collate_fn (train.py's mixup branch)."
    ds = _dataset(sample_root, 'train', True)
    loader = create_loader(ds, input_size=(3, 48, 48), collate_fn=FastCollateMixup(**_mixup_args()),
                           use_multi_epochs_loader=False, **_common(), **_train(batch_size=8),
                           **_scheduled(input_size_choices=(32, 48), batch_size_choices=(12, 8), num_batches=4,
                                        batch_choice_schedule='progressive', batch_schedule_epochs=2))
    loader.batch_sampler.set_epoch(0)
    n = 0
    for x, y in loader:
        assert (x.shape[0], x.shape[-1]) in {(12, 32), (8, 48)}
        assert y.shape == (x.shape[0], NUM_CLASSES) and y.dtype == torch.float32
        torch.testing.assert_close(y.sum(1), torch.ones(x.shape[0]))
        n += 1
    assert n == 4


# ---------------------------------------------------------------- (b) mixup / cutmix

def _is_mixed(y, smoothing=0.1):
    "Rows that are not a smoothed one-hot (mixup/cutmix moved weight to a second class)."
    off = smoothing / NUM_CLASSES
    return (y.max(1).values < 1 - smoothing + off - 1e-4)


def test_fast_collate_mixup_with_prefetcher_and_mixup_off(sample_root):
    ds = _dataset(sample_root, 'train', True)
    loader = create_loader(ds, input_size=(3, 32, 32), collate_fn=FastCollateMixup(**_mixup_args()),
                           use_multi_epochs_loader=False, **_common(use_prefetcher=True), **_train(batch_size=8),
                           **_scheduled())
    assert loader.mixup_enabled
    mixed = 0
    for x, y in loader:
        assert x.shape == (8, 3, 32, 32) and x.dtype == torch.float32
        assert y.shape == (8, NUM_CLASSES) and y.dtype == torch.float32
        torch.testing.assert_close(y.sum(1), torch.ones(8))
        assert y.min() >= 0.1 / NUM_CLASSES - 1e-6  # label smoothing's floor
        mixed += int(_is_mixed(y).any())
    assert mixed >= 1
    loader.mixup_enabled = False  # what train.py does at --mixup-off-epoch with the prefetcher
    for x, y in loader:
        assert not _is_mixed(y).any()
        torch.testing.assert_close(y.max(1).values, torch.full((8,), 0.91))


def test_mixup_without_prefetcher(sample_root):
    ds = _dataset(sample_root, 'train', True)
    loader = create_loader(ds, input_size=(3, 32, 32), collate_fn=None, use_multi_epochs_loader=False,
                           **_common(use_prefetcher=False), **_train(batch_size=8), **_scheduled())
    mixup_fn = Mixup(**_mixup_args())
    mixed = 0
    for x, y in loader:  # train_one_epoch without the prefetcher
        assert x.dtype == torch.float32 and x.shape == (8, 3, 32, 32)
        assert x.min() < 0  # already normalised by the sample transform
        x, y = x.to(device=CPU, dtype=torch.float32), y.to(device=CPU)
        x, t = mixup_fn(x, y)
        assert x.shape == (8, 3, 32, 32) and t.shape == (8, NUM_CLASSES)
        torch.testing.assert_close(t.sum(1), torch.ones(8))
        mixed += int(_is_mixed(t).any())
    assert mixed >= 1
    mixup_fn.mixup_enabled = False  # --mixup-off-epoch without the prefetcher
    x, y = next(iter(loader))
    x2, t = mixup_fn(x.clone(), y)
    assert torch.equal(x2, x) and not _is_mixed(t).any()


# ---------------------------------------------------------------- (c) AugMix splits

def test_augmix_splits(sample_root):
    "--aug-splits 3 --aa augmix-m3-w2 --jsd-loss: AugMixDataset + num_aug_splits, batch = 3 stacked splits."
    ds = AugMixDataset(_dataset(sample_root, 'train', True), num_splits=3)
    loader = create_loader(ds, input_size=(3, 32, 32), collate_fn=None, use_multi_epochs_loader=False,
                           **_common(), **_train(batch_size=4, num_aug_splits=3, auto_augment='augmix-m3-w2',
                                                 re_prob=0.25, re_split=False),
                           **_scheduled())
    assert len(loader) == len(ds) // 4
    for i, (x, y) in enumerate(loader):
        assert x.shape == (12, 3, 32, 32) and y.shape == (12,)
        assert torch.equal(y[:4], y[4:8]) and torch.equal(y[:4], y[8:])
        assert not torch.equal(x[:4], x[4:8]) and not torch.equal(x[4:8], x[8:])  # the augmented views differ
        if i == 2: break
    # JsdCrossEntropy (what train.py uses with --jsd-loss) takes the batch as it comes
    from timm.loss import JsdCrossEntropy
    loss = JsdCrossEntropy(num_splits=3, smoothing=0.1)(torch.randn(12, NUM_CLASSES), y)
    assert torch.isfinite(loss)


# ---------------------------------------------------------------- (d) NaFlex

PATCH = (16, 16)


def _check_naflex_batch(inp, seq_lens, channels_last=True):
    assert isinstance(inp, dict) and {'patches', 'patch_coord', 'patch_valid', 'seq_len'} <= set(inp)
    p, c, v = inp['patches'], inp['patch_coord'], inp['patch_valid']
    B, L = v.shape
    assert L in seq_lens and inp['seq_len'] == L
    assert p.shape == (B, L, PATCH[0] * PATCH[1] * 3) and p.dtype == torch.float32 and p.device.type == 'cpu'
    assert c.shape == (B, L, 2) and c.dtype == torch.int64
    assert v.dtype == torch.bool and v.any(1).all()
    n = v.sum(1)
    for b in range(B):  # valid patches first, padding after; coords inside the grid, each position once
        assert v[b, :n[b]].all() and not v[b, n[b]:].any()
        cb = c[b, :n[b]]
        assert cb.min() >= 0 and len({tuple(t) for t in cb.tolist()}) == n[b]
    return B, L


def test_naflex_train_loader_with_naflex_mixup(sample_root):
    from timmdata.naflex_loader import create_naflex_loader
    from timmdata.naflex_mixup import NaFlexMixup
    args = _mixup_args()
    args.pop('mode'), args.pop('cutmix_minmax')  # train.py: not supported by NaFlexMixup
    mixup_fn = NaFlexMixup(**args, mixup_off_epoch=1)
    seq_lens = (16, 32)
    loader = create_naflex_loader(dataset=_dataset(sample_root, 'train', True), train_seq_lens=seq_lens,
                                  mixup_fn=mixup_fn, rank=0, world_size=1, patch_size=PATCH,
                                  patchify_channels_last=True, **_common(), **_train(batch_size=8))
    theirs = timm_data.create_naflex_loader(
        dataset=_dataset(sample_root, 'train', True), train_seq_lens=seq_lens, mixup_fn=timm_data.NaFlexMixup(
            **args, mixup_off_epoch=1), rank=0, world_size=1, patch_size=PATCH, **_common(), **_train(batch_size=8))
    n_batches = len(loader)
    assert n_batches == len(theirs) > 0
    for epoch in range(2):  # train.py: the NaFlex wrapper's epoch; mixup switches off at epoch 1
        loader.dataset.set_epoch(epoch)
        theirs.dataset.set_epoch(epoch)
        shapes, mixed = [], 0
        for inp, tgt in loader:
            B, L = _check_naflex_batch(inp, seq_lens)
            assert tgt.shape == (B, NUM_CLASSES) and tgt.dtype == torch.float32
            torch.testing.assert_close(tgt.sum(1), torch.ones(B))
            mixed += int(_is_mixed(tgt).any())
            shapes.append((B, L))
        assert len(shapes) == n_batches
        assert (mixed > 0) == (epoch == 0), (epoch, mixed)
        # the per-epoch (batch size, sequence length) schedule is timm's for the same seed
        assert shapes == [tuple(i['patch_valid'].shape) for i, _ in theirs], epoch


@pytest.mark.parametrize('use_prefetcher', [True, False])
def test_naflex_eval_loader_matches_timm(sample_root, use_prefetcher):
    "train.py's eval call (validate.py's is the same with patch_size=model_patch_size or (16, 16))."
    from timmdata.naflex_loader import create_naflex_loader
    kw = dict(patch_size=PATCH, max_seq_len=32, **_common(use_prefetcher), batch_size=8, is_training=False,
              interpolation='bicubic', num_workers=0, crop_pct=0.9)
    ours = create_naflex_loader(dataset=_dataset(sample_root, 'val', False), patchify_channels_last=True, **kw)
    theirs = timm_data.create_naflex_loader(dataset=_dataset(sample_root, 'val', False), **kw)
    n = 0
    for (inp, y), (tinp, ty) in zip(ours, theirs, strict=True):
        B, L = _check_naflex_batch(inp, (32,))
        assert torch.equal(y, ty) and y.dtype == torch.int64
        assert torch.equal(inp['patch_valid'], tinp['patch_valid'])
        assert torch.equal(inp['patch_coord'][inp['patch_valid']], tinp['patch_coord'][tinp['patch_valid']])
        d = (inp['patches'] - tinp['patches'])[inp['patch_valid']].abs()
        assert d.mean() < 0.05, d.mean()  # normalised units; ~1 grey level on average
        n += B
    assert n == 30 and len(ours) == len(theirs)


# ---------------------------------------------------------------- (e) validate.py's eval loader

class _TinyModel(torch.nn.Module):
    "Stands for the model: validate.py only reads its pretrained_cfg through resolve_data_config."
    pretrained_cfg = dict(input_size=(3, 48, 48), test_input_size=(3, 64, 64), interpolation='bicubic',
                          mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, crop_pct=0.875, crop_mode='center')


def _validate_args(**over):
    "The validate.py args resolve_data_config reads (vars(args)), at their defaults."
    kw = dict(img_size=None, in_chans=None, input_size=None, crop_pct=None, crop_mode=None, mean=None, std=None,
              interpolation='', model='tiny', num_classes=NUM_CLASSES)
    kw.update(over)
    return kw


@pytest.mark.parametrize('over', [{}, dict(img_size=56, crop_pct=1.0, interpolation='bilinear')])
def test_validate_data_config_and_loader_match_timm(sample_root, over):
    args = _validate_args(**over)
    cfg = resolve_data_config(args, model=_TinyModel(), use_test_size=True, verbose=False)
    tcfg = timm_data.resolve_data_config(dict(args), model=_TinyModel(), use_test_size=True, verbose=False)
    assert {k: cfg[k] for k in tcfg} == tcfg
    kw = dict(input_size=cfg['input_size'], batch_size=8, use_prefetcher=True, interpolation=cfg['interpolation'],
              mean=cfg['mean'], std=cfg['std'], num_workers=0, crop_pct=cfg['crop_pct'], crop_mode=cfg['crop_mode'],
              crop_border_pixels=None, pin_memory=False, img_dtype=torch.float32, device=CPU, tf_preprocessing=False)
    ours = create_loader(_dataset(sample_root, 'val', False), **kw)
    theirs = timm_data.create_loader(_dataset(sample_root, 'val', False), **kw)
    assert len(ours) == len(theirs) == 4
    n = 0
    for (x, y), (tx, ty) in zip(ours, theirs, strict=True):
        assert x.shape == tx.shape == (len(y), *cfg['input_size']) and x.dtype == tx.dtype
        assert torch.equal(y, ty)
        d = ((x - tx) * STD * 255).abs()
        assert d.max() <= 2 + 1e-3 and d.mean() <= 0.5, (d.max(), d.mean())
        n += len(y)
    assert n == 30


# ---------------------------------------------------------------- (f) issue 25: every train.py / validate.py mode through
# timmdata's create_dataset with the scripts' argparse defaults (class_map='', repeats=0., ...), one case per mode

import timmdata
from timmdata import create_dataset, write_shards


def _train_py_dataset(root, split, is_training, name='', class_map='', **over):
    "train.py's create_dataset call (train: seed and repeats too), at its argparse defaults."
    kw = dict(root=str(root), split=split, is_training=is_training, class_map=class_map, download=False, batch_size=8,
              input_img_mode='RGB', input_key=None, target_key=None, num_samples=None, trust_remote_code=False)
    if is_training: kw.update(seed=42, repeats=0.)
    kw.update(over)
    return create_dataset(name, **kw)


def _validate_py_dataset(root, name='', split='validation', class_map=''):
    "validate.py's create_dataset call at its argparse defaults."
    return create_dataset(root=str(root), name=name, split=split, download=False, load_bytes=False, class_map=class_map,
                          num_samples=None, input_key=None, input_img_mode='RGB', target_key=None,
                          trust_remote_code=False, seed=42)


def _set_loader_epoch(loader, epoch):
    "What train.py does before each epoch (its _set_loader_epoch)."
    if hasattr(loader.dataset, 'set_epoch'): loader.dataset.set_epoch(epoch)
    if hasattr(loader.batch_sampler, 'set_epoch'): loader.batch_sampler.set_epoch(epoch)
    elif hasattr(loader.sampler, 'set_epoch'): loader.sampler.set_epoch(epoch)


def _train_loader(ds, collate_fn=None, use_multi_epochs_loader=False, use_prefetcher=True, scheduled=None, **over):
    return create_loader(ds, input_size=(3, 32, 32), collate_fn=collate_fn, use_multi_epochs_loader=use_multi_epochs_loader,
                         **_common(use_prefetcher=use_prefetcher), **_train(**over), **_scheduled(**(scheduled or {})))


def _eval_loader(ds, **over):
    kw = dict(input_size=(3, 32, 32), batch_size=8, is_training=False, interpolation='bicubic', num_workers=0, crop_pct=0.875)
    kw.update(over)
    return create_loader(ds, **_common(), **kw)


def test_mode_defaults_with_argparse_empty_strings(sample_root):
    "train.py's defaults: class_map='' is 'no class map'; the eval split 'validation' finds val/."
    train, val = _train_py_dataset(sample_root, 'train', True), _train_py_dataset(sample_root, 'validation', False)
    ttrain = timm_data.create_dataset('', root=str(sample_root), split='train', is_training=True, class_map='')
    assert len(train) == len(ttrain) == 60 and len(val) == 30 and train.class_to_idx == ttrain.reader.class_to_idx
    loader = _train_loader(train)
    _set_loader_epoch(loader, 0)
    assert sum(len(y) for _, y in loader) == 56  # drop_last
    assert sum(len(y) for _, y in _eval_loader(val)) == 30


def test_mode_mixup_cutmix_randaugment_erasing(sample_root):
    loader = _train_loader(_train_py_dataset(sample_root, 'train', True), collate_fn=FastCollateMixup(**_mixup_args()),
                           auto_augment='rand-m9-mstd0.5-inc1', re_prob=0.25, re_mode='pixel')
    assert loader.mixup_enabled
    for x, y in loader:
        assert x.shape == (8, 3, 32, 32) and y.shape == (8, NUM_CLASSES)
        torch.testing.assert_close(y.sum(1), torch.ones(8))
    loader.mixup_enabled = False  # train.py's --mixup-off-epoch
    assert not loader.mixup_enabled


def test_mode_aug_splits_jsd(sample_root):
    ds = AugMixDataset(_train_py_dataset(sample_root, 'train', True), num_splits=3)
    loader = _train_loader(ds, num_aug_splits=3, auto_augment='augmix-m3-w1', re_prob=0.25, re_split=True)
    x, y = next(iter(loader))
    assert x.shape == (24, 3, 32, 32) and y.shape == (24,) and torch.equal(y[:8], y[8:16]) and torch.equal(y[:8], y[16:])


def test_mode_no_prefetcher(sample_root):
    mix = Mixup(**_mixup_args())
    loader = _train_loader(_train_py_dataset(sample_root, 'train', True), use_prefetcher=False, re_prob=0.25)
    x, y = next(iter(loader))
    assert x.dtype == torch.float32 and y.dtype == torch.int64 and x.shape == (8, 3, 32, 32)
    xm, ym = mix(x, y)
    assert ym.shape == (8, NUM_CLASSES)


def test_mode_multi_epochs_loader(sample_root):
    loader = _train_loader(_train_py_dataset(sample_root, 'train', True), use_multi_epochs_loader=True, num_workers=1)
    for epoch in range(2):
        _set_loader_epoch(loader, epoch)
        assert sum(1 for _ in loader) == len(loader) == 7


def test_mode_scheduled_batching_attributes(sample_root):
    "What train.py reads of loader_train.batch_sampler: average_batch_size, batch_sizes, len."
    sizes, bss = (24, 32), (12, 8)
    loader = _train_loader(_train_py_dataset(sample_root, 'train', True),
                           scheduled=dict(input_size_choices=sizes, batch_size_choices=bss, batch_choice_seed=0,
                                          batch_choice_schedule='progressive', batch_schedule_epochs=1))
    s = loader.batch_sampler
    ref = TimmScheduledBatchSampler(torch.utils.data.SequentialSampler(range(60)), batch_sizes=bss, seed=0, drop_last=True,
                                    choice_schedule='progressive', schedule_epochs=1, schedule_spread=0.65, schedule_random_mix=0.1)
    assert s.average_batch_size == pytest.approx(ref.average_batch_size) and s.batch_sizes == ref.batch_sizes
    assert len(s) == len(ref) == len(loader)
    _set_loader_epoch(loader, 0)
    assert sum(1 for _ in loader) == len(loader)


def test_mode_wds_shards_with_empty_class_map(sample_root, tmp_path):
    "--dataset wds/... on shards written by `timmdata shards`, with train.py's class_map=''."
    write_shards(str(sample_root), str(tmp_path), shard_size=16)
    train = _train_py_dataset(tmp_path, 'train', True, name='wds/sample')
    val = _train_py_dataset(tmp_path, 'val', False, name='wds/sample')
    loader = _train_loader(train)
    _set_loader_epoch(loader, 0)
    assert sum(len(y) for _, y in loader) == 64  # a training stream is whole batches, wrapping round (timm's ReaderWds too)
    ys = torch.cat([y for _, y in _eval_loader(val)])
    assert len(ys) == 30 and sorted(ys.tolist()) == sorted(t for _, t in _validate_py_dataset(sample_root, split='val').reader)


def test_mode_resume_start_epoch(sample_root):
    "--resume: the loader is rebuilt and train.py sets the resumed epoch before iterating."
    loader = _train_loader(_train_py_dataset(sample_root, 'train', True))
    _set_loader_epoch(loader, 3)
    assert sum(len(y) for _, y in loader) == 56


def test_mode_class_map_file(sample_root, tmp_path):
    cm = tmp_path / 'classes.txt'
    names = sorted(p.name for p in (sample_root / 'train').iterdir())[:5][::-1]
    cm.write_text('\n'.join(names) + '\n')
    ours = _train_py_dataset(sample_root, 'train', True, class_map=str(cm))
    theirs = timm_data.create_dataset('', root=str(sample_root), split='train', is_training=True, class_map=str(cm))
    assert len(ours) == len(theirs) == 30 and ours.class_to_idx == theirs.reader.class_to_idx
    assert [t for _, t in ours.reader] == [t for _, t in theirs.reader.samples]


def test_mode_validate_py_filenames_and_loader(sample_root):
    "validate.py: its create_dataset call, the eval loader, and dataset.filenames(basename=True) (for --real-labels)."
    ours, theirs = _validate_py_dataset(sample_root, split='val'), timm_data.create_dataset('', root=str(sample_root), split='val', class_map='')
    assert ours.filenames(basename=True) == theirs.filenames(basename=True)
    assert sum(len(y) for _, y in _eval_loader(ours)) == 30


def _torchrun_rank(rank, world, root, port, out):
    import os
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.distributed.init_process_group('gloo', rank=rank, world_size=world)
    try:
        val = _train_py_dataset(root, 'validation', False)
        loader = create_loader(val, input_size=(3, 32, 32), batch_size=4, is_training=False, interpolation='bicubic',
                               num_workers=0, crop_pct=0.875, **_common(distributed=True))
        n = sum(len(y) for _, y in loader)
        torch.save(dict(indices=list(loader.sampler), n=n), os.path.join(out, f'{rank}.pt'))
    finally: torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_mode_torchrun_two_ranks(sample_root, tmp_path):
    "--nproc_per_node 2 (gloo, CPU): train.py's eval loader with distributed=True; the ranks' samples are the whole split."
    from _helpers import free_port
    port = free_port()
    torch.multiprocessing.spawn(_torchrun_rank, args=(2, str(sample_root), port, str(tmp_path)), nprocs=2)
    r = [torch.load(tmp_path / f'{i}.pt') for i in range(2)]
    assert r[0]['n'] == len(r[0]['indices']) and r[1]['n'] == len(r[1]['indices'])
    assert sorted(r[0]['indices'] + r[1]['indices']) == list(range(30))  # OrderedDistributedSampler: no padding, no overlap
