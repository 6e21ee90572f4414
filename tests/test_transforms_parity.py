"""Parity of timmdata's transforms with the installed timm: eval pixels, train crop boxes and flips, data config.

PIL input must give timm's pixels exactly. uint8 tensor input goes through torchvision's antialiased uint8 resize
instead of PIL's, which may differ by rounding: max abs diff <= 2 and mean abs diff <= 0.5 per pixel; the eval
pipeline's default fused resize + centre crop (timmdata.pixels.resample) gives PIL's pixels exactly, from tensors and JPEGs.
"""
import functools, random
import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import functional as TF

timm_data = pytest.importorskip('timm.data')
from timm.data import create_transform as timm_create_transform, resolve_data_config as timm_resolve_data_config
from timm.data import transforms as timm_tf

from timmdata.tools.sample_data import make_sample_image
from timmdata.config import resolve_data_config
from timmdata.transforms import (RandomResizedCropAndInterpolation, ResizeKeepRatio, RandomCropOrPad,
                                 MaybePILToTensor)
from timmdata.transforms_factory import create_transform

MAX_DIFF, MEAN_DIFF = 2, 0.5


@functools.cache
def _images():
    "Drawn when a test first asks (not at collection: every test process collects this module). Landscape, portrait, square, smaller than the crop, 4000 px wide, grayscale and RGBA (converted to RGB as the dataset does)."
    gray = make_sample_image(2, seed=3, size=(300, 400)).convert('L')
    rgba = make_sample_image(4, seed=4, size=(350, 260)).convert('RGBA')
    rgba.putalpha(128)
    return {'landscape': make_sample_image(0, size=(426, 320)), 'portrait': make_sample_image(1, size=(320, 426)),
            'square': make_sample_image(5, size=(300, 300)), 'small': make_sample_image(6, size=(150, 100)),
            'wide4000': make_sample_image(7, size=(4000, 1000)), 'gray': gray.convert('RGB'), 'rgba': rgba.convert('RGB')}

to_tensor = MaybePILToTensor()  # CHW view over HWC memory: the layout decode_jpeg gives


def _arr(x):
    return (x if isinstance(x, torch.Tensor) else TF.pil_to_tensor(x)).numpy()


def _check_close(a, b, what):
    d = np.abs(_arr(a).astype(np.int32) - _arr(b).astype(np.int32))
    assert d.max() <= MAX_DIFF and d.mean() <= MEAN_DIFF, f'{what}: max diff {d.max()}, mean diff {d.mean():.3f}'


@pytest.mark.parametrize('input_size', [224, (3, 256, 192)])
@pytest.mark.parametrize('interpolation', ['bilinear', 'bicubic'])
@pytest.mark.parametrize('crop_pct', [0.875, 0.95, 1.0])
@pytest.mark.parametrize('crop_mode', ['center', 'squash', 'border'])
def test_eval_pipeline(crop_mode, crop_pct, interpolation, input_size):
    kw = dict(input_size=input_size, crop_mode=crop_mode, crop_pct=crop_pct, interpolation=interpolation, use_prefetcher=True)
    ours, theirs = create_transform(**kw), timm_create_transform(**kw)
    # Resize(shorter edge) + centre crop run fused from the undecoded JPEG (PIL's pixels); the other modes take tensors
    fused = crop_mode == 'center' and input_size == 224
    assert ours.input_format == ('encoded' if fused else 'tensor')
    for name, img in _images().items():
        ref = theirs(img)
        np.testing.assert_array_equal(_arr(ours(img)), _arr(ref), err_msg=f'PIL path, {name}')
        _check_close(ours(to_tensor(img)), ref, f'tensor path, {name}')
        if fused:  # the fused step computes PIL's pixels from a tensor too
            np.testing.assert_array_equal(_arr(ours(to_tensor(img))), _arr(ref), err_msg=f'fused tensor path, {name}')


@pytest.mark.parametrize('normalize', [True, False])
def test_eval_normalized(normalize):
    kw = dict(input_size=224, crop_pct=0.9, interpolation='bicubic', normalize=normalize)
    img = _images()['landscape']
    a, b = create_transform(**kw)(img), timm_create_transform(**kw)(img)
    assert a.dtype == b.dtype and torch.equal(a, b)


def test_eval_crop_border_pixels():
    kw = dict(input_size=224, crop_border_pixels=7, use_prefetcher=True)
    for img in _images().values():
        assert torch.equal(create_transform(**kw)(img), timm_create_transform(**kw)(img))


