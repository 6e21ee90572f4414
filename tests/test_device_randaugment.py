"""timm's RandAugment and AugMix on the device-decode path, through its CPU run (`decode_device='cpu'`): each sample's draws are
the CPU transform's (the same seed, the same ops, magnitudes, signs and filters), and a training loader's batches
are the CPU loader's within the device resize's rounding. The ops' pixels against the CPU path, per op, are tested
in nbs/pixels/14b_batch_augment.ipynb (bound: 0 levels), AugMix's chains and mix there too."""
from pathlib import Path

import pytest
import torch
from PIL import Image

from timmdata.pixels import decode
from timmdata.config import Draws
from timmdata.dataset import ImageDataset
from timmdata.loader import create_loader
from timmdata.pixels.batch_augment import encode_augmix, encode_draws
from timmdata.pixels.decode import encoded_jpeg
from timmdata.transforms_factory import create_transform
from timmdata.auto_augment import AugMixAugment, RandAugment

gd = pytest.importorskip('timmdata.engine.gpu_decode')
if decode.torchcodec_jpeg() is None: pytest.skip('torchcodec is not installed', allow_module_level=True)
from timmdata.engine.gpu_decode import DeviceDecodeTransform, device_rand_augment, create_device_decode_loader

AA = 'rand-m9-mstd0.5-inc1'


@pytest.mark.parametrize('config,interpolation', [(AA, 'random'), ('rand-m7-n3-p0.8-mstd1', 'bicubic'), ('rand-m9-tweights', 'bilinear')])
def test_device_draws_are_the_cpu_transforms(sample_root, config, interpolation):
    "Per sample, with the same seed: the device transform's RandAugment table is the CPU train transform's draws, encoded."
    ds = ImageDataset(sample_root, split='train')
    cpu = create_transform(96, is_training=True, auto_augment=config, interpolation=interpolation, use_prefetcher=True)
    ra = next(t for t in cpu.transforms if isinstance(t, RandAugment))
    seen = []
    draw = ra.draw
    ra.draw = lambda rng: seen.append(draw(rng)) or seen[-1]  # records what the CPU path applies
    mean = (0.485, 0.456, 0.406)
    dev = DeviceDecodeTransform(96, is_training=True, interpolation=interpolation,
                                rand_augment=device_rand_augment(config, (96, 96), mean, interpolation))
    applied = 0
    for k in range(0, len(ds), 3):
        path = ds.reader[k][0]
        with Image.open(path) as im:
            cpu(im.convert('RGB'), Draws(k))
        out = dev(encoded_jpeg(Path(path).read_bytes()), Draws(k))
        want = encode_draws([d for _, d in seen[-1]])
        assert list(out[3]) == want, (k, out[3], want)
        applied += sum(d is not None for _, d in seen[-1])
    assert applied > 10  # ops were drawn and applied, not only skipped



@pytest.mark.parametrize('config,interpolation', [('augmix-m3-w3', 'random'), ('augmix-m5-w4-d2-b1', 'bicubic')])
def test_device_augmix_draws_are_the_cpu_transforms(sample_root, config, interpolation):
    "AugMix's draws as RandAugment's: per sample, with the same seed, the device transform's two tables encode the CPU train transform's draws."
    ds = ImageDataset(sample_root, split='train')
    cpu = create_transform(96, is_training=True, auto_augment=config, interpolation=interpolation, use_prefetcher=True)
    am = next(t for t in cpu.transforms if isinstance(t, AugMixAugment))
    seen = []
    draw = am.draw
    am.draw = lambda rng: seen.append(draw(rng)) or seen[-1]  # records what the CPU path applies
    dev_am = device_rand_augment(config, (96, 96), (0.485, 0.456, 0.406), interpolation)
    assert isinstance(dev_am, AugMixAugment) and (dev_am.width, dev_am.depth, dev_am.blended) == (am.width, am.depth, am.blended)
    dev = DeviceDecodeTransform(96, is_training=True, interpolation=interpolation, rand_augment=dev_am)
    ops = 0
    for k in range(0, len(ds), 3):
        path = ds.reader[k][0]
        with Image.open(path) as im:
            cpu(im.convert('RGB'), Draws(k))
        out = dev(encoded_jpeg(Path(path).read_bytes()), Draws(k))
        assert len(out) == 5 and [list(out[3]), list(out[4])] == list(encode_augmix(dev_am, seen[-1])), k
        ops += sum(len(c) for c in seen[-1][2])
    assert ops > 3 * len(seen)  # at least a chain's op per chain, over the samples seen

