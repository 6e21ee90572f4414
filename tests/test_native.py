"""timmdata._native (csrc/native.c): built, exact, and wired in: the crop-aware JPEG decode and the fused batch step."""
import random, pytest, torch
from timmdata import ImageDataset, create_transform, create_loader
from timmdata.pixels import decode
from timmdata.engine.collate import fast_collate
from timmdata.pixels.decode import EncodedJpeg, encoded_jpeg, decode_image, ImageDecodeError
from timmdata.engine.prefetch import PrefetchLoader

def test_extension_is_built():
    "`make` installs libjpeg-turbo's header; without the extension the fast path is silently gone, so insist on it."
    import timmdata._native  # noqa: F401

def test_training_pipeline_decodes_crops_and_matches_full_decode(sample_root):
    t = create_transform(224, is_training=True, use_prefetcher=True, color_jitter=0)
    assert t.input_format == 'encoded'
    fast, full = ImageDataset(sample_root), ImageDataset(sample_root)
    fast.transform = full.transform = t
    full._encoded = False  # what the dataset did before: decode everything, then crop
    assert fast._encoded
    for i in range(len(fast)):
        random.seed(i); torch.manual_seed(i); a, ya = fast[i]
        random.seed(i); torch.manual_seed(i); b, yb = full[i]
        assert torch.equal(a, b) and ya == yb

def test_eval_pipeline_decodes_only_its_window(sample_root):
    "The fused resize + centre crop takes the undecoded JPEG: the same pixels as from the whole decode (and as PIL's)."
    t = create_transform(224, is_training=False, use_prefetcher=True)
    assert t.input_format == 'encoded'
    ds = ImageDataset(sample_root); ds.transform = t
    assert ds._encoded
    data = open(ds.filename(0, absolute=True), 'rb').read()
    out = t(encoded_jpeg(data))
    assert torch.equal(out, t(decode_image(data, to_tensor=True)))  # the fused step on the decoded tensor
    assert torch.equal(out, t(decode_image(data)))  # PIL's steps: timm's pixels

def _bad_header(path):
    "A JPEG whose frame header (SOF0) says the image is 0 pixels high: structure intact, undecodable."
    data = bytearray(open(path, 'rb').read())
    sof = data.index(b'\xff\xc0')
    data[sof + 5:sof + 7] = b'\x00\x00'
    return bytes(data)

@pytest.mark.parametrize('policy', ['raise', 'skip'])
def test_bad_jpeg_in_the_crop_decoding_pipeline_is_named_or_skipped(sample_root, tmp_path, policy):
    import shutil
    root = tmp_path / 'ds'; shutil.copytree(sample_root / 'train', root)
    victim = sorted(root.rglob('*.JPEG'))[3]
    victim.write_bytes(_bad_header(victim))
    t = create_transform(64, is_training=True, use_prefetcher=True, color_jitter=0)
    ds = ImageDataset(root, transform=t, bad_sample=policy)
    assert ds._encoded
    i = ds.filenames(absolute=True).index(str(victim))
    if policy == 'raise':
        with pytest.raises(ImageDecodeError, match=f'sample {i} ') as e: ds[i]
        assert str(victim) in str(e.value)
    else:
        with pytest.warns(UserWarning, match=f'sample {i} '): assert ds[i] is None
        assert ds.bad_samples == [i]
    assert ds[i + 1][0].shape == (3, 64, 64)  # its neighbours are unaffected

def test_decode_crop_of_undecodable_data_raises():
    "The native decoder's failure falls back to the full decoders, whose failure is the dataset's clear error."
    bad = EncodedJpeg(b'\xff\xd8' + bytes(200) + b'\xff\xd9', 20, 30)
    with pytest.raises(ImageDecodeError): bad.decode_crop(0, 0, 10, 10)

def test_loader_epoch_with_crop_decode(sample_root):
    ds = ImageDataset(sample_root)
    ld = create_loader(ds, (3, 96, 96), 8, is_training=True, num_workers=2, device='cpu')
    assert ds._encoded
    n = sum(len(x) for x, y in ld)
    assert n == len(ds) // 8 * 8

