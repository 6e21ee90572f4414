"""The device-decode path (issue 17), through its CPU run (`decode_device='cpu'`: TorchCodec's CPU decoder, the same
batched code): eval batches against create_loader's CPU path within a stated bound, the train plans' random draws
against timm's, the CPU fallback for PNG / CMYK / grayscale JPEGs counted, shapes, dtypes and layouts, the errors;
and `cuda`-marked tests of the real GPU path (skipped without a GPU)."""
import inspect, io, math, random
import numpy as np
import pytest
import torch
from PIL import Image

from timmdata.pixels import decode
from timmdata.dataset import ImageDataset
from timmdata.pixels.decode import ImageDecodeError, encoded_jpeg
from timmdata.loader import create_loader
from timmdata.mixup import FastCollateMixup
from timmdata.tools.sample_data import make_sample_image
from timmdata.config import IMAGENET_DEFAULT_STD
from _helpers import run_epochs as _run, same_batches as _same

gd = pytest.importorskip('timmdata.engine.gpu_decode')
import timmdata.scheduled_sampler as tss  # where the loaders' sampler chain takes timm's sampler
if decode.torchcodec_jpeg() is None: pytest.skip('torchcodec is not installed', allow_module_level=True)
from timmdata.engine.gpu_decode import DeviceDecodeTransform, create_device_decode_loader, decode_jpegs, device_decode_collate

LEVEL = 1 / (255 * min(IMAGENET_DEFAULT_STD))  # one uint8 level, normalised
NV_MAX_DIFF, NV_MEAN_DIFF = 0.5, 1.0 * LEVEL  # nvJPEG against the CPU path's eval batches: see the test
MAX_DIFF, MEAN_DIFF = LEVEL + 1e-4, 0.25 * LEVEL  # the bound: at most one level, a quarter of one on average
needs_native = pytest.mark.skipif(decode.native is None, reason='the extension reads the JPEG headers in the workers')


def _enc(img, fmt, **kw):
    b = io.BytesIO(); img.save(b, fmt, **kw); return b.getvalue()

@pytest.fixture(scope='module')
def mixed_root(tmp_path_factory):
    "Two classes: colour JPEGs (500x375 and 375x500), a PNG, a CMYK JPEG and a grayscale JPEG."
    root = tmp_path_factory.mktemp('mixed')
    for c in ('a', 'b'): (root / c).mkdir()
    for k in range(5):
        img = make_sample_image(k, k, (500, 375) if k % 2 else (375, 500))
        (root / 'ab'[k % 2] / f'{k}.jpg').write_bytes(_enc(img, 'JPEG', quality=90))
    img = make_sample_image(7, 1, (480, 360))
    (root / 'a' / 'p.png').write_bytes(_enc(img, 'PNG'))
    (root / 'b' / 'cmyk.jpg').write_bytes(_enc(img.convert('CMYK'), 'JPEG', quality=90))
    (root / 'b' / 'gray.jpg').write_bytes(_enc(img.convert('L'), 'JPEG', quality=90))
    return root


def _compare_eval(root, device, **kw):
    dl = create_device_decode_loader(ImageDataset(root, split='validation'), 160, 8, decode_device=device, num_workers=0, **kw)
    cl = create_loader(ImageDataset(root, split='validation'), 160, 8, device=device, num_workers=0,
                       **{k: v for k, v in kw.items() if k in ('crop_pct', 'interpolation', 'channels_last', 'img_dtype')})
    n, worst, total = 0, 0., 0.
    for (x, y), (xr, yr) in zip(dl, cl, strict=True):
        assert x.shape == xr.shape and x.dtype == xr.dtype and x.device == xr.device and torch.equal(y.cpu(), yr.cpu())
        d = (x.float() - xr.float()).abs()
        worst, total, n = max(worst, d.max().item()), total + d.sum().item(), n + d.numel()
    return dl, worst, total / n