def _loaders(root, aa=AA, **kw):
    kw = dict(is_training=True, auto_augment=aa, num_workers=0, interpolation='random', mean=(0, 0, 0), std=(1, 1, 1), **kw)
    return (create_loader(ImageDataset(root, split='train'), 96, 10, decode_device='cpu', **kw),
            create_loader(ImageDataset(root, split='train'), 96, 10, **kw))


def test_device_loader_randaugment_is_the_cpu_loaders(sample_root):
    """create_loader(decode_device='cpu', auto_augment='rand-...'): the batches of the CPU loader with the same seed, each
    image within a quarter of a level on average (the device resize's rounding, at most one level, carried through the
    ops); with another seed, tens of levels apart (the test would see draws that differ)."""
    dl, cl = _loaders(sample_root, seed=0)
    n = 0
    for (x, y), (xr, yr) in zip(dl, cl, strict=True):
        assert torch.equal(y, yr) and x.shape == xr.shape
        per_image = ((x - xr).abs() * 255).mean((1, 2, 3))
        assert per_image.max() < 0.25, per_image
        n += len(x)
    assert n == len(ImageDataset(sample_root, split='train'))
    # which resize and warp ran, and why (on a CUDA device with Triton: 'kernel')
    decode = dl.stats().info['decode']
    assert decode['resize'] == 'matmul: not a CUDA device' and decode['warp'] == 'torch: not a CUDA device', decode
    other, _ = _loaders(sample_root, seed=1)
    (x, _), (xr, _) = next(iter(other)), next(iter(cl))
    assert ((x - xr).abs() * 255).mean((1, 2, 3)).min() > 5



@pytest.mark.parametrize('config', ['augmix-m3-w3', 'augmix-m5-w2-d2-b1'])
def test_device_loader_augmix_is_the_cpu_loaders(sample_root, config):
    """create_loader(decode_device='cpu', auto_augment='augmix-...'): the CPU loader's batches with the same seed, within
    the device resize's rounding (AugMix mixes its chains, so a level's rounding stays about a level); another seed
    is far off."""
    dl, cl = _loaders(sample_root, config, seed=0)
    n = 0
    for (x, y), (xr, yr) in zip(dl, cl, strict=True):
        assert torch.equal(y, yr) and x.shape == xr.shape
        per_image = ((x - xr).abs() * 255).mean((1, 2, 3))
        assert per_image.max() < 0.25, per_image
        n += len(x)
    assert n == len(ImageDataset(sample_root, split='train'))
    assert dl.stats().info['decode']['warp'] == 'torch: not a CUDA device'  # the chains' geometric ops: which warp, and why
    other, _ = _loaders(sample_root, config, seed=1)
    (x, _), (xr, _) = next(iter(other)), next(iter(cl))
    assert ((x - xr).abs() * 255).mean((1, 2, 3)).min() > 2

def test_one_switch_turns_both_kernels_off_for_one_loader(sample_root, monkeypatch):
    "`step.kernels = False`: the resize in matrix products and RandAugment's warps in torch's operations, said so."
    import timmdata.pixels.batch_augment as ba
    asked, warp = [], ba.warp_batch
    monkeypatch.setattr(ba, 'warp_batch', lambda *a, kernel=None, **k: asked.append(kernel) or warp(*a, kernel=kernel, **k))
    dl = create_device_decode_loader(ImageDataset(sample_root, split='train'), 64, 8, is_training=True, auto_augment=AA,
                                     decode_device='cpu', num_workers=0, seed=0)
    dl.step.kernels = False
    n = sum(len(y) for _, y in dl)
    assert n == 8 * len(dl) > 0  # whole batches (training drops the last short one)
    assert asked and set(asked) == {False}, asked
    decode = dl.stats().info['decode']
    assert (decode['resize'], decode['warp']) == ('matmul: asked for', 'torch: asked for'), decode


def test_device_randaugment_replaces_jitter_and_refuses_what_it_lacks(sample_root):
    ds = ImageDataset(sample_root, split='train')
    dl = create_device_decode_loader(ds, 64, 4, is_training=True, auto_augment=AA, decode_device='cpu', num_workers=0)
    assert dl.step.ops.jitter is None  # as timm's transform: auto-augment replaces colour jitter
    for bad, why in (('original', 'only RandAugment'), ('v0r-mstd0.5', 'and AugMix'),
                     ('rand-m9-t3a', 'not on the device batch')):
        with pytest.raises(ValueError, match=why):
            create_device_decode_loader(ds, 64, 4, is_training=True, auto_augment=bad, decode_device='cpu', num_workers=0)
