"""The auto-augment ops against Pillow, op by op and magnitude by magnitude, over random images and parameters: the
native affine warp (shears, translations, rotations) gives Pillow's bytes, and every op of timmdata.auto_augment gives
the pixels of timm's op (Pillow's) for the same draws. Where the extension is not built the ops are Pillow's own."""
import random, zlib
import numpy as np
import pytest
import torch
from PIL import Image

timm_aa = pytest.importorskip('timm.data.auto_augment')

from timmdata import auto_augment as aa
from timmdata.pixels import augment_ops as ops
from timmdata.pixels import decode

native = pytest.mark.skipif(getattr(decode.NATIVE.module, 'warp_affine', None) is None,
                            reason='the C extension (with warp_affine) is not built')
FILTERS = [Image.Resampling.BILINEAR, Image.Resampling.BICUBIC]


def _images(seed, n=6):
    "Random RGB and L images: noise, blocky noise (flat areas: exact ties), and a 224 px crop-sized one."
    g = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h, w = (224, 224) if i == 0 else g.integers(3, 90, 2)
        a = g.integers(0, 256, (h, w, 3), dtype=np.uint8)
        if i % 2:
            a = np.repeat(np.repeat(a[::3, ::3], 3, 0), 3, 1)[:h, :w].copy()
        out.append(Image.fromarray(a))
    out.append(out[1].convert('L'))
    return out


@native
@pytest.mark.parametrize('resample', FILTERS)
@pytest.mark.parametrize('kind', ['general', 'shear_x', 'shear_y', 'translate', 'integer', 'scale'])
def test_warp_affine_is_pillows(resample, kind):
    g = np.random.default_rng(zlib.crc32(kind.encode()))
    for img in _images(int(resample) * 7 + len(kind)):
        for _ in range(12):
            w, h = img.size
            a, b, c, d, e, f = [float(v) for v in g.normal(size=6)]
            m = {'general': (1 + 0.3 * a, 0.4 * b, 15 * c, 0.4 * d, 1 + 0.3 * e, 15 * f),
                 'shear_x': (1, 0.3 * a, 0, 0, 1, 0), 'shear_y': (1, 0, 0, 0.3 * a, 1, 0),
                 'translate': (1, 0, 0.45 * w * a, 0, 1, 0.45 * h * b),
                 'integer': (1, 0, float(round(10 * a)), 0, 1, float(round(10 * b))),
                 'scale': (abs(a) + 0.2, 0, c, 0, abs(b) + 0.2, d)}[kind]
            fill = tuple(int(v) for v in g.integers(0, 256, len(img.getbands())))
            for fc in (fill, None):
                ref = img.transform(img.size, Image.Transform.AFFINE, m, resample=resample, fillcolor=fc)
                out = ops.warp_affine(img, m, resample, fc)
                assert out.mode == ref.mode and out.size == ref.size
                assert np.array_equal(np.asarray(out), np.asarray(ref)), (kind, m, img.size, img.mode, fc)


@native
@pytest.mark.parametrize('resample', FILTERS)
def test_rotate_is_pillows(resample):
    g = np.random.default_rng(int(resample))
    angles = [0, 90, 180, 270, -90, 360, 30, -30, 45, 0.5, -0.5, 359.9] + list(g.uniform(-40, 40, 30))
    for img in _images(11 + int(resample)):
        for deg in angles:
            fc = tuple(int(v) for v in g.integers(0, 256, len(img.getbands())))
            ref = img.rotate(deg, resample=resample, fillcolor=fc)
            out = ops.rotate(img, deg, resample=resample, fillcolor=fc)
            assert np.array_equal(np.asarray(out), np.asarray(ref)), (deg, img.size, img.mode)


def _seed(s):
    random.seed(s); np.random.seed(s); torch.manual_seed(s)