def test_noaug_train():
    kw = dict(input_size=(3, 192, 224), is_training=True, no_aug=True, interpolation='bicubic', use_prefetcher=True)
    for name, img in _images().items():
        ref = timm_create_transform(**kw)(img)
        assert torch.equal(create_transform(**kw)(img), ref), name
        _check_close(create_transform(**kw)(to_tensor(img)), ref, name)


@pytest.mark.parametrize('scale,ratio', [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.9, 1.0), (0.2, 0.3)), ((0.5, 1.0), (2.0, 5.0))])
def test_rrc_boxes(scale, ratio):
    "Same seed, same boxes (including the fallback), for every test image."
    for img in _images().values():
        ten = to_tensor(img)  # once per image: get_params reads its size only (a conversion per seed was most of the time)
        for seed in range(200):
            random.seed(seed)
            theirs = timm_tf.RandomResizedCropAndInterpolation.get_params(img, scale, ratio)
            random.seed(seed)
            assert RandomResizedCropAndInterpolation.get_params(img, scale, ratio) == theirs
            random.seed(seed)
            assert RandomResizedCropAndInterpolation.get_params(ten, scale, ratio) == theirs


def test_rkr_params():
    for img in _images().values():
        for seed in range(100):
            random.seed(seed)
            a = timm_tf.ResizeKeepRatio.get_params(img, (224, 224), 0., 0.5, (0.8, 1.0), True, 0.5, (0.9, 1 / 0.9))
            b = timm_tf.RandomCropOrPad.get_params(img, (224, 224))
            random.seed(seed)
            assert ResizeKeepRatio.get_params(img, (224, 224), 0., 0.5, (0.8, 1.0), True, 0.5, (0.9, 1 / 0.9)) == a
            assert RandomCropOrPad.get_params(img, (224, 224)) == b


@pytest.mark.parametrize('train_crop_mode', ['rrc', 'rkrc', 'rkrr'])
@pytest.mark.parametrize('interpolation', ['random', 'bicubic'])
def test_train_pipeline(train_crop_mode, interpolation):
    "Same seeds -> same crops, interpolations, flips and jitter: PIL output identical, tensor output close."
    kw = dict(input_size=224, is_training=True, train_crop_mode=train_crop_mode, interpolation=interpolation,
              hflip=0.5, vflip=0.2, color_jitter=0.4, use_prefetcher=True)
    ours, theirs = create_transform(**kw), timm_create_transform(**kw)
    ours_nojit = create_transform(**{**kw, 'color_jitter': 0})
    theirs_nojit = timm_create_transform(**{**kw, 'color_jitter': None})
    assert ours.input_format == ('encoded' if train_crop_mode == 'rrc' else 'tensor')  # a first crop takes undecoded JPEGs
    for name, img in _images().items():
        if name == 'wide4000': continue  # the big one only in the eval tests, to keep this fast
        for seed in range(6):
            random.seed(seed); torch.manual_seed(seed)
            ref = theirs(img)
            random.seed(seed); torch.manual_seed(seed)
            assert torch.equal(ours(img), ref), (name, seed)
            random.seed(seed); torch.manual_seed(seed)
            ref = theirs_nojit(img)
            random.seed(seed); torch.manual_seed(seed)
            _check_close(ours_nojit(to_tensor(img)), ref, f'{name} seed {seed}')


def test_flip_decisions_over_a_stream():
    "Without reseeding per image: the flips over a stream of images follow timm's (jitter on, as timm draws it)."
    kw = dict(input_size=64, is_training=True, use_prefetcher=True)
    ours, theirs = create_transform(**kw), timm_create_transform(**kw)
    img = _images()['landscape']
    random.seed(0); torch.manual_seed(0)
    a = [ours(img) for _ in range(30)]
    random.seed(0); torch.manual_seed(0)
    b = [theirs(img) for _ in range(30)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


class _TinyModel:
    pretrained_cfg = dict(input_size=(3, 256, 256), test_input_size=(3, 320, 320), interpolation='bilinear',
                          mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), crop_pct=0.95, test_crop_pct=1.0, crop_mode='squash')


