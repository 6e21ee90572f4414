"""Decoding at scale and on hostile input (issue 14): the pixel limit on every decode path (decompression bombs), the
native code's argument checks and buffer handling, libjpeg's warnings counted instead of printed, and the build's
fallback status. Fast: a few seconds in all (the build test is marked slow)."""
import io, os, random, shutil, subprocess, sys, warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import timmdata
from timmdata import create_transform
from timmdata.pixels import decode
from timmdata.dataset import ImageDataset
from timmdata.pixels.decode import (EncodedJpeg, ImageDecodeError, CorruptJpegWarning, decode_image, encoded_jpeg,
                             jpeg_warnings, set_max_image_pixels)
from timmdata.tools.sample_data import make_sample_image

native = decode.native
needs_native = pytest.mark.skipif(native is None, reason='the timmdata._native extension is not built')
REPO = Path(__file__).resolve().parents[1]


def small_jpeg(size=(16, 16), quality=50) -> bytes:
    b = io.BytesIO(); make_sample_image(3, 0, size).save(b, 'JPEG', quality=quality); return b.getvalue()

def claim(data: bytes, h: int, w: int) -> bytes:
    "The JPEG with its SOF0 frame header edited to claim h x w pixels (the data stays that of the small image)."
    d = bytearray(data); sof = d.index(b'\xff\xc0'); d[sof + 5:sof + 9] = h.to_bytes(2, 'big') + w.to_bytes(2, 'big')
    return bytes(d)

BOMB = claim(small_jpeg(), 60000, 60000)  # about 600 bytes that claim 3.6 billion pixels

@contextmanager
def data_limit(extra_gb=2):
    "Cap this process's data segment (heap and private mappings) at its current size + extra_gb: a bomb that gets through fails fast."
    try: import resource
    except ImportError: yield; return
    try: vm = next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmData:'))
    except (OSError, StopIteration): yield; return
    old = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (vm + extra_gb * 2**30, old[1]))
    try: yield
    finally: resource.setrlimit(resource.RLIMIT_DATA, old)

@pytest.fixture
def pixel_limit():
    "set_max_image_pixels for one test; the old limit, PIL's and the environment restored afterwards."
    env, pil, old = os.environ.get('TIMMDATA_MAX_IMAGE_PIXELS'), Image.MAX_IMAGE_PIXELS, decode.MAX_IMAGE_PIXELS
    yield set_max_image_pixels
    decode.MAX_IMAGE_PIXELS, Image.MAX_IMAGE_PIXELS = old, pil
    if env is None: os.environ.pop('TIMMDATA_MAX_IMAGE_PIXELS', None)
    else: os.environ['TIMMDATA_MAX_IMAGE_PIXELS'] = env


# ---------- the pixel limit ----------

def test_bomb_is_small_and_claims_60000_squared():
    assert len(BOMB) < 1000 and decode.jpeg_header(BOMB)[1] == (60000, 60000)
    assert decode.MAX_IMAGE_PIXELS == Image.MAX_IMAGE_PIXELS  # the default is PIL's

@pytest.mark.parametrize('path', ['pil', 'tensor', 'torchcodec', 'encoded_jpeg', 'lying EncodedJpeg', 'native'])
def test_bomb_refused_on_every_decode_path(path, monkeypatch):
    if path in ('encoded_jpeg', 'lying EncodedJpeg', 'native') and native is None: pytest.skip('needs the extension')
    if path == 'torchcodec':
        if decode.torchcodec_jpeg() is None: pytest.skip('torchcodec is not installed')
        monkeypatch.setattr(decode.NATIVE, 'enabled', False)
        calls = []
        tc = decode.torchcodec_jpeg()
        monkeypatch.setattr(decode, '_TC', (lambda *a, **k: calls.append(a) or tc(*a, **k), 'torchcodec (counted)'))
        with pytest.raises(ImageDecodeError, match='claims 60000x60000'): decode_image(BOMB, to_tensor=True)
        assert calls == []  # refused before TorchCodec (which allocates the claimed size at once) was called
        assert decode_image(small_jpeg(), to_tensor=True).shape == (3, 16, 16) and len(calls) == 1  # and it is the path
    run = {'pil': lambda: decode_image(BOMB), 'tensor': lambda: decode_image(BOMB, to_tensor=True),
           'torchcodec': lambda: decode_image(BOMB, to_tensor=True), 'encoded_jpeg': lambda: encoded_jpeg(BOMB),
           'lying EncodedJpeg': lambda: EncodedJpeg(BOMB, 16, 16).decode_crop(0, 0, 8, 8)}
    with data_limit():
        if path == 'native':
            with pytest.raises(ValueError, match='claims 60000x60000 = 3600000000 pixels, over the limit of 1000000'):
                native.decode_crop(BOMB, 0, 0, 8, 8, 10**6)
            return
        with pytest.raises(ImageDecodeError, match='claims 60000x60000 = 3,600,000,000 pixels, over the limit'):
            run[path]()