@needs_native
@pytest.mark.parametrize('kw', [{}, dict(crop_pct=1.0, interpolation='bicubic')])
def test_eval_batches_match_the_cpu_path_within_the_bound(sample_root, kw):
    dl, worst, mean = _compare_eval(sample_root, 'cpu', **kw)
    print(f'eval {kw}: max abs diff {worst:.4f}, mean {mean:.6f} (one uint8 level = {LEVEL:.4f})')
    assert worst <= MAX_DIFF and mean <= MEAN_DIFF, (worst, mean)
    assert dl.cpu_fallbacks == 0 and dl.samples == 30


def test_create_loader_decode_device_is_the_device_path(sample_root):
    "create_loader(..., decode_device=...) hands every argument to create_device_decode_loader: the same batches."
    mk = lambda f: f(ImageDataset(sample_root, split='validation'), 96, 8, num_workers=0, crop_pct=1.0, decode_device='cpu')
    for (x, y), (xr, yr) in zip(mk(create_loader), mk(create_device_decode_loader), strict=True):
        assert torch.equal(x, xr) and torch.equal(y, yr)
    with pytest.raises(ValueError, match='auto_augment'):  # RandAugment and AugMix run on the device batch; AutoAugment does not
        create_loader(ImageDataset(sample_root), 96, 8, is_training=True, auto_augment='original', decode_device='cpu')


def test_cpu_fallback_for_png_cmyk_gray_is_counted_and_faithful(mixed_root):
    dl, worst, mean = _compare_eval(mixed_root, 'cpu')
    assert worst <= MAX_DIFF and mean <= MEAN_DIFF, (worst, mean)
    n_fallback = 3 if decode.native is not None else 8  # without the extension every sample is decoded in the worker
    assert (dl.cpu_fallbacks, dl.samples) == (n_fallback, 8)


def _timm_draws(img, n, interpolation, hflip, vflip, seed):
    "timm's train transform's random draws, in its order: RRC box, interpolation, horizontal flip, vertical flip."
    timm_tf = pytest.importorskip('timm.data.transforms')
    rrc = timm_tf.RandomResizedCropAndInterpolation(160, interpolation=interpolation)
    random.seed(seed); torch.manual_seed(seed)
    out = []
    for _ in range(n):
        box = rrc.get_params(img, rrc.scale, rrc.ratio)
        interp = random.choice(rrc.interpolation) if isinstance(rrc.interpolation, (tuple, list)) else rrc.interpolation
        fh = bool(torch.rand(1) < hflip) if hflip > 0 else False
        fv = bool(torch.rand(1) < vflip) if vflip > 0 else False
        out.append((*box, int(fh), int(fv), ['bilinear', 'bicubic'].index(timm_tf.interp_mode_to_str(interp))))
    return out

@pytest.mark.parametrize('interpolation,hflip,vflip', [('random', 0.5, 0.2), ('bilinear', 0.5, 0.), ('bicubic', 0., 0.)])
def test_train_plans_are_timms_draws(interpolation, hflip, vflip):
    "Over a stream of 2000 samples seeded once: the boxes, interpolations and flips are those of timm's train transform."
    img = Image.new('RGB', (500, 375))
    ref = _timm_draws(img, 2000, interpolation, hflip, vflip, seed=3)
    t = DeviceDecodeTransform(160, is_training=True, interpolation=interpolation, hflip=hflip, vflip=vflip)
    random.seed(3); torch.manual_seed(3)
    ours = [t.plan(torch.empty(0, 375, 500)) for _ in range(2000)]
    assert [p[:4] + p[8:] for p in ours] == ref
    assert all(p[4:8] == (160, 160, 0, 0) for p in ours)
    # and the statistics they make (what a training run sees), against timm's on an independent stream (another seed)
    other = _timm_draws(img, 2000, interpolation, hflip, vflip, seed=11)
    def stats(plans):
        a = np.array([p[2] * p[3] / (375 * 500) for p in plans]); r = np.log([p[3] / p[2] for p in plans])
        q = np.linspace(0.1, 0.9, 9)
        return np.quantile(a, q), np.quantile(r, q), np.mean([p[-3] for p in plans]), np.mean([p[-2] for p in plans])
    (qa, qr, fh, fv), (qa2, qr2, fh2, fv2) = stats(ours), stats(other)
    print(f'area quantiles ours {np.round(qa, 3)} timm {np.round(qa2, 3)}; flip rate {fh:.3f} vs {fh2:.3f}')
    assert np.abs(qa - qa2).max() < 0.04 and np.abs(qr - qr2).max() < 0.05, (qa, qa2, qr, qr2)
    assert abs(fh - hflip) < 0.04 and abs(fv - vflip) < 0.04 and abs(fh2 - hflip) < 0.04
    assert min(p[2] * p[3] for p in ours) >= 0.079 * 375 * 500 and all(p[2] <= 375 and p[3] <= 500 for p in ours)