# (40, 56) and (224, 224): planes a multiple of 32 bytes, written with streaming stores on AVX2; (7, 9): the plain loop
@pytest.mark.parametrize('hw', [(40, 56), (7, 9), (224, 224)])
@pytest.mark.parametrize('jitter', [0.4, (0.2, 0.5, 0.3)])
def test_fused_batch_step_matches_torch_ops(monkeypatch, jitter, hw):
    "The native jitter+normalise pass gives the torch-ops result (same generator draws), to float rounding."
    x = torch.randint(0, 256, (7, 3, *hw), dtype=torch.uint8)
    x[0] = 255; x[1] = 0  # saturated images exercise the clamp
    batches = [(x, torch.arange(7))]
    native_pl = PrefetchLoader(batches, device='cpu', color_jitter=jitter, seed=3)
    monkeypatch.setattr(decode.NATIVE, 'enabled', False)  # before the loader is made: it picks its back end then
    torch_pl = PrefetchLoader(batches, device='cpu', color_jitter=jitter, seed=3)
    assert type(native_pl.backend).__name__ == '_NativeCpuBackend' and type(torch_pl.backend).__name__ == '_CpuBackend'
    fast, slow = next(iter(native_pl))[0], next(iter(torch_pl))[0]
    assert fast.shape == slow.shape and fast.dtype == slow.dtype == torch.float32
    assert torch.allclose(fast, slow, atol=1e-4), (fast - slow).abs().max()

@pytest.mark.parametrize('hw', [(20, 24), (7, 9), (224, 224)])
@pytest.mark.parametrize('jitter', [None, 0.4])
def test_fused_step_reads_channels_last_batches(monkeypatch, jitter, hw):
    "fast_collate gives channels-last batches for decode_jpeg-layout images; both layouts and the torch path agree."
    hwc = [torch.randint(0, 256, (*hw, 3), dtype=torch.uint8) for _ in range(5)]
    imgs = [t.permute(2, 0, 1) for t in hwc]  # CHW views of HWC memory, as decode_jpeg and the uint8 resize give
    x, y = fast_collate([(im, i) for i, im in enumerate(imgs)])
    assert x.shape == (5, 3, *hw) and x.is_contiguous(memory_format=torch.channels_last)
    assert all(torch.equal(x[i], imgs[i]) for i in range(5))
    planar = x.contiguous()
    run = lambda b: next(iter(PrefetchLoader([(b, y)], device='cpu', color_jitter=jitter, seed=5)))[0]
    a, p = run(x), run(planar)
    monkeypatch.setattr(decode.NATIVE, 'enabled', False)  # before the loader is made: it picks its back end then
    t = run(x)
    assert torch.allclose(a, p, atol=1e-5) and torch.allclose(a, t, atol=1e-4)

@pytest.mark.parametrize('layout', ['planar', 'nhwc'])
def test_streaming_and_plain_passes_give_the_same_floats(layout):
    "The AVX2 streaming-store passes do the plain loops' operations in the same order: bit-identical output."
    x = torch.randint(0, 256, (6, 3, 224, 224), dtype=torch.uint8)  # 224x224 planes: 32-byte aligned, streamed on AVX2
    x[0] = 255; x[1] = 0
    if layout == 'nhwc': x = x.contiguous(memory_format=torch.channels_last)
    native = decode.native
    def run(on):  # the loader's back end told which stores to use (it would time both and keep the faster)
        pl = PrefetchLoader([(x, torch.arange(6))], device='cpu', color_jitter=0.4, seed=7)
        pl.backend.stores.streaming = on
        out = next(iter(pl))[0].clone()
        assert native.set_streaming(on) == (on and can), 'the pass did not run with the stores asked for'
        return out
    old = native.set_streaming(True)
    can = native.set_streaming(old)  # this build has streaming stores (AVX2)
    try:
        streamed, plain = run(True), run(False)
    finally: native.set_streaming(old)
    assert torch.equal(streamed, plain)