@pytest.mark.parametrize('name', sorted(timm_aa.NAME_TO_OP))
def test_every_op_every_magnitude(name):
    "Each op at magnitudes 0-10 (and noisy ones), on random images, both filters: timm's (Pillow's) pixels."
    imgs = _images(zlib.crc32(name.encode()) % 1000, n=4)[:4]
    for m in list(range(11)) + [2.5, 7.3]:
        for hp in (dict(translate_const=100, img_mean=(124, 116, 104)),
                   dict(translate_const=100, img_mean=(0, 0, 0), interpolation=Image.Resampling.BILINEAR,
                        translate_pct=0.3, magnitude_std=0.5)):
            for k, img in enumerate(imgs):
                seed = 1000 * k + int(10 * m)
                _seed(seed)
                ours = aa.AugmentOp(name, prob=1.0, magnitude=m, hparams=hp)(img)
                _seed(seed)
                try:
                    theirs = timm_aa.AugmentOp(name, prob=1.0, magnitude=m, hparams=hp)(img)
                except ValueError:  # Pillow >= 13 refuses posterize(0 bits): ours gives black, as older Pillow did
                    assert 'Posterize' in name and np.asarray(ours).max() == 0
                    continue
                assert ours.size == theirs.size and ours.mode == theirs.mode
                assert np.array_equal(np.asarray(ours), np.asarray(theirs)), (name, m, k, hp)


def test_without_the_extension_pillow_warps():
    img = _images(5)[2]
    m = (1, 0.2, 3.5, 0, 1, 0)
    with decode.use_native(False):
        out = ops.warp_affine(img, m, Image.Resampling.BICUBIC, (1, 2, 3))
    ref = img.transform(img.size, Image.Transform.AFFINE, m, resample=Image.Resampling.BICUBIC, fillcolor=(1, 2, 3))
    assert np.array_equal(np.asarray(out), np.asarray(ref))


# --- the ops on pixels (uint8 HWC arrays): the native kernels, op by op, against Pillow ---

from PIL import ImageEnhance, ImageFilter, ImageOps

kernels = pytest.mark.skipif(ops.native_kernels() is None, reason='the C extension (with the auto-augment kernels) is not built')


