"""timmdata as a drop-in for the installed timm.data (issue 25): every public name, every parameter of every callable
(every name of every submodule path, `timm.data.readers.*` included: tests/test_timm_map.py). The walk is over what
timm has, so a new timm release fails here naming what it added.
Deviations are listed below, each with its reason; anything else missing is a failure."""
import importlib, inspect, random, types

import numpy as np
import pytest
import torch
from PIL import Image

import timm.data as td
import timmdata

# Defaults that differ on purpose: None = "decide from the machine" where timm hard-codes a CUDA setting.
DEFAULTS_DIFFER = {
    ('create_loader', 'pin_memory'): 'None: pin when the batches go to CUDA',
    ('create_loader', 'device'): "None: CUDA when available, else CPU (timm's default fails without CUDA)",
    ('create_naflex_loader', 'pin_memory'): 'None: pin when the batches go to CUDA',
    ('create_naflex_loader', 'device'): "None: CUDA when available, else CPU",
    ('PrefetchLoader', 'device'): "None: CUDA when available, else CPU",
    ('create_reader', 'name'): "'': our older form create_reader(root) still works",
}


def _public(mod) -> list:
    return sorted(n for n in dir(mod) if not n.startswith('_') and not isinstance(getattr(mod, n), types.ModuleType))


def _own_names(mod) -> list:
    "A timm submodule's public names: its __all__, else what it defines itself."
    if hasattr(mod, '__all__'): return list(mod.__all__)
    return sorted(n for n, v in vars(mod).items() if not n.startswith('_') and getattr(v, '__module__', None) == mod.__name__)


def test_every_public_name():
    missing = [n for n in _public(td) if not hasattr(timmdata, n)]
    assert not missing, f'timm.data names missing from timmdata: {missing}'
    not_all = [n for n in _public(td) if n not in timmdata.__all__]
    assert not not_all, f'timm.data names not in timmdata.__all__: {not_all}'


def test_star_import_gives_timms_names():
    ours, theirs = {}, {}
    exec('from timmdata import *', ours)
    exec('from timm.data import *', theirs)
    theirs = {n for n, v in theirs.items() if not n.startswith('__') and not isinstance(v, types.ModuleType)}
    assert len(theirs) > 60  # the walk saw timm's names
    assert theirs <= set(ours), sorted(theirs - set(ours))
    assert not [n for n in timmdata.__all__ if not hasattr(timmdata, n)]


def _callables():
    out = []
    for n in _public(td):
        obj = getattr(td, n)
        if not callable(obj): continue
        try: inspect.signature(obj)
        except (TypeError, ValueError): continue
        out.append(n)
    return out


@pytest.mark.parametrize('name', _callables())
def test_every_parameter(name):
    "Each of timm's parameters is one of ours: same name, kind and place (positional callers), same default."
    _same_parameters(name, getattr(td, name), getattr(timmdata, name))


def test_prefetch_loader_parameters():
    "PrefetchLoader takes BatchOps's options through *args/**kwargs: its declared signature is still timm's."
    from timm.data.loader import PrefetchLoader
    _same_parameters('PrefetchLoader', PrefetchLoader, timmdata.PrefetchLoader)


def _same_parameters(name, theirs, ours):
    theirs, ours = inspect.signature(theirs).parameters, inspect.signature(ours).parameters
    our_names = list(ours)
    for i, (p, tp) in enumerate(theirs.items()):
        if tp.kind in (tp.VAR_POSITIONAL, tp.VAR_KEYWORD): continue
        assert p in ours, f'{name}: timmdata lacks parameter {p!r}'
        op = ours[p]
        assert op.kind == tp.kind, f'{name}({p}): kind {op.kind} vs timm {tp.kind}'
        if tp.kind == tp.POSITIONAL_OR_KEYWORD:
            assert our_names.index(p) == list(theirs).index(p), f'{name}: {p!r} moved (positional callers break)'
        if (name, p) in DEFAULTS_DIFFER: continue
        assert repr(op.default) == repr(tp.default), f'{name}({p}): default {op.default!r} vs timm {tp.default!r}'
    extra = [p for p, op in ours.items() if p not in theirs and op.default is op.empty
             and op.kind not in (op.VAR_POSITIONAL, op.VAR_KEYWORD)]
    assert not extra, f'{name}: required parameters timm does not have: {extra}'


def test_deviations_are_real():
    "Each listed deviation still exists (else remove it from the list)."
    for (f, p) in DEFAULTS_DIFFER:
        assert repr(inspect.signature(getattr(timmdata, f)).parameters[p].default) != repr(
            inspect.signature(getattr(td, f, None) or getattr(td.loader, f)).parameters[p].default), (f, p)