@pytest.mark.parametrize('args,cfg,model,test_size', [
    (None, None, _TinyModel(), False), (None, None, _TinyModel(), True), ({}, dict(input_size=(3, 160, 160)), _TinyModel(), False),
    (dict(img_size=192, crop_pct=0.8), None, _TinyModel(), True), (dict(input_size=(1, 128, 96), mean=(0.3,), std=(0.2,)), None, None, False),
    (dict(interpolation='bicubic', crop_mode='border', in_chans=3), dict(crop_pct=0.9), None, False),
    (dict(mean=None, std=None, input_size=None, crop_pct=None), None, _TinyModel(), False)])
def test_resolve_data_config(args, cfg, model, test_size):
    ours = resolve_data_config(args, pretrained_cfg=cfg, model=model, use_test_size=test_size)
    theirs = timm_resolve_data_config(args, pretrained_cfg=cfg, model=model, use_test_size=test_size)
    assert ours == theirs


@pytest.mark.parametrize('interpolation', ['bilinear', 'bicubic'])
def test_eval_from_jpeg_files(tmp_path, interpolation):
    """The eval dataset's default path (the fused resize + centre crop from the undecoded JPEG, only the window's rows and
    columns decoded): timm's pixels exactly (max abs difference 0; the bound of the tensor path is 2), landscape and
    portrait, including a portrait more than 2:1 tall (Pillow 13 resizes it vertically first)."""
    from timmdata.dataset import ImageDataset
    sizes = {'landscape': (500, 375), 'portrait': (375, 500), 'tall': (300, 700), 'wide': (700, 300), 'sample': (426, 320)}
    (tmp_path / 'c0').mkdir()
    for i, (name, size) in enumerate(sizes.items()):
        make_sample_image(i, size=size).save(tmp_path / 'c0' / f'{name}.jpg', quality=90)
    kw = dict(input_size=224, interpolation=interpolation, crop_pct=0.875, use_prefetcher=True)
    ours = ImageDataset(str(tmp_path), transform=create_transform(**kw))
    theirs = timm_data.ImageDataset(str(tmp_path), transform=timm_create_transform(**kw))
    assert ours.transform.input_format == 'encoded'  # the fused step takes the undecoded JPEG
    assert len(ours) == len(theirs) == len(sizes)
    worst = {}
    for i in range(len(ours)):
        assert ours.filename(i) == theirs.filename(i)
        (a, ta), (b, tb) = ours[i], theirs[i]
        assert ta == tb and a.shape == b.shape == (3, 224, 224)
        worst[ours.filename(i)] = int(np.abs(_arr(a).astype(np.int32) - _arr(b).astype(np.int32)).max())
    assert worst == {f'c0/{n}.jpg': 0 for n in sizes}, worst


@pytest.mark.parametrize('interpolation', ['bilinear', 'bicubic', 'random'])
def test_train_from_jpeg_files(tmp_path, interpolation):
    """The training dataset's default path (the random crop decoded, resized and flipped in one native call from the
    undecoded JPEG): with the same seeds, timm's pixels exactly (max abs difference 0), for the same crops, filters and
    flips, landscape, portrait and a portrait more than 2:1 tall."""
    from timmdata.dataset import ImageDataset
    sizes = {'landscape': (500, 375), 'portrait': (375, 500), 'tall': (300, 700), 'sample': (426, 320)}
    (tmp_path / 'c0').mkdir()
    for i, (name, size) in enumerate(sizes.items()):
        make_sample_image(i, size=size).save(tmp_path / 'c0' / f'{name}.jpg', quality=90)
    kw = dict(input_size=224, is_training=True, interpolation=interpolation, hflip=0.5, use_prefetcher=True)
    ours = ImageDataset(str(tmp_path), transform=create_transform(**kw, color_jitter=0))
    theirs = timm_data.ImageDataset(str(tmp_path), transform=timm_create_transform(**kw, color_jitter=None))
    assert ours.transform.input_format == 'encoded'  # the fused step takes the undecoded JPEG
    assert len(ours) == len(theirs) == len(sizes)
    n = 0
    for i in range(len(ours)):
        for seed in range(8):
            random.seed(seed); torch.manual_seed(seed)
            a, ta = ours[i]
            random.seed(seed); torch.manual_seed(seed)
            b, tb = theirs[i]
            assert ta == tb and a.shape == b.shape == (3, 224, 224)
            assert np.array_equal(_arr(a), _arr(b)), (ours.filename(i), seed)
            n += 1
    assert n == 8 * len(sizes)