def test_one_switch_turns_the_extension_off_on_every_path(monkeypatch):
    "`decode.use_native(False)` reaches decoding, the prefetcher's back end and the NaFlex loader's native pass (once bound at import)."
    import io
    from types import SimpleNamespace
    from PIL import Image
    from timmdata.naflex_loader import NaFlexBatchOps
    calls = []
    class Spy:  # the extension, with every function it hands out counted
        def __init__(self, nat): self.nat = nat
        def __getattr__(self, name):
            f = getattr(self.nat, name)
            return (lambda *a, **k: calls.append(name) or f(*a, **k)) if callable(f) else f
    monkeypatch.setattr(decode.NATIVE, 'loaded', Spy(decode.NATIVE.loaded))
    buf = io.BytesIO(); Image.new('RGB', (32, 24), (200, 30, 90)).save(buf, 'JPEG'); jpg = buf.getvalue()
    x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    p, valid = torch.zeros(2, 4, 16, 3, dtype=torch.uint8), torch.ones(2, 4, dtype=torch.bool)
    with decode.use_native(False):
        assert decode_image(jpg, to_tensor=True).shape == (3, 24, 32) and encoded_jpeg(jpg) is None
        assert type(PrefetchLoader([(x, torch.arange(2))], device='cpu').backend).__name__ == '_CpuBackend'
        assert NaFlexBatchOps._native_cpu(SimpleNamespace(device=torch.device('cpu')), p, valid) is None
    assert calls == []  # nothing reached the extension
    assert decode_image(jpg, to_tensor=True).shape == (3, 24, 32) and 'decode_crop' in calls  # and switched on again, it is used

def test_grey_jpegs_take_the_crop_path_with_pillows_pixels(tmp_path):
    "A grey JPEG is handed over undecoded (its box decoded alone), and both pipelines give timm's pixels: Pillow's grey as RGB."
    from PIL import Image
    from timmdata.tools.sample_data import make_sample_image
    for k, size in enumerate(((131, 97), (426, 320), (500, 333))):
        (tmp_path / 'c').mkdir(exist_ok=True)
        make_sample_image(k, 1, size).convert('L').save(tmp_path / 'c' / f'{k}.jpg', quality=90)
    for training in (True, False):
        t = create_transform(160, is_training=training, use_prefetcher=True, color_jitter=0)
        fast, full = ImageDataset(str(tmp_path)), ImageDataset(str(tmp_path))
        fast.transform = full.transform = t
        full._encoded = False  # decoded whole first, then the same transform
        for i in range(len(fast)):
            data = open(fast.filename(i, absolute=True), 'rb').read()
            assert isinstance(fast.decode_sample(data), EncodedJpeg)  # the crop path, not a whole decode
            random.seed(i); torch.manual_seed(i); a, _ = fast[i]
            random.seed(i); torch.manual_seed(i); b, _ = full[i]
            assert torch.equal(a, b), (training, i)
            if not training:  # PIL's own steps on Pillow's decode converted to RGB: timm's pixels
                assert torch.equal(a, t(Image.open(fast.filename(i, absolute=True)).convert('RGB')))

def test_cmyk_jpegs_take_the_crop_path_with_pillows_pixels(tmp_path):
    "A CMYK JPEG (and a YCCK one: Adobe transform 2) is handed over undecoded, and both pipelines give timm's pixels: Pillow's convert('RGB')."
    from PIL import Image
    from timmdata.tools.photos import adobe_transform
    from timmdata.tools.sample_data import make_sample_image
    (tmp_path / 'c').mkdir()
    for k, size in enumerate(((131, 97), (426, 320), (500, 333))):
        path = tmp_path / 'c' / f'{k}.jpg'
        make_sample_image(k, 3, size).convert('CMYK').save(path, quality=90)
        data = path.read_bytes()
        ycck = adobe_transform(data, 2)  # the Adobe marker's transform byte: 0 (CMYK) -> 2 (YCCK)
        assert [decode.NATIVE.loaded.header(d)[3] for d in (data, ycck)] == [4, 5]  # libjpeg's JCS_CMYK, JCS_YCCK
        (tmp_path / 'c' / f'{k}y.jpg').write_bytes(ycck)
    assert decode.cmyk_like_pillow()
    for training in (True, False):
        t = create_transform(160, is_training=training, use_prefetcher=True, color_jitter=0)
        fast, full = ImageDataset(str(tmp_path)), ImageDataset(str(tmp_path))
        fast.transform = full.transform = t
        full._encoded = False  # decoded whole first, then the same transform
        assert len(fast) == 6
        for i in range(len(fast)):
            data = open(fast.filename(i, absolute=True), 'rb').read()
            enc = fast.decode_sample(data)
            assert isinstance(enc, EncodedJpeg) and enc.components == 4  # the crop path, not a whole decode
            random.seed(i); torch.manual_seed(i); a, _ = fast[i]
            random.seed(i); torch.manual_seed(i); b, _ = full[i]
            random.seed(i); torch.manual_seed(i); c = t(Image.open(fast.filename(i, absolute=True)).convert('RGB'))
            assert torch.equal(a, b) and torch.equal(a, c), (training, i)  # PIL's own steps on Pillow's RGB: timm's pixels