def test_constants_equal():
    for n in _own_names(importlib.import_module('timm.data.constants')) or _public(importlib.import_module('timm.data.constants')):
        assert getattr(timmdata, n) == getattr(td, n), n


# ---------------------------------------------------------------- refused or optional, by name

def test_tf_preprocessing_fails_as_timms():
    pytest.importorskip('timm')
    try: import tensorflow  # noqa: F401
    except ImportError: pass
    else: pytest.skip('TensorFlow is installed')
    with pytest.raises(ModuleNotFoundError, match='tensorflow'): td.create_transform(224, tf_preprocessing=True, use_prefetcher=True)
    with pytest.raises(ModuleNotFoundError, match='tensorflow'): timmdata.create_transform(224, tf_preprocessing=True, use_prefetcher=True)
    # without the prefetcher timm ignores the flag: so do we
    assert type(timmdata.create_transform(32, tf_preprocessing=True)).__name__ == type(td.create_transform(32, tf_preprocessing=True)).__name__


def test_additional_features_refused_by_name(sample_root):
    timmdata.ImageDataset(str(sample_root), split='val', additional_features=None)  # None: accepted
    with pytest.raises(NotImplementedError, match='additional_features'):
        timmdata.ImageDataset(str(sample_root), split='val', additional_features=['caption'])


# ---------------------------------------------------------------- '' and None mean "not given"

@pytest.mark.parametrize('empty', ['', None])
def test_empty_class_map_and_split_on_every_reader(sample_root, tmp_path, empty):
    root = str(sample_root)
    want = timmdata.create_reader(root, split='val').class_to_idx
    assert timmdata.create_reader('', root, 'val', class_map=empty).class_to_idx == want
    assert len(timmdata.create_reader('', root, split=empty, class_map=empty)) == len(td.create_dataset('', root, split='', class_map=''))
    assert len(timmdata.ImageDataset(root, split='val', class_map=empty, reader=empty)) == len(timmdata.ImageDataset(root, split='val'))
    assert len(timmdata.create_dataset('', root=root, split='val', class_map=empty)) == len(td.create_dataset('', root=root, split='val', class_map=''))
    shards = tmp_path / 'shards'
    timmdata.write_shards(root, shards, shard_size=20, class_map=empty)
    ds = timmdata.create_dataset('wds/sample', root=str(shards), split='val', class_map=empty, is_training=False, batch_size=4)
    assert sum(1 for _ in ds) == 30
    src = timmdata.create_reader('wds/sample', root=str(shards), split='train', class_map=empty)
    assert type(src).__name__ == 'WdsSource' and src.num_samples == 60
    timmdata.build_cache(root, tmp_path / 'cache', split='val')
    assert len(timmdata.create_reader(str(tmp_path / 'cache'), class_map=empty)) == 30
    assert len(timmdata.create_dataset('', root=str(tmp_path / 'cache'), split=empty, class_map=empty)) == 30


def test_empty_crop_modes_are_defaults():
    for kw in (dict(is_training=True, train_crop_mode=''), dict(crop_mode='')):
        ours, theirs = timmdata.create_transform(32, **kw), td.create_transform(32, **kw)
        want = timmdata.create_transform(32, **{k: None if k.endswith('crop_mode') else v for k, v in kw.items()})
        assert repr(ours) == repr(want) and len(ours.transforms) == len(theirs.transforms)


# ---------------------------------------------------------------- parity where it is data processing

def _img(seed=0, size=(37, 29)):
    return Image.fromarray(np.random.RandomState(seed).randint(0, 256, (*size, 3), dtype=np.uint8))


def _same(a, b):
    a, b = (np.asarray(x) if not isinstance(x, torch.Tensor) else x.numpy() for x in (a, b))
    assert a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize('make', [
    lambda m: m.RandomResizedCropAndInterpolation(24, interpolation='random'),
    lambda m: m.ResizeKeepRatio(20, longest=0.5, random_scale_prob=0.5, random_aspect_prob=0.5),
    lambda m: m.rand_augment_transform('rand-m9-mstd0.5-inc1', {'translate_const': 10, 'img_mean': (124, 116, 104)}),
    lambda m: m.auto_augment_transform('original', {'translate_const': 10, 'img_mean': (124, 116, 104)}),
    lambda m: m.RandomPad((48, 40), fill=3),
    lambda m: m.CenterCropOrPad(40, fill=5),
    lambda m: m.RandomCropOrPad(30),
    lambda m: m.TrimBorder(3),
])
def test_transform_parity(make):
    "Same outputs as timm's on the same seed and PIL input."
    for seed in range(4):
        random.seed(seed); torch.manual_seed(seed); np.random.seed(seed)
        want = make(td)(_img(seed))
        random.seed(seed); torch.manual_seed(seed); np.random.seed(seed)
        got = make(timmdata)(_img(seed))
        _same(got, want)