@pytest.mark.parametrize('kind', ['pil', 'tensor'])
def test_train_pipeline_with_handed_draws(kind):
    "The training pipeline with the sample's own draws (`Draws(k)`) gives what it gives after `seed_all(k)` (timm's"
    " way), which for PIL input is timm's own output; the global generators are left alone."
    from timmdata.config import Draws, seed_all
    from timmdata.transforms import takes_draws
    cfg = dict(is_training=True, auto_augment='rand-m9-mstd0.5-inc1', re_prob=0)
    ours, theirs = create_transform(224, **cfg), timm_create_transform(224, **cfg)
    assert takes_draws(ours)
    img = _images()['landscape']
    x = img if kind == 'pil' else to_tensor(img)
    for k in range(20):
        seed_all(k)
        want = ours(x)
        if kind == 'pil':
            seed_all(k)
            assert torch.equal(want, theirs(img)), f'key {k}: seeded pipeline differs from timm'
        seed_all(10_000 + k)
        before = random.getstate(), torch.get_rng_state(), np.random.get_state()[1].copy()
        got = ours(x, Draws(k))
        assert random.getstate() == before[0] and torch.equal(torch.get_rng_state(), before[1])
        assert (np.random.get_state()[1] == before[2]).all(), f'key {k}: numpy global generator moved'
        assert torch.equal(got, want), f'key {k}: handed draws give a different tensor than seed_all({k})'


# np.asarray(PIL image) is read-only: torch says so (once a process) as to_tensor wraps it, though the float tensor made is a copy
@pytest.mark.filterwarnings('ignore:The given NumPy array is not writable:UserWarning')
@pytest.mark.parametrize('kind', ['pil', 'gray_pil', 'ndarray', 'uint8', 'float', 'uint8_hwc_view'])
def test_maybe_to_tensor_is_timms(kind):
    "MaybeToTensor alone is timm's: PIL images and arrays to float in [0, 1]; any tensor (uint8 too) back unchanged."
    from timmdata.transforms import MaybeToTensor
    img = _images()['portrait']
    x = {'pil': img, 'gray_pil': img.convert('L'), 'ndarray': np.asarray(img), 'uint8': TF.pil_to_tensor(img),
         'float': TF.to_tensor(img), 'uint8_hwc_view': to_tensor(img)}[kind]
    ours, theirs = MaybeToTensor()(x), timm_tf.MaybeToTensor()(x)
    assert type(ours) is type(theirs) and ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert torch.equal(ours, theirs)
    if isinstance(x, torch.Tensor):
        assert ours is x and theirs is x  # passed through, not copied
    assert repr(MaybeToTensor()) == repr(timm_tf.MaybeToTensor())


@pytest.mark.parametrize('normalize', [True, False])
def test_pipeline_on_uint8_tensor_gives_timms_floats(normalize):
    "timmdata's tensor path: a uint8 tensor through create_transform (normalising: its MaybeToTensor step) gives what"
    " timm's pipeline gives for the PIL image; a dataset hands MaybeToTensor alone a PIL image."
    from timmdata.transforms import MaybeToTensor, transform_input
    img = _images()['square']
    kw = dict(input_size=224, crop_pct=1.0, normalize=normalize)  # 300 px resized to 224: the fused path, PIL's pixels
    ours, want = create_transform(**kw)(to_tensor(img)), timm_create_transform(**kw)(img)
    assert ours.dtype == want.dtype == (torch.float32 if normalize else torch.uint8) and ours.shape == want.shape
    torch.testing.assert_close(ours, want, atol=1e-6, rtol=0)
    assert transform_input(MaybeToTensor()) == 'pil'


def test_dataset_with_maybe_to_tensor_alone_is_timms(sample_root):
    "A dataset whose transform is MaybeToTensor alone gives timm's floats (it is handed the PIL image timm's is)."
    from timm.data import ImageDataset as TimmImageDataset
    from timmdata.dataset import ImageDataset
    from timmdata.transforms import MaybeToTensor
    root = str(sample_root / 'val')
    ours, theirs = ImageDataset(root, transform=MaybeToTensor()), TimmImageDataset(root, transform=timm_tf.MaybeToTensor())
    assert len(ours) == len(theirs) == 30
    for i in (0, 13, 29):
        (a, ta), (b, tb) = ours[i], theirs[i]
        assert ta == tb and a.dtype == b.dtype == torch.float32 and torch.equal(a, b)
