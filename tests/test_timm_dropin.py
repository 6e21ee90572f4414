"""timmdata as a drop-in for timm.data (issue 40): what `create_loader` returns carries timm's attributes with timm's
meaning (`dataset`, `batch_sampler`, `batch_size`, `sampler`, `drop_last`) in both worker modes and after a resume;
datasets without a `transform` attribute are accepted as timm accepts them; a NaFlex image with more patches than
the sequence holds is scaled down to fit; scheduled batching refuses MultiEpochsDataLoader as timm does; errors carry
timm's words. timm's own tests run against timmdata with tools/run_timm_data_tests.py."""
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, SequentialSampler, TensorDataset

from timmdata import (NaFlexMapDatasetWrapper, ScheduledBatchSampler, ScheduledTransformDataset, create_loader,
                      create_naflex_loader)
from timmdata.config import Draws
from timmdata.engine.resume import ResumableBatchSampler
from timmdata.mixup import FastCollateMixup, Mixup


class Shades(Dataset):
    "n small images, sample i a flat grey of value i (its target), with a settable transform as timm's datasets have."

    def __init__(self, n=16, size=20):
        self.n, self.size, self.transform = n, size, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        img = Image.new('RGB', (self.size, self.size), color=(i, i, i))
        return (self.transform(img) if self.transform is not None else img), i


def _loader(ds, **kw):
    args = dict(input_size=(3, 16, 16), batch_size=4, is_training=True, no_aug=True, use_prefetcher=False,
                num_workers=2, seed=7, device='cpu')
    args.update(kw)
    return create_loader(ds, **args)


def _targets(loader):
    return [y.tolist() for _, y in loader]


@pytest.mark.parametrize('worker_mode', ['process', 'thread'])
@pytest.mark.parametrize('use_prefetcher', [False, True])
def test_loader_attributes_are_timms(worker_mode, use_prefetcher):
    ds = Shades()
    if worker_mode == 'thread':  # a dataset not timmdata's may draw from the global generators: refused by name
        with pytest.raises(ValueError, match="worker_mode='thread' reads timmdata datasets"):
            _targets(_loader(ds, worker_mode=worker_mode, use_prefetcher=use_prefetcher))
        return
    loader = _loader(ds, worker_mode=worker_mode, use_prefetcher=use_prefetcher)
    assert loader.dataset is ds and ds.transform is not None  # not a wrapper: the dataset passed in, its transform set
    assert loader.batch_size == 4 and (loader.loader if use_prefetcher else loader).num_workers == 2
    assert len(loader) == 4 and len(loader.batch_sampler) == 4
    assert loader.sampler is loader.batch_sampler.sampler and len(loader.sampler) == 16
    if not use_prefetcher:
        assert loader.drop_last is True
    epochs = []
    for epoch in range(2):  # train.py's _set_loader_epoch, as timm's train.py calls it
        if hasattr(loader.dataset, 'set_epoch'):
            loader.dataset.set_epoch(epoch)
        loader.batch_sampler.set_epoch(epoch)
        epochs.append(_targets(loader))
        assert sorted(sum(epochs[-1], [])) == list(range(16))
    assert epochs[0] != epochs[1]  # the epoch reached the order

    ev = _loader(Shades(10), is_training=False, worker_mode=worker_mode, use_prefetcher=use_prefetcher)
    assert ev.batch_size == 4 and len(ev) == 3 and list(ev.sampler) == list(range(10))
    assert sum(_targets(ev), []) == list(range(10))


@pytest.mark.parametrize('worker_mode', ['process'])  # thread workers refuse a dataset not timmdata's (above)
def test_loader_attributes_hold_through_resume(worker_mode):
    ref = _targets(_loader(Shades(), worker_mode=worker_mode))
    first = _loader(Shades(), worker_mode=worker_mode)
    it = iter(first)
    head = [next(it)[1].tolist()]
    sd = first.state_dict()
    ds = Shades()
    again = _loader(ds, worker_mode=worker_mode)
    again.load_state_dict(sd)
    assert again.dataset is ds and again.batch_size == 4 and isinstance(again.batch_sampler, ResumableBatchSampler)
    assert head + _targets(again) == ref


def test_multi_epochs_loader_attributes():
    ds = Shades()
    loader = _loader(ds, use_multi_epochs_loader=True)
    assert loader.dataset is ds and loader.batch_size == 4 and len(loader) == 4
    assert sorted(sum(_targets(loader), [])) == list(range(16))