def _random_images(seed, n=24):
    "RGB and L images of random sizes (1 px to 230 px a side): noise, blocks (flat areas), few levels, one grey value."
    g = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h, w = (224, 224) if i == 0 else (int(v) for v in g.integers(1, 70 if i % 4 else 230, 2))
        a = g.integers(0, 256, (h, w, 3), dtype=np.uint8)
        if i % 4 == 1:
            a = np.repeat(np.repeat(a[::4, ::4], 4, 0), 4, 1)[:h, :w].copy()
        elif i % 4 == 2:
            a = (a // 64 * 40 + 30).astype(np.uint8)  # four levels: equalize's and autocontrast's edge cases
        elif i % 8 == 3:
            a[:] = g.integers(0, 256)  # one value: tables left as they are
        img = Image.fromarray(a)
        out += [img, img.convert('L')]
    return out


def _same(ours, ref, what):
    ref = np.asarray(ref)
    assert isinstance(ours, np.ndarray) and ours.dtype == np.uint8, what
    assert np.array_equal(ours.reshape(ref.shape), ref), (what, int(np.abs(ours.reshape(ref.shape).astype(int) - ref).max()))


ENHANCERS = {'brightness': (ops.brightness, ImageEnhance.Brightness), 'contrast': (ops.contrast, ImageEnhance.Contrast),
             'color': (ops.color, ImageEnhance.Color), 'sharpness': (ops.sharpness, ImageEnhance.Sharpness)}


@kernels
@pytest.mark.parametrize('name', sorted(ENHANCERS))
def test_enhancers_on_pixels_are_pillows(name):
    "ImageEnhance's blend: factors 0 and 1 (copies), within 0-1 (truncated), beyond (clamped), and float-edge ones."
    ours, pillows = ENHANCERS[name]
    g = np.random.default_rng(zlib.crc32(name.encode()))
    factors = [0.0, 1.0, 0.1, 0.5, 1.9, 2.5, -0.4, 1 + 1e-7, 1 - 1e-7, 1 / 3, 0.7, 1.3]
    for img in _random_images(len(name)):
        for f in factors + [float(v) for v in g.uniform(0, 2, 4)]:
            _same(ours(ops.pil_to_pixels(img), f), pillows(img).enhance(f), (name, f, img.size, img.mode))


@kernels
def test_pointwise_ops_on_pixels_are_pillows():
    "Tables (invert, solarize at every threshold, posterize at every bit count, solarize-add) and autocontrast, equalize."
    for k, img in enumerate(_random_images(7)):
        a = ops.pil_to_pixels(img)
        _same(ops.auto_contrast(a), ImageOps.autocontrast(img), ('autocontrast', k))
        _same(ops.equalize(a), ImageOps.equalize(img), ('equalize', k))
        _same(ops.invert(a), ImageOps.invert(img), ('invert', k))
        for t in (0, 1, 64, 128, 200, 255, 256):
            _same(ops.solarize(a, t), ImageOps.solarize(img, t), ('solarize', t, k))
        for bits in range(1, 9):
            _same(ops.posterize(a, bits), ImageOps.posterize(img, bits), ('posterize', bits, k))
        for add, thresh in ((0, 128), (30, 128), (110, 128), (128, 256), (255, 1)):
            lut = [min(255, i + add) if i < thresh else i for i in range(256)]
            _same(ops.solarize_add(a, add, thresh), img.point(lut * len(img.getbands())), ('solarize_add', add, k))


@kernels
def test_gaussian_blur_on_pixels_is_pillows():
    "Pillow's box-blur approximation: radii below one pixel, fractional ones, and ones larger than the image."
    g = np.random.default_rng(3)
    for k, img in enumerate(_random_images(11, n=16)):
        for r in [0, 1e-30, 0.1, 0.33, 0.5, 1.0, 1.5, 2.0, 3.7, 40.0] + [float(v) for v in g.uniform(0.1, 2.0, 3)]:
            _same(ops.gaussian_blur(ops.pil_to_pixels(img), r), img.filter(ImageFilter.GaussianBlur(r)), (r, k, img.size))


@kernels
def test_blend_and_mix_are_pillows_and_numpys():
    "Image.blend of two arrays; AugMix's float32 mix (numpy's arithmetic) blended by Pillow, in one native call."
    g = np.random.default_rng(5)
    for img in _random_images(13, n=10):
        a = ops.pil_to_pixels(img)
        others = [g.integers(0, 256, a.shape, dtype=np.uint8) for _ in range(4)]
        pil = lambda x: Image.fromarray(x[:, :, 0] if x.shape[2] == 1 else x)
        for alpha in (0.0, 1.0, 0.25, float(np.float32(g.uniform())), 1.6, -0.5):
            _same(ops.blend(a, others[0], alpha), Image.blend(img, pil(others[0]), alpha), ('blend', alpha))
        for width in (1, 2, 4):
            ws, m = np.float32(g.dirichlet([1.0] * width)), np.float32(g.beta(1.0, 1.0))
            mix = np.zeros(a.shape, np.float32)
            for w, c in zip(ws, others[:width]):
                mix += w * np.asarray(c, dtype=np.float32)
            np.clip(mix, 0, 255.0, out=mix)
            ref = Image.blend(img, pil(mix.astype(np.uint8)), m)
            _same(ops.mix_and_blend(a, others[:width], ws, m), ref, ("mix", width))


@kernels
@pytest.mark.parametrize('name', sorted(timm_aa.NAME_TO_OP))
def test_every_op_on_pixels(name):
    "Each op at magnitudes 0-10 on an image's pixels (the loader's path): timm's (Pillow's) pixels, as an array."
    imgs = _images(zlib.crc32(name.encode()) % 997, n=4)[:4]
    for m in list(range(11)) + [4.6]:
        hp = dict(translate_const=100, img_mean=(124, 116, 104), translate_pct=0.3, magnitude_std=0.5)
        for k, img in enumerate(imgs):
            seed = 7000 + 100 * k + int(10 * m)
            _seed(seed)
            ours = aa.AugmentOp(name, prob=1.0, magnitude=m, hparams=hp)(ops.pil_to_pixels(img))
            _seed(seed)
            try:
                theirs = timm_aa.AugmentOp(name, prob=1.0, magnitude=m, hparams=hp)(img)
            except ValueError:  # Pillow >= 13 refuses posterize(0 bits): ours gives black
                assert 'Posterize' in name and ours.max() == 0
                continue
            _same(ours, theirs, (name, m, k))


POLICIES = ['rand-m9-mstd0.5', 'rand-m9-mstd0.5-inc1', 'rand-m7-n3-mstd101-tweights', 'augmix-m5-w4-d2',
            'augmix-m3-w3-b1', 'original', 'v0r', '3a', 'rand-m9-t3a']


@kernels
@pytest.mark.parametrize('config', POLICIES)
def test_policies_on_pixels_pil_and_tensors(config):
    "A policy on a PIL image, its pixels and a CHW tensor gives timm's pixels (seeded), each as the kind it was given."
    from timm.data.auto_augment import augment_and_mix_transform, auto_augment_transform, rand_augment_transform
    hp = dict(translate_const=100, img_mean=(124, 116, 104))
    build = {'rand': rand_augment_transform, 'augm': augment_and_mix_transform}.get(config[:4], auto_augment_transform)
    ours_t = getattr(aa, build.__name__)(config, dict(hp))
    theirs_t = build(config, dict(hp))
    compared = skipped = 0
    for k, img in enumerate(_images(zlib.crc32(config.encode()) % 991, n=4)[:4]):
        for seed in range(5):
            _seed(seed)
            try:
                ref = np.asarray(theirs_t(img))
            except ValueError as e:  # timm's posterize(0 bits) under Pillow >= 13, and nothing else
                assert 'bits must be' in str(e), (config, k, seed, e)
                skipped += 1
                continue
            compared += 1
            _seed(seed); p = ours_t(img)
            _seed(seed); a = ours_t(ops.pil_to_pixels(img))
            _seed(seed); t = ours_t(torch.from_numpy(ops.pil_to_pixels(img).copy()).permute(2, 0, 1).contiguous())
            assert isinstance(p, Image.Image) and np.array_equal(np.asarray(p), ref), (config, k, seed)
            _same(a, ref, (config, k, seed))
            assert isinstance(t, torch.Tensor) and np.array_equal(t.permute(1, 2, 0).numpy().reshape(ref.shape), ref)
    # 4 images x 5 seeds; a draw of posterize(0 bits) is rare (none of these 180, Pillow 13.0): at most 2 of 20 left out
    assert compared + skipped == 20 and compared >= 18, (config, compared, skipped)


@kernels
def test_warp_simd_is_the_plain_c():
    "warp_affine's AVX2 row (three channels a vector) and the plain C row: the same bytes."
    k = decode.NATIVE.module
    g = np.random.default_rng(9)
    for img in _random_images(17, n=12):
        a = ops.pil_to_pixels(img)
        for _ in range(6):
            m = tuple(float(v) for v in (1 + 0.3 * g.normal(), 0.4 * g.normal(), 9 * g.normal(), 0.4 * g.normal(),
                                         1 + 0.3 * g.normal(), 9 * g.normal()))
            for kind in (0, 1):
                fill = tuple(int(v) for v in g.integers(0, 256, a.shape[2]))
                on = k.warp_affine(a, m, kind, fill)
                was = k.set_resample_simd(False)
                try:
                    off = k.warp_affine(a, m, kind, fill)
                finally:
                    k.set_resample_simd(was)
                assert on == off, (m, kind, a.shape)




@kernels
def test_warp_rows_on_one_source_row_are_pillows():
    "Translations and shears along x (a matrix with d == 0: each output row reads one source row, with one fraction):"
    " made four pixels a group where the columns follow one another, the same bytes as Pillow's and the plain C row's,"
    " fractional and whole shifts, both filters, groups at the image's edges."
    k = decode.NATIVE.module
    g = np.random.default_rng(13)
    made = 0
    for t in range(240):
        h, w = (int(v) for v in g.integers(3, 50, 2))
        a = g.integers(0, 256, (h, w, 3), np.uint8)
        shift = float(g.uniform(-12, 12)) if t % 5 else float(int(g.integers(-6, 6)))
        m = [(1, 0, shift, 0, 1, 0), (1, 0, 0, 0, 1, shift), (1, float(g.uniform(-0.5, 0.5)), 0, 0, 1, 0),
             (1, 0, float(int(shift)), 0, 1, shift)][t % 4]
        for kind, rs in ((0, Image.Resampling.BILINEAR), (1, Image.Resampling.BICUBIC)):
            fill = tuple(int(v) for v in g.integers(0, 256, 3))
            on = k.warp_affine(a, tuple(float(v) for v in m), kind, fill)
            was = k.set_resample_simd(False)
            try:
                off = k.warp_affine(a, tuple(float(v) for v in m), kind, fill)
            finally:
                k.set_resample_simd(was)
            want = np.asarray(Image.fromarray(a).transform((w, h), Image.Transform.AFFINE, m, resample=rs, fillcolor=fill))
            assert len(on) == want.size and on == want.tobytes() and off == on, (m, kind, a.shape)
            made += 1
    assert made == 480

@kernels
def test_lookup_tables_simd_are_the_plain_c():
    "aug_point's tables through AVX-512 VBMI (one table, or each channel's; where the CPU has it) and the plain C loop: the same bytes, for odd widths, row strides and one or three channels."
    k = decode.NATIVE.module
    g = np.random.default_rng(11)
    for _ in range(40):
        h, w, c = int(g.integers(1, 60)), int(g.integers(1, 150)), int(g.choice([1, 3]))
        a = g.integers(0, 256, (h, w + 7, c), np.uint8)[:, 3 : w + 3]  # rows apart: a window of a wider image
        for kind, table in ((0, g.integers(0, 256, 256, np.uint8).tobytes()), (0, g.integers(0, 256, 256 * c, np.uint8).tobytes()),
                            (1, None), (2, None)):
            args = (a, kind) if table is None else (a, kind, table)
            on = k.aug_point(*args)
            was = k.set_resample_simd(False)
            try:
                off = k.aug_point(*args)
            finally:
                k.set_resample_simd(was)
            assert len(on) == h * w * c and on == off, (kind, a.shape)
            if kind == 0:
                t = np.frombuffer(table, np.uint8).reshape(-1, 256)
                want = np.stack([t[ch % len(t)][a[:, :, ch]] for ch in range(c)], -1)
                assert np.array_equal(np.frombuffer(on, np.uint8).reshape(h, w, c), want), (kind, a.shape)

def test_ops_on_pixels_without_the_extension():
    "Without the extension, arrays still work (through Pillow) and give the same pixels."
    img = _images(21)[2]
    a = ops.pil_to_pixels(img)
    with_k = [ops.sharpness(a, 1.7), ops.equalize(a), ops.gaussian_blur(a, 1.1), ops.rotate(a, 17.0, resample=Image.Resampling.BICUBIC)]
    with decode.use_native(False):
        assert ops.native_kernels() is None
        without = [ops.sharpness(a, 1.7), ops.equalize(a), ops.gaussian_blur(a, 1.1), ops.rotate(a, 17.0, resample=Image.Resampling.BICUBIC)]
        pol = aa.rand_augment_transform('rand-m9-mstd0.5', dict(translate_const=100))
        out = pol(a, __import__('timmdata.config', fromlist=['Draws']).Draws(3))
        assert isinstance(out, np.ndarray) and out.shape == a.shape
    assert len(with_k) == len(without) == 4
    for x, y in zip(with_k, without):
        assert np.array_equal(x, y)


def test_bad_arrays_are_refused_clearly():
    pol = aa.rand_augment_transform('rand-m9', {})
    with pytest.raises(ValueError, match='uint8 HWC arrays with 1 or 3 channels'):
        pol(np.zeros((8, 8, 4), np.uint8))