@needs_native
def test_train_batches_pixels_follow_their_plans(sample_root):
    "A train batch through the device step equals the CPU transform applied with the same plans (within the bound)."
    ds = ImageDataset(sample_root, split='train', transform=DeviceDecodeTransform(128, is_training=True, interpolation='random'))
    random.seed(0); torch.manual_seed(0)
    samples = [ds[i] for i in range(0, 60, 4)]
    packed, _ = device_decode_collate(samples)
    x, slow = gd.decode_batch(packed, (128, 128), torch.device('cpu'))
    from timmdata.transforms import crop_box, resize_exact
    for k, ((_, p, *_), _) in enumerate(samples):
        img = decode.decode_image(ds.reader[k * 4][0], to_tensor=True)
        ref = resize_exact(crop_box(img, *p[:4]), (128, 128), gd.INTERPS[p[10]])
        if p[8]: ref = ref.flip(-1)
        if p[9]: ref = ref.flip(-2)
        d = (x[k].int() - ref.int()).abs()
        assert d.max() <= 1 and d.float().mean() < 0.25, (k, d.max(), d.float().mean())
    assert slow == []

def test_train_loader_shapes_dtypes_layout_and_batch_ops(sample_root):
    ds = ImageDataset(sample_root, split='train')
    mix = FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=10, label_smoothing=0.1)
    dl = create_device_decode_loader(ds, (3, 96, 112), 16, is_training=True, decode_device='cpu', num_workers=1,
                                     re_prob=0.5, color_jitter=0.4, channels_last=True, img_dtype=torch.float16,
                                     collate_fn=mix, seed=0)
    batches = list(dl)
    assert len(batches) == len(dl) == 60 // 16
    for x, y in batches:
        assert x.shape == (16, 3, 96, 112) and x.dtype == torch.float16 and x.device.type == 'cpu'
        assert x.is_contiguous(memory_format=torch.channels_last)
        assert y.shape == (16, 10) and torch.allclose(y.float().sum(1), torch.ones(16))  # mixed soft targets
        assert torch.isfinite(x.float()).all()
    dl.set_epoch(1)
    assert dl.mixup_enabled; dl.mixup_enabled = False; assert not mix.mixup_enabled

def test_worker_batches_come_through_the_bytes_ring_and_equal_in_process_ones(mixed_root):
    "Two workers send each batch's JPEG bytes in a slot of the ring (the PNG, CMYK and grey rows' pixels by value):"
    "the batches are those made with no workers, bit for bit; every slot is given back."
    kw = dict(is_training=True, decode_device='cpu', seed=4, re_prob=0.25, color_jitter=0.4)
    mk = lambda nw: create_device_decode_loader(ImageDataset(mixed_root), 64, 3, num_workers=nw, **kw)
    a, b = mk(0), mk(2)
    ring = b.step.collate.ring
    assert a.step.collate.ring is None and ring is not None
    assert b.stats().info['decode']['bytes'].startswith('batch ring: ')
    got = _run(b, 2)[0]
    _same(_run(a, 2)[0], got)
    assert len(got) == 2 * len(b) == 2 * (8 // 3)
    assert ring.counts == {'ring': len(got), 'fresh': 0} and int(ring.busy.sum()) == 0
    assert b.stats().info['decode']['bytes in the ring'] == 1.0 and 'bytes in the ring' not in a.stats().info['decode']


def test_pinned_batches_have_no_bytes_ring_and_say_why(sample_root, monkeypatch):
    "With pin_memory (on a CUDA machine) torch's pin thread copies every batch anyway: no ring, and the stats say why."
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)  # the loader is made, never iterated
    dl = create_device_decode_loader(ImageDataset(sample_root, split='train'), 64, 4, is_training=True,
                                     decode_device='cpu', num_workers=2, pin_memory=True)
    assert dl.step.collate.ring is None and dl.loader.pin_memory
    assert dl.stats().info['decode']['bytes'].startswith('no batch ring: pin_memory=True')