def test_scheduled_loader_shows_timms_sampler_and_dataset():
    ds = Shades(24)
    kw = dict(input_size_choices=(8, 12), batch_choice_schedule='progressive', batch_schedule_epochs=2,
              batch_schedule_spread=0, batch_schedule_random_mix=0, num_workers=0)
    loader = _loader(ds, **kw)
    assert isinstance(loader.batch_sampler, ScheduledBatchSampler)
    assert isinstance(loader.dataset, ScheduledTransformDataset) and loader.dataset.dataset is ds
    b = loader.batch_sampler  # what timm's train.py reads of it
    assert b.batch_sizes == (4, 4) and b.average_batch_size == 4 and len(b) == len(loader) == 6
    assert loader.batch_size is None  # batches of several sizes, as timm's scheduled loader has
    sizes = []
    for epoch in range(2):
        loader.batch_sampler.set_epoch(epoch)  # the sampler timm's tests move: the loader's plan follows it
        sizes.append({x.shape[-1] for x, _ in loader})
    assert sizes == [{8}, {12}]

    # resumed mid-epoch: the same attributes, the uninterrupted run's batches
    ref = [y.tolist() for _, y in _loader(Shades(24), **kw)]
    cut = _loader(Shades(24), **kw)
    it = iter(cut)
    head = [next(it)[1].tolist()]
    sd = cut.state_dict()
    again = _loader(Shades(24), **kw)
    again.load_state_dict(sd)
    assert isinstance(again.batch_sampler, ScheduledBatchSampler) and isinstance(again.dataset, ScheduledTransformDataset)
    assert head + [y.tolist() for _, y in again] == ref


def test_scheduled_batching_refuses_multi_epochs_loader():
    with pytest.raises(ValueError, match='MultiEpochsDataLoader is not supported with scheduled input sizes'):
        _loader(Shades(), input_size_choices=(8, 16), use_multi_epochs_loader=True)


@pytest.mark.parametrize('bad', [0, (16, 0), (3, 16, 0)])
def test_scheduled_dimensions_error_has_timms_words(bad):
    with pytest.raises(ValueError, match=r'input_size_choices\[0\] = .*dimensions must be positive'):
        _loader(Shades(), input_size_choices=(bad, 16), num_workers=0)


@pytest.mark.parametrize('kw', [{}, dict(choice_schedule='progressive', schedule_epochs=3)])
def test_no_full_scheduled_batch_has_timms_words(kw):
    with pytest.raises(ValueError, match='No full scheduled batch fits the sampler: 3 samples'):
        ScheduledBatchSampler(SequentialSampler(range(3)), batch_sizes=(8, 4), **kw)


def test_tensor_dataset_without_transform_through_create_loader():
    data, labels = torch.arange(6 * 3 * 4 * 4, dtype=torch.float32).reshape(6, 3, 4, 4), torch.arange(6)
    ds = TensorDataset(data, labels)
    with pytest.warns(UserWarning, match='TensorDataset has no `transform` attribute'):
        loader = create_loader(ds, input_size=(3, 4, 4), batch_size=2, num_workers=0, use_prefetcher=False,
                               persistent_workers=True)
    assert callable(ds.transform)  # set, as timm sets it
    assert loader.num_workers == 0 and not loader.persistent_workers
    x, y = next(iter(loader))
    torch.testing.assert_close(x, data[:2])  # the dataset's own samples (it does not apply the transform)
    assert y.tolist() == [0, 1]


@pytest.mark.parametrize('is_training', [False, True])
def test_tensor_dataset_without_transform_through_create_naflex_loader(is_training):
    ds = TensorDataset(torch.full((4, 3, 8, 8), 0.5), torch.arange(4))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        loader = create_naflex_loader(ds, patch_size=1, train_seq_lens=(4,), max_seq_len=4, batch_size=2,
                                      is_training=is_training, no_aug=True, num_workers=0, persistent_workers=True,
                                      use_prefetcher=False)
    assert hasattr(ds, 'transform') and loader.num_workers == 0 and not loader.persistent_workers
    batches = list(loader)
    assert sorted(sum((y.tolist() for _, y in batches), [])) == list(range(4))
    for d, _ in batches:  # 8x8 images, 64 patches: scaled down to the 4 the sequence holds
        assert d['patches'].shape[1] == 4 and bool(d['patch_valid'].all())
        p = d['patches']  # a flat image stays flat: every patch the same (training normalises each channel)
        torch.testing.assert_close(p, p[:, :1].expand_as(p))
        if not is_training:
            torch.testing.assert_close(p, torch.full_like(p, 0.5))


class Tiny(Dataset):
    "2x2 float images, sample i all of value i."

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return torch.full((3, 2, 2), float(i)), i


def test_naflex_image_larger_than_max_seq_len_is_scaled_down_in_persistent_workers():
    ds = NaFlexMapDatasetWrapper(Tiny(), patch_size=1, seq_lens=(1,), max_tokens_per_batch=4, seed=17,
                                 batch_divisor=1)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    try:
        epochs = []
        for epoch in range(2):
            ds.set_epoch(epoch)
            got = []
            for d, y in loader:
                assert d['patches'].shape[1] == 1 and bool(d['patch_valid'].all())  # a 2x2 image in one patch
                torch.testing.assert_close(d['patches'][:, 0, 0], y.float())  # the image, scaled: its value kept
                got += y.tolist()
            assert sorted(got) == list(range(12))
            epochs.append(got)
        assert epochs[0] != epochs[1]  # the persistent workers read the new epoch
    finally:
        if loader._iterator is not None:
            loader._iterator._shutdown_workers()


