"""timmdata.auto_augment against the installed timm: every op, the parsed config strings, seeded outputs."""
import random
import numpy as np
import pytest
import torch
from PIL import Image

timm_aa = pytest.importorskip('timm.data.auto_augment')
from timm.data import create_transform as timm_create_transform

from timmdata import auto_augment as aa
from timmdata.tools.sample_data import make_sample_image
from timmdata.transforms_factory import create_transform

IMG = make_sample_image(3, seed=1, size=(160, 120))
HP = dict(translate_const=100, img_mean=(124, 116, 104))


def _seed(s):
    random.seed(s); np.random.seed(s); torch.manual_seed(s)


def _same(a, b):
    return a.size == b.size and a.mode == b.mode and np.array_equal(np.asarray(a), np.asarray(b))


def test_op_set_matches_timm():
    assert set(aa.OP_NAMES) == set(timm_aa.NAME_TO_OP)


@pytest.mark.parametrize('name', sorted(timm_aa.NAME_TO_OP))
@pytest.mark.parametrize('magnitude', [0, 5, 10])
def test_every_op(name, magnitude):
    "Each op gives an image at magnitude 0 and 10, and with the same seed timm's pixels (where timm's op runs)."
    for seed in range(4):
        for hp in (HP, dict(HP, interpolation=Image.Resampling.BILINEAR, translate_pct=0.3)):
            _seed(seed)
            ours = aa.AugmentOp(name, prob=1.0, magnitude=magnitude, hparams=hp)(IMG)
            assert isinstance(ours, Image.Image) and ours.size == IMG.size and ours.mode == 'RGB'
            _seed(seed)
            try:
                theirs = timm_aa.AugmentOp(name, prob=1.0, magnitude=magnitude, hparams=hp)(IMG)
            except ValueError:  # timm posterizes to 0 bits, which Pillow >= 13 refuses; ours gives black, as old Pillow did
                assert 'Posterize' in name and np.asarray(ours).max() == 0
                continue
            assert _same(ours, theirs), (name, magnitude, seed)


def _op_sig(op):
    return (op.name, op.prob, op.magnitude, op.magnitude_std, op.magnitude_max, op.hparams,
            tuple(op.kwargs['fillcolor']), op.kwargs['resample'])


def _sig(t):
    "What a parsed transform amounts to, for RandAugment, AugMix or AutoAugment, ours or timm's."
    kind = type(t).__name__
    if kind == 'RandAugment':
        w = None if t.choice_weights is None else tuple(np.round(t.choice_weights, 12))
        return kind, t.num_layers, w, [_op_sig(o) for o in t.ops]
    if kind == 'AugMixAugment':
        return kind, t.alpha, t.width, t.depth, t.blended, [_op_sig(o) for o in t.ops]
    return kind, [[_op_sig(o) for o in sub] for sub in t.policy]


CONFIGS = ['rand-m9-mstd0.5-inc1', 'augmix-m5-w4-d2', 'original', 'v0', '3a', 'originalr', 'v0r', 'original-mstd0.5',
           'rand-m9-n3-tweights-mstd101', 'rand-m7-t3a', 'rand-m6-t3aw-inc1', 'rand-m9-mmax12-p0.8-n1', 'rand-m10',
           'augmix-m3-b1-a0.5', 'augmix-m4-mstd0.5']


def _timm_build(s, hp):
    if s.startswith('rand'): return timm_aa.rand_augment_transform(s, dict(hp) if hp else None)
    if s.startswith('augmix'): return timm_aa.augment_and_mix_transform(s, dict(hp) if hp else None)
    return timm_aa.auto_augment_transform(s, dict(hp) if hp else None)


def _our_build(s, hp):
    if s.startswith('rand'): return aa.rand_augment_transform(s, dict(hp) if hp else None)
    if s.startswith('augmix'): return aa.augment_and_mix_transform(s, dict(hp) if hp else None)
    return aa.auto_augment_transform(s, dict(hp) if hp else None)


@pytest.mark.parametrize('config', CONFIGS)
def test_parsed_hparams(config):
    for hp in (None, HP):
        ours, theirs = _our_build(config, hp), _timm_build(config, hp)
        assert _sig(ours) == _sig(theirs)


@pytest.mark.parametrize('config', CONFIGS)
def test_seeded_outputs(config):
    "Same seeds, same images as timm (seeds where timm's op hits Pillow 13's posterize(0) are skipped)."
    ours, theirs, compared = _our_build(config, HP), _timm_build(config, HP), 0
    for seed in range(12):
        _seed(seed)
        try: ref = theirs(IMG)
        except ValueError: continue
        _seed(seed)
        assert _same(ours(IMG), ref), seed
        compared += 1
    assert compared >= 8


@pytest.mark.parametrize('auto_augment', ['rand-m9-mstd0.5-inc1', 'augmix-m5-w4-d2', 'original', '3a'])
@pytest.mark.parametrize('interpolation', ['random', 'bicubic'])
def test_create_transform_with_auto_augment(auto_augment, interpolation):
    kw = dict(input_size=128, is_training=True, auto_augment=auto_augment, interpolation=interpolation, use_prefetcher=True)
    ours, theirs = create_transform(**kw), timm_create_transform(**kw)
    assert ours.input_format == 'pil'
    assert [type(t).__name__ for t in ours.transforms] == [type(t).__name__ for t in theirs.transforms]
    img = make_sample_image(1, seed=2, size=(300, 220))
    compared = 0
    for seed in range(5):
        _seed(seed)
        try: ref = theirs(img)
        except ValueError: continue  # timm's op fails under Pillow 13 at some magnitudes (see the notebook)
        _seed(seed)
        assert torch.equal(ours(img), ref), seed
        compared += 1
    assert compared >= 3, f'only {compared} of 5 seeds could be compared with timm'


def test_tensor_input_falls_back_to_pil():
    t = torch.from_numpy(np.asarray(IMG).copy()).permute(2, 0, 1)
    tf = aa.rand_augment_transform('rand-m9-mstd0.5', HP)
    _seed(0); a = tf(t)
    _seed(0); b = tf(IMG)
    assert torch.equal(a, torch.from_numpy(np.asarray(b).copy()).permute(2, 0, 1))


@pytest.mark.parametrize('bad,msg', [('randaug', "must start with 'rand', 'augmix'"), ('rand-q3', "unknown section 'q3'"),
                                     ('augmix-m5-z', "unknown section 'z'"), ('v0-m3', "unknown section 'm3'"),
                                     ('rand-m9-twhatever', "transform set 'twhatever'")])
def test_bad_strings(bad, msg):
    with pytest.raises(ValueError, match=msg.replace('(', r'\(')):
        create_transform(224, is_training=True, auto_augment=bad)