def test_to_tensor_parity():
    img = _img(1)
    for name in ('MaybeToTensor', 'MaybePILToTensor', 'ToNumpy', 'ToTensor'):
        _same(getattr(timmdata, name)()(img), getattr(td, name)()(img))
    assert timmdata.str_to_interp_mode('bicubic') == td.str_to_interp_mode('bicubic')
    assert timmdata.interp_mode_to_str(td.str_to_interp_mode('nearest')) == 'nearest'
    assert timmdata.str_to_pil_interp('bilinear') == td.str_to_pil_interp('bilinear')


def test_auto_augment_policy_and_ops_parity():
    hp = {'translate_const': 10}
    assert [[(o.name, o.prob, o.magnitude) for o in s] for s in timmdata.auto_augment_policy('v0', hp)] == \
           [[(o.name, o.prob, o.magnitude) for o in s] for s in td.auto_augment_policy('v0', hp)]
    assert [o.name for o in timmdata.rand_augment_ops(5, hp)] == [o.name for o in td.rand_augment_ops(5, hp)]


def test_dataset_info_parity():
    for ours, theirs in ((timmdata.ImageNetInfo(), td.ImageNetInfo()), (timmdata.ImageNetInfo('imagenet-12k'), td.ImageNetInfo('imagenet-12k'))):
        assert ours.label_names() == theirs.label_names()
        assert ours.label_descriptions(detailed=True) == theirs.label_descriptions(detailed=True)
        assert ours.label_descriptions(as_dict=True) == theirs.label_descriptions(as_dict=True)
    for cfg in ({'num_classes': 1000}, {'num_classes': 21843}, {'num_classes': 7}, {}):
        assert timmdata.infer_imagenet_subset(cfg) == td.infer_imagenet_subset(cfg)
    names, desc = {'0': 'cat', 4: 'dog'}, {'cat': 'feline', 'dog': 'canine'}
    ours, theirs = timmdata.CustomDatasetInfo(names, desc), td.CustomDatasetInfo(names, desc)
    mo = timmdata.DatasetInfoLabelMapper(ours, 'description'); mt = td.DatasetInfoLabelMapper(theirs, 'description')
    assert [mo(i) for i in range(6)] == [mt(i) for i in range(6)]
    assert tuple(mo.coverage(3)) == tuple(mt.coverage(3))


def test_adapt_to_chs_parity():
    from timm.data.loader import adapt_to_chs as theirs
    from timmdata.loader import adapt_to_chs as ours
    for x, n in ((0.5, 3), ((0.2, 0.4, 0.6), 3)):
        assert ours(x, n) == theirs(x, n), (x, n)
    for x, n in (([0.1, 0.3], 1), ((0.2, 0.4, 0.6), 1)):  # averaged, and said (timm logs it, timmdata warns)
        with pytest.warns(UserWarning, match='different shape than model'):
            assert ours(x, n) == theirs(x, n), (x, n)


def test_multilabel_target_parity():
    for dense, t in ((False, [0, 3, 3]), (False, []), (True, [0., 0.5, 1., 0.])):
        _same(timmdata.MultiLabelTarget(4, dense)(t), td.MultiLabelTarget(4, dense)(t))


def test_resolve_input_data_config_parity():
    import timm
    for model, args in (('resnet18', {'img_size': 64}), ('test_vit', {'img_size': 96, 'mean': 0.5}), ('test_vit3', {}),
                        ('resnet18', {'input_size': (3, 80, 80), 'std': (0.2, 0.2, 0.2)})):
        m = timm.create_model(model, pretrained=False)
        for test_size in (False, True):
            assert timmdata.resolve_input_data_config(m, dict(args), use_test_size=test_size) == \
                   td.resolve_input_data_config(m, dict(args), use_test_size=test_size), (model, args)


def test_img_extensions_like_timms():
    saved = timmdata.get_img_extensions()
    try:
        timmdata.add_img_extensions('.gif')
        assert timmdata.is_img_extension('.gif') and timmdata.get_img_extensions()[-1] == '.gif'
        timmdata.del_img_extensions(['.gif'])
        assert not timmdata.is_img_extension('.gif')
    finally: timmdata.set_img_extensions(saved)
    assert timmdata.get_img_extensions() == saved
    assert set(td.get_img_extensions()) <= timmdata.get_img_extensions(as_set=True)  # ours read timm's and more