def test_hf_imagefolder_of_the_users_own_folder_reads_its_paths(tmp_path):
    "`hfds/<folder>` over the user's own images (Hugging Face's imagefolder gives path-only values): paths inside the folder are read, as timm reads them; a path outside it is still refused (a downloaded dataset's paths could name any file)."
    datasets = pytest.importorskip('datasets')
    from PIL import Image
    from timmdata import create_dataset

    root = tmp_path / 'Photos'
    for name in ('cat', 'dog'):
        (root / 'train' / name).mkdir(parents=True)
        Image.new('RGB', (4, 4)).save(root / 'train' / name / '0.png')
    ds = create_dataset(f'hfds/{root}', root=str(tmp_path / 'cache'), split='train')
    assert len(ds) == 2 and sorted(t for _, t in ds) == [0, 1]
    outside = tmp_path / 'secret.png'
    Image.new('RGB', (4, 4)).save(outside)
    from timmdata.sources.hf_readers import image_bytes

    inside_value = {'bytes': None, 'path': str(root / 'train' / 'cat' / '0.png')}
    assert image_bytes(inside_value, 'x', root=str(root)) == (root / 'train' / 'cat' / '0.png').read_bytes()
    with pytest.raises(ValueError, match='only the path'):
        image_bytes({'bytes': None, 'path': str(outside)}, 'x', root=str(root))
    with pytest.raises(ValueError, match='only the path'):
        image_bytes(inside_value, 'x')  # no folder named: a downloaded dataset's path


class _HalfAndHalf:
    "timm-style overrides (timm's signatures, no generator): lam 0.25 everywhere, CutMix when `cutmix`."
    cutmix = False

    def _params_per_batch(self):
        return 0.25, self.cutmix

    def _params_per_elem(self, n):
        lam, cut = super()._params_per_elem(n)  # the base method still answers timm's call (and draws from rng)
        return np.full(n, 0.25, dtype=np.float32), np.full(n, self.cutmix)


@pytest.mark.parametrize('fast', [False, True])
@pytest.mark.parametrize('mode', ['batch', 'pair', 'elem'])
@pytest.mark.parametrize('cutmix', [False, True])
def test_mixup_subclass_with_timms_signatures(monkeypatch, fast, mode, cutmix):
    "A subclass of Mixup / FastCollateMixup overriding _params_per_batch() / _params_per_elem(n) as timm's code does."
    import timmdata.mixup as mixup_module

    base = FastCollateMixup if fast else Mixup
    cls = type('Sub', (_HalfAndHalf, base), dict(cutmix=cutmix))
    mix = cls(num_classes=3, multi_label=True, label_smoothing=0.0, mode=mode)
    monkeypatch.setattr(mixup_module, 'cutmix_bbox_and_lam', lambda *a, **kw: ((0, 2, 0, 2), 0.75))
    images = torch.stack([torch.zeros(3, 4, 4), torch.full((3, 4, 4), 200.0)])
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    x, t = mix(list(zip(images.byte(), targets))) if fast else mix(images.clone(), targets.clone())
    lam = 0.75 if cutmix else 0.25
    torch.testing.assert_close(t, targets * lam + targets.flip(0) * (1 - lam))
    if cutmix:  # the 2x2 box of row 0 comes from row 1
        assert x[0, :, :2, :2].float().eq(200).all() and x[0, :, 2:, 2:].float().eq(0).all()
    else:
        torch.testing.assert_close(x[0].float(), torch.full((3, 4, 4), 150.0), atol=1, rtol=0)


@pytest.mark.parametrize('mode', ['batch', 'pair', 'elem'])
def test_mixup_subclass_without_overrides_keeps_explicit_draws(mode):
    "A subclass that overrides nothing draws from the generator it is handed, as Mixup does: same batches, same targets."
    Sub = type('Sub', (Mixup,), {})
    x = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    y = torch.arange(8)
    kw = dict(mixup_alpha=1.0, cutmix_alpha=1.0, prob=0.7, mode=mode, num_classes=8)
    a = Mixup(**kw)(x.clone(), y, rng=Draws(12345))
    b = Sub(**kw)(x.clone(), y, rng=Draws(12345))
    torch.testing.assert_close(a, b)


class _HalfAndHalfCollate(_HalfAndHalf, FastCollateMixup):  # top level: forkserver and spawn pickle it by name
    pass


def test_mixup_subclass_as_the_loaders_collate_in_workers():
    "A timm-style FastCollateMixup subclass as create_loader's collate_fn, in DataLoader workers (a copy per worker)."
    loader = _loader(Shades(8), use_prefetcher=True, collate_fn=_HalfAndHalfCollate(num_classes=8, label_smoothing=0.0, mode='batch'),
                     mean=(0, 0, 0), std=(1, 1, 1))
    for x, t in loader:
        n = len(t)
        assert t.shape == (n, 8)
        torch.testing.assert_close(t.sum(1), torch.ones(n))
        assert ((t == 0.25) | (t == 0.75) | (t == 0.0)).all()  # lam 0.25 from the override, never a drawn one