def test_skipped_bad_samples_are_dropped_not_decoded(tmp_path):
    root = tmp_path / 'ds' / 'c'; root.mkdir(parents=True)
    good = _enc(make_sample_image(0, 0, (200, 150)), 'JPEG', quality=90)
    for k in range(3): (root / f'{k}.jpg').write_bytes(good)
    (root / 'cut.jpg').write_bytes(good[:len(good) // 2])
    ds = ImageDataset(tmp_path / 'ds', bad_sample='skip')
    dl = create_device_decode_loader(ds, 64, 8, decode_device='cpu', num_workers=0)
    with pytest.warns(UserWarning, match='cut.jpg'):
        (x, y), = list(dl)
    assert len(x) == 3 and ds.bad_samples == [ds.filenames(basename=True).index('cut.jpg')]

def test_device_decoder_failure_falls_back_per_image_or_names_the_row(monkeypatch):
    good = _enc(make_sample_image(0, 0, (64, 48)), 'JPEG', quality=90)
    real = decode.torchcodec_jpeg()
    def picky(srcs, **kw):  # a stand-in for nvJPEG refusing the progressive JPEG (and so the whole batch)
        if any(bytes(s[:3].numpy()) == b'\xff\xd8\xff' and b'\xff\xc2' in bytes(s.numpy()) for s in srcs): raise RuntimeError('x.cpp:1, unsupported')
        return real(srcs, **kw)
    monkeypatch.setattr(gd, 'torchcodec_jpeg', lambda: picky)
    prog = _enc(make_sample_image(0, 0, (64, 48)), 'JPEG', quality=90, progressive=True)
    srcs = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in (good, prog, good)]
    imgs, slow = decode_jpegs(srcs, torch.device('cpu'))
    assert slow == [1] and all(torch.equal(i, real(d)) for i, d in zip(imgs, (good, prog, good), strict=True))
    junk = torch.frombuffer(bytearray(b'\xff\xd8\xff\xc2' + b'\x00' * 50), dtype=torch.uint8)
    with pytest.raises(ImageDecodeError, match='batch row 1: no decoder reads this JPEG'):
        decode_jpegs([srcs[0], junk], torch.device('cpu'))

def test_unsupported_arguments_are_named(sample_root):
    ds = ImageDataset(sample_root, split='validation')
    mk = lambda **kw: create_device_decode_loader(ds, 64, 4, decode_device='cpu', num_workers=0, **kw)
    for kw, msg in [(dict(auto_augment='original', is_training=True), 'only RandAugment'), (dict(crop_mode='border'), "crop_mode='border'"),
                    (dict(train_crop_mode='rkrc', is_training=True), "train_crop_mode='rkrc'"), (dict(num_aug_splits=2), "'num_aug_splits'"),
                    (dict(interpolation='lanczos'), "'lanczos'"), (dict(num_workerz=1), "'num_workerz'"),
                    (dict(device='cuda:0' if torch.cuda.is_available() else 'meta'), 'device'),
                    (dict(collate_fn=lambda b: b), 'collate_fn must be None or a Mixup'),
                    (dict(collate_fn=FastCollateMixup(mode='half', num_classes=10)), "mode='half'"),
                    ]:
        with pytest.raises((ValueError, TypeError), match=msg): mk(**kw)
    with pytest.raises(ValueError, match="'auto' is not offered"): create_device_decode_loader(ds, 64, 4, decode_device='auto')

def test_every_create_loader_argument_is_taken_or_refused(sample_root):
    "create_loader(..., decode_device=...) passes on each argument the device path takes; any other, off its default, is refused by name."
    ours, odd = set(inspect.signature(create_device_decode_loader).parameters), object()
    others = [n for n in inspect.signature(create_loader).parameters if n not in ours]
    assert 'grayscale_prob' in others and 'worker_mode' in others and 'num_workers' not in others and 'auto_augment' in ours
    choices = ('input_size_choices', 'batch_size_choices')
    inert = [n for n in others if gd._WHY.get(n) is gd._SCHED and n not in choices]  # the schedule's other options
    assert 'batch_choice_seed' in inert and len(inert) >= 5
    for name in others:
        ds = ImageDataset(sample_root, split='validation')
        if name in inert:  # timm's train.py passes them always: without choices they are unused, so not refused
            assert len(create_loader(ds, 64, 4, decode_device='cpu', num_workers=0, **{name: odd})) > 0
            continue
        with pytest.raises((ValueError, TypeError, NotImplementedError), match=name):
            create_loader(ds, 64, 4, decode_device='cpu', num_workers=0, **{name: odd})

def test_missing_torchcodec_is_an_install_hint(sample_root, monkeypatch):
    monkeypatch.setattr(gd, 'torchcodec_jpeg', lambda: None)
    with pytest.raises(ImportError, match=r"timmdata\[codec\]"):
        create_device_decode_loader(ImageDataset(sample_root, split='validation'), 64, 4, decode_device='cpu')


# ---------- on a GPU (skipped without one) ----------

@pytest.mark.cuda
@needs_native
def test_cuda_eval_batches_match_the_cpu_path(sample_root):
    dl, worst, mean = _compare_eval(sample_root, 'cuda')
    print(f'nvJPEG eval: max abs diff {worst:.4f}, mean {mean:.6f}')
    # nvJPEG's IDCT and chroma upsampling are not libjpeg-turbo's. Measured on an H200 (nvJPEG's hardware decoder,
    # torch 2.11, TorchCodec 0.16; bench/nvjpeg_diff.py): raw decodes differ by up to 77 levels at sharp colour edges (mean 1.3 levels, the
    # same with torchvision's nvJPEG), these eval batches by 0.331 (19 levels) at most and 0.0084 (0.48 level) on average.
    # The bounds: 1.5x the measured maximum, 2x the measured mean.
    assert worst <= NV_MAX_DIFF and mean <= NV_MEAN_DIFF, (worst, mean)
    assert dl.cpu_fallbacks == 0 and dl.stream is not None  # the side stream was used

@pytest.mark.cuda
@needs_native
@pytest.mark.parametrize('is_training', [True, False])
def test_cuda_staged_pipeline_equals_the_stages_in_turn(sample_root, is_training):
    "The pipeline (decode, resize and batch ops on streams of their own, overlapping across batches) gives the batches the stages run one after another give."
    def run(staged):
        dl = create_device_decode_loader(ImageDataset(sample_root, split='train' if is_training else 'validation'), 128,
                                         8, is_training=is_training, decode_device='cuda', num_workers=0, seed=5)
        if not staged:
            dl.step.stages = dl.feeder.lane.stages = ()
        return dl, [(x.cpu(), y.cpu()) for x, y in dl]
    dl, got = run(True)
    _, plain = run(False)
    assert len(got) == len(plain) > 2 and sorted(dl.feeder.lane.streams) == ['decode', 'ops', 'resize']
    for (a, y), (b, z) in zip(got, plain):
        assert torch.equal(y, z) and torch.equal(a, b)
    print(f"staged device decode: bitstreams {dl.stats().info['decode']['bitstreams']!r}")


@pytest.mark.cuda
def test_cuda_fallback_counted_and_batches_on_the_device(mixed_root):
    dl = create_device_decode_loader(ImageDataset(mixed_root), 128, 4, decode_device='cuda', num_workers=0, channels_last=True)
    out = list(dl)
    assert all(x.device.type == 'cuda' and x.is_contiguous(memory_format=torch.channels_last) for x, _ in out)
    assert all(y.device.type == 'cuda' for _, y in out)
    assert dl.cpu_fallbacks >= 1 and dl.samples == 8  # CMYK at least: nvJPEG does not take it; PNG always

@pytest.mark.cuda
@needs_native
def test_cuda_train_epochs_keep_memory_flat(sample_root):
    """No leak: with no batch held, the memory in use is the same after every epoch, but for the resize's taps kept on the
    device (bounded by its TapCache's max_bytes); the reserved memory stays bounded."""
    dl = create_device_decode_loader(ImageDataset(sample_root, split='train'), 128, 16, is_training=True,
                                     decode_device='cuda', num_workers=2, re_prob=0.25)
    used, reserved = [], []
    for epoch in range(6):
        dl.set_epoch(epoch)
        for x, y in dl: (x.float().mean() + y.float().sum()).item()
        x = y = None
        torch.cuda.synchronize(); reserved.append(torch.cuda.memory_reserved())
        taps = dl.step.taps.device_bytes('cuda')  # tables that grow as new box sizes come, up to max_bytes
        assert 0 < taps <= dl.step.taps.max_bytes
        used.append(torch.cuda.memory_allocated() - taps)
    assert len(used) == 6 and len(set(used[1:])) == 1, used  # after the first epoch's warm-up (generators, streams)
    # the caching allocator keeps blocks of the batches' varying box sizes: bounded, not flat
    assert max(reserved[1:]) <= 1.5 * reserved[1], reserved


@pytest.mark.cuda
@needs_native
@pytest.mark.parametrize('is_training', [False, True])
def test_cuda_decode_thread_beside_a_busy_consumer(sample_root, is_training):
    """The step in its own thread and stream while the consumer's stream is kept busy (a spin kernel, then a reduction
    of the batch, as a training step queues its work): every target arrives intact, every pixel finite; evaluation's
    batches match the CPU path within nvJPEG's bound. Corrupt batches here were a NaN loss and a gather out of range
    in timm's train.py."""
    ds = ImageDataset(sample_root, split='train' if is_training else 'validation')
    want = sorted(int(t) for t in ds.reader.targets)
    dl = create_device_decode_loader(ds, 128, 8, is_training=is_training, decode_device='cuda', num_workers=2)
    ref = None if is_training else create_loader(ImageDataset(sample_root, split='validation'), 128, 8, device='cuda',
                                                   num_workers=0)
    got, worst = [], 0.
    for _ in range(3):
        it_ref = iter(ref) if ref is not None else None
        seen = []
        for x, y in dl:
            torch.cuda._sleep(20_000_000)  # the consumer's stream busy while the thread decodes the next batch
            scratch = torch.randn(1 << 20, device='cuda')  # and the allocator churned on the consumer's stream
            s = (x.float().sum(dim=(1, 2, 3)) + scratch.sum() * 0).cpu()
            assert torch.isfinite(s).all()
            seen.extend(y.tolist())
            if it_ref is not None:
                xr, yr = next(it_ref)
                assert torch.equal(y.cpu(), yr.cpu())
                worst = max(worst, (x.float() - xr.float()).abs().max().item())
        assert len(seen) == (len(ds) // 8 * 8 if is_training else len(ds))  # training drops the short last batch
        got.append(sorted(seen))
    for g in got:  # every target one of the dataset's, each at most as often as it is there
        left = list(want)
        for t in g:
            left.remove(t)  # ValueError: a target the dataset does not hold (or one time too many)
        assert len(left) == len(want) - len(g)
    assert worst <= NV_MAX_DIFF, worst
    assert dl.stream is not None and dl.samples == 3 * len(got[0])



@pytest.mark.cuda
def test_cuda_worker_batches_thread_beside_a_busy_consumer(sample_root):
    """The workers' path on a GPU: its step (copy, jitter, normalise, erase) in its own thread and stream, from pageable
    memory (timm's train.py does not pin) while the consumer's stream is busy: the same batches as a pinned loader's
    read with nothing else running."""
    kw = dict(is_training=True, num_workers=2, seed=3, device='cuda', re_prob=0.5, re_mode='pixel', color_jitter=0.4)
    busy = create_loader(ImageDataset(sample_root, split='train'), 96, 8, pin_memory=False, **kw)
    calm = create_loader(ImageDataset(sample_root, split='train'), 96, 8, pin_memory=True, **kw)
    assert busy.feeder.lane.__class__.__name__ == 'ThreadLane'
    got = []
    for x, y in busy:
        torch.cuda._sleep(20_000_000)
        scratch = torch.randn(1 << 20, device='cuda')
        got.append((x.clone(), y.clone(), scratch.sum()))
    want = [(x.clone(), y.clone()) for x, y in calm]
    assert len(got) == len(want) == len(busy) > 0
    for (x, y, _), (xr, yr) in zip(got, want):
        assert torch.equal(y, yr) and torch.equal(x, xr)
    # the unpinned loader's batches came through its ring, page-locked: copies by DMA, each slot given back only after
    # its copy (a slot rewritten early would show above as a batch unlike the pinned loader's)
    ring = busy.step.collate
    assert type(ring).__name__ == 'BatchRing' and ring._locked is True and ring.counts['ring'] > 0

# ---------- resumable and distributed (timmdata.engine.resume), on the CPU path ----------

from torch.utils.data.distributed import DistributedSampler
from timmdata.distributed_sampler import OrderedDistributedSampler, RepeatAugSampler
from timmdata.engine.resume import ResumeStateError
from timmdata.tools.sample_data import make_sample_dataset
from _datasets import IndexDataset

RB = 4  # batch size of the resume tests

@pytest.fixture(scope='module')
def small_root(tmp_path_factory):
    "3 classes: 18 small train JPEGs (random crops, flips and erasing show in the pixels), 9 val ones (an odd count)."
    return make_sample_dataset(tmp_path_factory.mktemp('gd_resume') / 'data', n_train=6, n_val=3, classes=['a', 'b', 'c'],
                               size=(40, 32), num_workers=0)

def _dd(root, split='train', sampler=None, monkeypatch=None, bs=RB, **kw):
    "A device-decode (CPU) train loader with every random step on: crops/flips, batch jitter, erasing ('pixel'), mixup."
    if sampler is not None: monkeypatch.setattr(tss, 'timm_sampler', lambda ds, *a: sampler(ds))
    args = dict(is_training=True, num_workers=0, decode_device='cpu', re_prob=0.5, re_mode='pixel', re_count=2,
                color_jitter=0.4, interpolation='random', vflip=0.3,
                collate_fn=FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=18, label_smoothing=0.1))
    args.update(kw)
    return create_device_decode_loader(IndexDataset(str(root / split)), 24, bs, **args)

@pytest.mark.slow
@pytest.mark.parametrize('nw', [0, 2])
def test_device_decode_resume_bit_identical(small_root, nw):
    "Cut at a mid-epoch batch and at the epoch's end, resumed in a fresh loader after another torch seed: the same batches."
    kw = dict(num_workers=nw, persistent_workers=True)
    torch.manual_seed(1)
    ref, _ = _run(_dd(small_root, **kw), 2)
    assert len(ref) == 2 * (18 // RB) and not torch.equal(ref[0][0], ref[4][0])
    assert all(y.shape == (RB, 18) and not torch.equal(y, y.round()) for _, y in ref)  # mixed, smoothed targets
    for stop in (1, 4):  # mid-epoch; the epoch's last batch (4 of 18 // 4)
        torch.manual_seed(1)
        head, sd = _run(_dd(small_root, **kw), 2, stop=stop)
        assert sd['epoch'] == 0 and sd['batches_delivered'] == stop and sd['done'] == (stop == 4)
        torch.manual_seed(99); np.random.seed(99); random.seed(99)  # a fresh process: other global states; the saved seed wins
        done = stop // 4
        tail, _ = _run(_dd(small_root, **kw), 2 - done, start=done, sd=sd)
        _same(head + tail, ref)

def test_device_decode_resume_errors_and_seed(small_root):
    "An explicit seed makes runs repeatable; a state from another seed or batch size is refused, by field."
    a, _ = _run(_dd(small_root, seed=7), 1)
    b, sd = _run(_dd(small_root, seed=7), 1, stop=2)
    _same(a[:2], b)
    with pytest.raises(ResumeStateError, match='seed: saved 7'): _dd(small_root, seed=8).load_state_dict(sd)
    with pytest.raises(ResumeStateError, match='batch_size: saved 4'): _dd(small_root, bs=3).load_state_dict(sd)

def _ranks(root, monkeypatch, make, split='train', W=2, **kw):
    "One loader per simulated rank (a sampler built for that rank)."
    out = []
    for r in range(W):
        out.append(_dd(root, split, lambda ds, r=r: make(ds, W, r), monkeypatch, seed=5, **kw))
        monkeypatch.undo()
    return out

def test_device_decode_two_ranks_read_every_sample_once(small_root, monkeypatch):
    mk = lambda ds, W, r: DistributedSampler(ds, num_replicas=W, rank=r, seed=4)
    for epoch in (0, 1):
        ys = []
        for dl in _ranks(small_root, monkeypatch, mk, bs=3, collate_fn=None):
            dl.set_epoch(epoch)
            ys.append([int(t) for _, y in dl for t in y])
        assert len(ys[0]) == len(ys[1]) == 9 and sorted(ys[0] + ys[1]) == list(range(18)), ys
    # eval: ordered, padded to equal shares (9 samples on 2 ranks: one repeat)
    mk = lambda ds, W, r: OrderedDistributedSampler(ds, num_replicas=W, rank=r)
    ev = [[int(t) for _, y in dl for t in y] for dl in _ranks(small_root, monkeypatch, mk, 'val', bs=2, is_training=False, collate_fn=None)]
    assert ev == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 0]], ev  # timm's deal: rank r takes every W-th of the padded order