@pytest.mark.parametrize('train', [True, False])
@pytest.mark.parametrize('policy', ['raise', 'skip'])
def test_bomb_in_a_dataset_is_a_named_error_or_a_counted_skip(tmp_path, train, policy):
    root = tmp_path / 'ds' / 'cls'; root.mkdir(parents=True)
    (root / 'a.jpg').write_bytes(small_jpeg((40, 30), 90)); (root / 'bomb.jpg').write_bytes(BOMB)
    ds = ImageDataset(tmp_path / 'ds', transform=create_transform(32, is_training=train), bad_sample=policy)
    i = ds.filenames(basename=True).index('bomb.jpg')
    with data_limit():
        if policy == 'raise':
            with pytest.raises(ImageDecodeError, match=f'sample {i} .*bomb.jpg.*60000x60000'): ds[i]
        else:
            with pytest.warns(UserWarning, match='bomb.jpg.*60000x60000'): assert ds[i] is None
            assert ds.bad_samples == [i]
        assert ds[1 - i][0].shape == (3, 32, 32)

@pytest.mark.slow
def test_limit_is_settable_and_inherited_by_spawned_workers(tmp_path, pixel_limit):
    root = tmp_path / 'ds' / 'cls'; root.mkdir(parents=True)
    for k in range(2): (root / f'{k}.jpg').write_bytes(small_jpeg((40, 30), 90))  # 1200 pixels each
    pil = Image.MAX_IMAGE_PIXELS
    assert pixel_limit(1000) == pil and decode.MAX_IMAGE_PIXELS == Image.MAX_IMAGE_PIXELS == 1000
    with pytest.raises(ImageDecodeError, match='40x30 = 1,200 pixels, over the limit of 1,000'): decode_image(root / '0.jpg')
    ds = ImageDataset(tmp_path / 'ds', bad_sample='skip')  # made after the setting: its workers follow it
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        out = [s for b in DataLoader(ds, batch_size=2, num_workers=1, multiprocessing_context='spawn', collate_fn=list) for s in b]
    assert out == [None, None] and ds.bad_samples == [0, 1]  # refused in a freshly spawned worker process
    pixel_limit(None)
    assert decode.MAX_IMAGE_PIXELS is None and decode_image(root / '0.jpg').size == (40, 30)
    with pytest.raises(ValueError, match='>= 1 or None'): pixel_limit(0)


# ---------- native code: argument checks, bounds, buffers ----------

@needs_native
@pytest.mark.parametrize('fn', ['channel_means', 'channel_means_nhwc'])
def test_channel_means_check_lengths(fn):
    f = getattr(native, fn)
    x, out = np.zeros(3 * 10, np.uint8), np.zeros(3, np.float32)
    f(x, out, 1, 3, 10)  # exact sizes: fine
    for args, msg in [((x[:-1], out, 1, 3, 10), 'x: buffer of 29 bytes'), ((x, out[:2], 1, 3, 10), 'out: buffer of 8 bytes'),
                      ((x, out, 2**62, 2**62, 2), 'bad sizes'), ((x, out, -1, 3, 10), 'bad sizes'), ((x, out, 1, 3, 0), 'bad sizes'),
                      ((x, out, 1, 0, 10), 'bad sizes')]:
        with pytest.raises(ValueError, match=msg): f(*args)

