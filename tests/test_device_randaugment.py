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


def _draws_beside_the_cpu(root, config, interpolation, kind):
    """(the device transform's policy, [(what the CPU train transform's `kind` drew, the device transform's output)] for
    every third sample, each with the same seed)."""
    ds = ImageDataset(root, split='train')
    cpu = create_transform(96, is_training=True, auto_augment=config, interpolation=interpolation, use_prefetcher=True)
    policy = next(t for t in cpu.transforms if isinstance(t, kind))
    seen = []
    draw = policy.draw
    policy.draw = lambda rng: seen.append(draw(rng)) or seen[-1]  # records what the CPU path applies
    ours = device_rand_augment(config, (96, 96), (0.485, 0.456, 0.406), interpolation)
    dev = DeviceDecodeTransform(96, is_training=True, interpolation=interpolation, rand_augment=ours)
    pairs = []
    for k in range(0, len(ds), 3):
        path = ds.reader[k][0]
        with Image.open(path) as im:
            cpu(im.convert('RGB'), Draws(k))
        pairs.append((seen[-1], dev(encoded_jpeg(Path(path).read_bytes()), Draws(k))))
    assert len(pairs) == len(seen) == (len(ds) + 2) // 3
    return ours, pairs


@pytest.mark.parametrize('config,interpolation', [(AA, 'random'), ('rand-m7-n3-p0.8-mstd1', 'bicubic'), ('rand-m9-tweights', 'bilinear')])
def test_device_draws_are_the_cpu_transforms(sample_root, config, interpolation):
    "Per sample, with the same seed: the device transform's RandAugment table is the CPU train transform's draws, encoded."
    _, pairs = _draws_beside_the_cpu(sample_root, config, interpolation, RandAugment)
    for k, (drawn, out) in enumerate(pairs):
        assert len(out) == 4 and list(out[3]) == encode_draws([d for _, d in drawn]), (k, out[3])
    assert sum(d is not None for drawn, _ in pairs for _, d in drawn) > 10  # ops were drawn and applied, not only skipped


@pytest.mark.parametrize('config,interpolation', [('augmix-m3-w3', 'random'), ('augmix-m5-w4-d2-b1', 'bicubic')])
def test_device_augmix_draws_are_the_cpu_transforms(sample_root, config, interpolation):
    "AugMix's as RandAugment's: per sample, with the same seed, the device transform's two tables encode the CPU train transform's draws."
    ours, pairs = _draws_beside_the_cpu(sample_root, config, interpolation, AugMixAugment)
    assert isinstance(ours, AugMixAugment)
    for k, (drawn, out) in enumerate(pairs):
        assert len(out) == 5 and [list(out[3]), list(out[4])] == list(encode_augmix(ours, drawn)), k
    assert sum(len(c) for drawn, _ in pairs for c in drawn[2]) >= ours.width * len(pairs)  # an op or more a chain


def _loaders(root, aa=AA, **kw):
    kw = dict(is_training=True, auto_augment=aa, num_workers=0, interpolation='random', mean=(0, 0, 0), std=(1, 1, 1), **kw)
    return (create_loader(ImageDataset(root, split='train'), 96, 10, decode_device='cpu', **kw),
            create_loader(ImageDataset(root, split='train'), 96, 10, **kw))


def _device_loader_is_the_cpu_loaders(root, aa, apart):
    """The device loader's batches (seed 0) against the CPU loader's: the same targets and shapes, each image within a
    quarter of a level on average (the device resize's rounding, at most one level, carried through the ops), every
    sample once; with another seed, more than `apart` levels from them (the test would see draws that differ). The
    device loader's `decode` figures."""
    dl, cl = _loaders(root, aa, seed=0)
    n = 0
    for (x, y), (xr, yr) in zip(dl, cl, strict=True):
        assert torch.equal(y, yr) and x.shape == xr.shape
        per_image = ((x - xr).abs() * 255).mean((1, 2, 3))
        assert per_image.max() < 0.25, per_image
        n += len(x)
    assert n == len(ImageDataset(root, split='train'))
    other, _ = _loaders(root, aa, seed=1)
    (x, _), (xr, _) = next(iter(other)), next(iter(cl))
    assert ((x - xr).abs() * 255).mean((1, 2, 3)).min() > apart
    return dl.stats().info['decode']


@pytest.mark.parametrize('aa,apart', [(AA, 5), ('augmix-m3-w3', 2), ('augmix-m5-w2-d2-b1', 2)])
def test_device_loader_augment_is_the_cpu_loaders(sample_root, aa, apart):
    """create_loader(decode_device='cpu', auto_augment='rand-...' or 'augmix-...'): the CPU loader's batches with the same
    seed (AugMix mixes its chains: a level's rounding stays about a level, and another seed moves less)."""
    decode = _device_loader_is_the_cpu_loaders(sample_root, aa, apart)
    # which resize, colour ops and warp ran, and why (on a CUDA device with Triton: 'kernel')
    assert decode['resize'] == 'matmul: not a CUDA device', decode
    assert decode['augment'] == 'torch: not a CUDA device', decode


def test_one_switch_turns_both_kernels_off_for_one_loader(sample_root, monkeypatch):
    "`step.kernels = False`: the resize in matrix products, RandAugment's layers in torch's operations (the warps too), said so, where the device would take the kernels."
    import timmdata.pixels.batch_augment as ba
    asked, launched, warp = [], [], ba.warp_batch
    monkeypatch.setattr(ba, 'warp_batch', lambda *a, kernel=None, **k: asked.append(kernel) or warp(*a, kernel=kernel, **k))
    monkeypatch.setattr(ba, 'augment_path', lambda dev: 'kernel')  # as on a GPU with Triton: only the switch keeps it off
    monkeypatch.setattr(ba, 'kernel_augment_layers', lambda *a, **k: launched.append(a))
    dl = create_device_decode_loader(ImageDataset(sample_root, split='train'), 64, 8, is_training=True, auto_augment=AA,
                                     decode_device='cpu', num_workers=0, seed=0)
    dl.step.kernels = False
    n = sum(len(y) for _, y in dl)
    assert n == 8 * len(dl) > 0  # whole batches (training drops the last short one)
    assert len(asked) > len(dl) and set(asked) == {False}, asked  # the warps, in torch's operations
    assert not launched  # the layer kernels never
    decode = dl.stats().info['decode']
    assert (decode['resize'], decode['augment']) == ('matmul: asked for', 'torch: asked for'), decode


def test_device_randaugment_replaces_jitter_and_refuses_what_it_lacks(sample_root):
    ds = ImageDataset(sample_root, split='train')
    dl = create_device_decode_loader(ds, 64, 4, is_training=True, auto_augment=AA, decode_device='cpu', num_workers=0)
    assert dl.step.ops.jitter is None  # as timm's transform: auto-augment replaces colour jitter
    for bad, why in (('original', 'only RandAugment'), ('v0r-mstd0.5', 'and AugMix'),
                     ('rand-m9-t3a', 'not on the device batch')):
        with pytest.raises(ValueError, match=why):
            create_device_decode_loader(ds, 64, 4, is_training=True, auto_augment=bad, decode_device='cpu', num_workers=0)