@pytest.mark.parametrize('kind', ['distributed', 'repeat_aug'])
def test_device_decode_rank_resumes_exactly(small_root, monkeypatch, kind):
    mk = {'distributed': lambda ds, W, r: DistributedSampler(ds, num_replicas=W, rank=r, seed=4),
          'repeat_aug': lambda ds, W, r: RepeatAugSampler(ds, num_replicas=W, rank=r, num_repeats=3, selected_round=0)}[kind]
    sampler = lambda ds: mk(ds, 2, 1)  # rank 1 of 2
    ref, _ = _run(_dd(small_root, 'train', sampler, monkeypatch, bs=3, seed=5), 2)
    assert len(ref) == 6
    head, sd = _run(_dd(small_root, 'train', sampler, monkeypatch, bs=3, seed=5), 2, stop=2)
    assert sd['world_size'] == 2 and sd['sampler'] != 'sequential'
    tail, _ = _run(_dd(small_root, 'train', sampler, monkeypatch, bs=3, seed=5), 2, sd=sd)
    _same(head + tail, ref)

def test_device_decode_refusals_of_the_resumable_path(small_root):
    with pytest.raises(ValueError, match='num_aug_repeats=3 needs distributed=True'):
        _dd(small_root, num_aug_repeats=3)
    with pytest.raises(TypeError, match="'use_multi_epochs_loader'"): _dd(small_root, use_multi_epochs_loader=True)  # create_loader refuses it by name
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self): return iter(())
    with pytest.raises(ValueError, match='Stream is a stream'):
        create_device_decode_loader(Stream(), 24, 4, decode_device='cpu')

@pytest.mark.cuda
@pytest.mark.parametrize('re_mode', ['pixel', 'const'])
def test_cuda_device_decode_resume_one_batch_ahead(small_root, re_mode):
    "On CUDA the loader prepares a batch ahead: the state counts what it handed out; 'pixel' noise from a seeded CUDA generator."
    kw = dict(decode_device='cuda', num_workers=2, re_mode=re_mode)
    torch.manual_seed(1)
    ref, _ = _run(_dd(small_root, **kw), 2)
    torch.manual_seed(1)
    head, sd = _run(_dd(small_root, **kw), 2, stop=3)
    assert sd['batches_delivered'] == 3
    torch.manual_seed(99); torch.cuda.manual_seed(99); np.random.seed(99); random.seed(99)
    tail, _ = _run(_dd(small_root, **kw), 2, sd=sd)
    _same(head + tail, ref)