@needs_native
def test_channel_means_nhwc_more_than_four_channels():
    x = np.random.default_rng(0).integers(0, 256, (2, 7, 5), dtype=np.uint8)  # (n, hw, c) with c = 5
    out = np.zeros(10, np.float32)
    native.channel_means_nhwc(x, out, 2, 5, 7)
    assert np.allclose(out.reshape(2, 5), x.mean(1), atol=1e-4)

@needs_native
@pytest.mark.parametrize('fn', ['affine_u8', 'affine_u8_nhwc'])
def test_affine_checks_lengths(fn):
    f = getattr(native, fn)
    n, c, hw = 2, 3, 5
    x, m, b = np.zeros(n * c * hw, np.uint8), np.zeros(n * c * c, np.float32), np.zeros(n * c, np.float32)
    lo, hi, out = np.zeros(c, np.float32), np.ones(c, np.float32), np.zeros(n * c * hw, np.float32)
    f(x, m, b, lo, hi, out, n, c, hw)
    bad = {'x': x[:-1], 'm': m[:9], 'b': b[:3], 'lo': lo[:2], 'hi': hi[:1], 'out': out[:-1]}
    for name, short in bad.items():
        args = dict(x=x, m=m, b=b, lo=lo, hi=hi, out=out); args[name] = short
        with pytest.raises(ValueError, match=f'{fn} {name}: buffer of'):
            f(args['x'], args['m'], args['b'], args['lo'], args['hi'], args['out'], n, c, hw)
    for sizes in [(2**40, 2**40, 2**40), (-1, c, hw), (n, 0, hw), (n, c, -1)]:
        with pytest.raises(ValueError, match='bad sizes'): f(x, m, b, lo, hi, out, *sizes)

@needs_native
@pytest.mark.parametrize('box', [(2**31 - 10, 0, 100, 10), (0, 2**31 - 10, 10, 100), (5, 0, 2**31 - 1, 10),
                                 (0, 5, 10, 2**31 - 1), (-1, 0, 5, 5), (0, 0, 0, 5)])
def test_decode_crop_bounds_cannot_overflow(box):
    "top + height past 2^31 wrapped to a negative int: the old check passed and returned uninitialised memory."
    with pytest.raises(ValueError, match='is not inside the 16x16 image'): native.decode_crop(small_jpeg(), *box)

def _damaged_at_the_bottom(data: bytes) -> bytes:
    "A stray frame header two thirds into the image data: the rows above decode, a whole decode fails."
    sos = data.index(b'\xff\xda'); cut = sos + (len(data) - sos) * 2 // 3
    return data[:cut] + b'\xff\xc0\x00\x05\x00\xff\xff' + data[cut:]

@needs_native
def test_failed_decodes_release_every_buffer():
    "Every error path of decode_crop and header releases the input buffer and frees its output (no export left)."
    good = small_jpeg((64, 48), 90)
    cases = [(good[:300], (0, 0, 10, 10)), (b'\xff\xd8' + bytes(200), (0, 0, 10, 10)), (good, (0, 0, 100, 10)),
             (good, (2**31 - 10, 0, 100, 10)), (claim(good, 60000, 60000), (0, 0, 10, 10)),
             (_damaged_at_the_bottom(good), (0, 0, 48, 64))]
    rng = random.Random(0)
    for _ in range(200):
        d = bytearray(good)
        for _ in range(rng.randint(1, 8)): d[rng.randrange(len(d))] = rng.randrange(256)
        cases.append((bytes(d), (0, 0, 48, 64)))
    failures = 0
    for data, box in cases:
        buf = bytearray(data)
        refs = sys.getrefcount(buf)
        for call in (lambda: native.decode_crop(buf, *box, 10**6), lambda: native.header(buf)):
            try: call()
            except ValueError: failures += 1
        buf.append(0); buf.pop()  # raises BufferError while an export of buf is left
        assert sys.getrefcount(buf) == refs
    assert failures >= 6
    out = native.decode_crop(bytearray(good), 0, 0, 48, 64)[0]
    alone = bytearray(1)  # what getrefcount says of an object held by one name (2 before Python 3.14, 1 from 3.14: borrowed refs)
    assert sys.getrefcount(out) == sys.getrefcount(alone) and len(out) == 48 * 64 * 3  # the output lives only in what was returned

@needs_native
def test_whole_decode_fails_on_damage_a_top_crop_never_reads():
    "The rule stated in nbs/25c_dataset.ipynb: a crop above damaged rows decodes, a whole decode (evaluation) fails."
    data = _damaged_at_the_bottom(small_jpeg((64, 48), 90))
    enc = encoded_jpeg(data)
    assert enc.decode_crop(0, 0, 16, 16).shape == (3, 16, 16)
    with pytest.raises(ImageDecodeError, match='two SOF markers'): decode_image(data, to_tensor=True)
    with pytest.raises(ImageDecodeError): enc.decode()


# ---------- libjpeg's warnings ----------

@needs_native
def test_libjpeg_warnings_are_counted_not_printed(capfd, monkeypatch):
    good = small_jpeg((64, 48), 90)
    damaged = good[:len(good) * 2 // 3] + b'\xff\xd9'  # entropy data cut short, end marker put back: libjpeg warns
    monkeypatch.setattr(decode, '_warned', False)
    n0 = jpeg_warnings()[0]
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        for _ in range(3): decode_image(damaged, to_tensor=True)
        encoded_jpeg(damaged).decode_crop(0, 0, 48, 64)
    err = capfd.readouterr().err
    assert 'Corrupt JPEG' not in err and 'Premature end' not in err, err
    n, msg = jpeg_warnings()
    assert n == n0 + 4 and 'Corrupt JPEG data' in msg
    assert [type(x.message) for x in w] == [CorruptJpegWarning]  # one Python warning per process
    assert 'timmdata check' in str(w[0].message)


# ---------- the build's fallback, said in words ----------

@contextmanager
def extension_missing():
    "`from timmdata import _native` raises ImportError, as where the extension was not built."
    saved_mod, saved_attr = sys.modules.pop('timmdata._native', None), timmdata.__dict__.pop('_native', None)
    sys.modules['timmdata._native'] = None
    try: yield
    finally:
        del sys.modules['timmdata._native']
        if saved_mod is not None: sys.modules['timmdata._native'] = saved_mod
        if saved_attr is not None: timmdata._native = saved_attr

def test_native_status_says_why_and_that_the_fallback_is_slower(tmp_path):
    note = tmp_path / '_native_build.txt'
    note.write_text('missing jpeglib.h (install the libjpeg-turbo headers: Debian/Ubuntu libjpeg-dev)\n')
    with extension_missing():
        mod, status = decode._load_native(str(note))
        mod2, status2 = decode._load_native(str(tmp_path / 'none.txt'))
    assert mod is None and status.startswith('not built (missing jpeglib.h'), status
    assert 'slower' in status and 'reinstall' in status
    assert mod2 is None and status2.startswith('not built (') and 'slower' in status2
    assert decode._load_native()[0] is native  # the real one is back

@pytest.mark.slow
@pytest.mark.parametrize('breakage, why', [('#include <no_such_dir/jpeglib.h>', 'missing jpeglib.h'),
                                           ('#include <jpeglib.h>\nint broken = ;', 'compiler failed: csrc/native.c')])
def test_setup_records_why_the_build_fell_back(tmp_path, breakage, why):
    "setup.py goes on without the extension and writes the reason beside it; a good build removes the note."
    for f in ('setup.py', 'settings.ini', 'README.md'): shutil.copy(REPO / f, tmp_path / f)
    (tmp_path / 'csrc').mkdir(); (tmp_path / 'timmdata').mkdir(); (tmp_path / 'timmdata' / '__init__.py').write_text('')
    src = (REPO / 'csrc' / 'native.c').read_text()
    (tmp_path / 'csrc' / 'native.c').write_text(src.replace('#include <jpeglib.h>', breakage, 1))
    build = lambda: subprocess.run([sys.executable, 'setup.py', 'build_ext', '--inplace'], cwd=tmp_path, capture_output=True, text=True)
    r = build()
    assert r.returncode == 0, r.stderr[-2000:]  # optional: the build goes on
    note = tmp_path / 'timmdata' / '_native_build.txt'
    assert note.read_text().startswith(why), note.read_text()
    line = [l for l in r.stderr.splitlines() if l.startswith('timmdata: the C extension was not built: ')]  # not silent
    assert len(line) == 1 and why in line[0] and 'timmdata info' in line[0], r.stderr[-2000:]
    (tmp_path / 'csrc' / 'native.c').write_text(src)
    assert build().returncode == 0 and not note.exists() and list((tmp_path / 'timmdata').glob('_native*'))


# ---------- TorchCodec instead of torchvision.io (issue 17) ----------

def _cmyk_jpeg() -> bytes:
    b = io.BytesIO(); make_sample_image(3, 0, (40, 30)).convert('CMYK').save(b, 'JPEG', quality=90); return b.getvalue()

def test_no_torchvision_io_decoding_and_no_warnings_filter():
    src = (REPO / 'timmdata' / 'pixels' / 'decode.py').read_text()
    assert 'torchvision.io' not in src and 'catch_warnings():\n                    warnings.filterwarnings' not in src
    assert 'deprecated' not in src.lower()

@pytest.mark.parametrize('native_on', [True, False])
def test_torchcodec_decodes_what_the_extension_does_not_without_warnings(monkeypatch, native_on):
    tc = decode.torchcodec_jpeg()
    if tc is None: pytest.skip('torchcodec is not installed')
    if not native_on: monkeypatch.setattr(decode.NATIVE, 'enabled', False)
    calls = []
    monkeypatch.setattr(decode, '_TC', (lambda *a, **k: calls.append(a) or tc(*a, **k), 'torchcodec (counted)'))
    rgb, cmyk = small_jpeg((40, 30), 90), _cmyk_jpeg()
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no DeprecationWarning (torchvision 0.29), nothing else either
        for data in (rgb, cmyk):
            t = decode_image(data, to_tensor=True)
            assert torch.equal(t.permute(1, 2, 0), torch.from_numpy(np.array(decode_image(data))))  # PIL's pixels
    assert len(calls) == (0 if native_on else 2)  # both by the extension (CMYK converted as Pillow does); without it TorchCodec

def test_without_torchcodec_pil_decodes_the_same_pixels(monkeypatch):
    tc = decode.torchcodec_jpeg()
    monkeypatch.setattr(decode.NATIVE, 'enabled', False)
    monkeypatch.setattr(decode, '_TC', (None, "torchcodec not installed; pip install 'timmdata[codec]'"))
    assert decode.decoder_name() == 'PIL' and "timmdata[codec]" in decode.torchcodec_status()
    for data in (small_jpeg((40, 30), 90), _cmyk_jpeg()):
        t = decode_image(data, to_tensor=True)
        if tc is not None: assert torch.equal(t, tc(data))

def test_torchcodec_that_fails_to_load_is_said_not_raised(monkeypatch):
    import builtins
    real = builtins.__import__
    def broken(name, *a, **k):
        if name.startswith('torchcodec'): raise OSError('libcudart.so.13: cannot open shared object file')
        return real(name, *a, **k)
    monkeypatch.setattr(decode, '_TC', None)
    monkeypatch.delenv('TIMMDATA_TORCHCODEC', raising=False)
    monkeypatch.setitem(sys.modules, 'torchcodec', None)  # not cached: the import statement runs
    monkeypatch.setattr(builtins, '__import__', broken)
    assert decode.torchcodec_jpeg() is None
    st = decode.torchcodec_status()
    assert 'does not load here: OSError: libcudart.so.13' in st and "timmdata[codec]" in st, st
    monkeypatch.setattr(decode, '_TC', None)  # the next test loads it afresh

def test_torchcodec_error_is_a_named_decode_error_without_build_paths(monkeypatch):
    if decode.torchcodec_jpeg() is None: pytest.skip('torchcodec is not installed')
    monkeypatch.setattr(decode.NATIVE, 'enabled', False)
    bad = small_jpeg((40, 30), 90)
    bad = bad[:20] + b'\xff\xc0\x00\x02' + bad[20:]  # a malformed marker segment before the frame: libjpeg refuses it
    with pytest.raises(ImageDecodeError) as e: decode_image(bad, to_tensor=True)
    assert '.cpp:' not in str(e.value), str(e.value)
