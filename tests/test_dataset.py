"""ImageDataset and readers: parity with the installed timm, tar reading in worker processes, corrupt files,
the skip policy across workers, image-mode conversion, CSV readers and class maps."""
import errno, hashlib, io, os, shutil, tarfile, warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageFile, features
from torch.utils.data import DataLoader

from timmdata.dataset import ImageDataset, AugMixDataset
from timmdata.pixels.decode import ImageDecodeError, decode_image
from timmdata.readers import TarReader, CsvReader, create_reader
from timmdata.transforms import SampleTransform
from timmdata.tools.sample_data import make_sample_image

timm_data = pytest.importorskip('timm.data')


# ---------- helpers (module level so spawned workers can unpickle them) ----------

def digest(b: bytes) -> str: return hashlib.md5(b).hexdigest()

class TensorIn(SampleTransform):
    "A stand-in transform that takes uint8 CHW tensors."
    input_format = 'tensor'
    def __call__(self, x): return x

def make_tar(src: Path, dst: Path) -> Path:
    with tarfile.open(dst, 'w') as tf:
        for p in sorted(src.rglob('*')):
            if p.is_file() and not p.name.startswith('.'): tf.add(p, arcname=p.relative_to(src).as_posix())
    return dst

def save(img: Image.Image, path: Path, fmt=None, **kw):
    path.parent.mkdir(parents=True, exist_ok=True); img.save(path, fmt, **kw); return path

@pytest.fixture(scope='module')
def tricky_root(tmp_path_factory):
    "Natural-sort traps, nested leaf folders, images in the root and non-images, no split folders."
    r = tmp_path_factory.mktemp('tricky')
    rels = ['class10/img1.png', 'class2/img10.jpg', 'class2/img9.JPG', 'Class3/b.jpeg', 'group/class1/a.png',
            'group/class1/A2.png', 'other/class1/c.jpg', 'loose1.png', 'class2/readme.txt', 'class10/x.gif']
    for i, rel in enumerate(rels):
        p = r / rel; p.parent.mkdir(parents=True, exist_ok=True)
        if p.suffix.lower() in ('.txt', '.gif'): p.write_bytes(b'not an image')
        else: save(make_sample_image(i, i, (24, 16)), p, 'PNG' if p.suffix == '.png' else 'JPEG')
    return r


# ---------- parity with timm ----------

@pytest.mark.parametrize('where', ['train', 'val', 'tricky'])
def test_timm_parity(sample_root, tricky_root, where):
    root = tricky_root if where == 'tricky' else sample_root / where
    ours, theirs = ImageDataset(root), timm_data.ImageDataset(str(root))
    assert ours.filenames() == theirs.filenames()
    assert ours.filenames(basename=True) == theirs.filenames(basename=True)
    assert ours.class_to_idx == theirs.reader.class_to_idx
    assert ours.reader.targets == [t for _, t in theirs.reader.samples]
    for i in (0, len(ours) // 2, len(ours) - 1):
        (a, ya), (b, yb) = ours[i], theirs[i]
        assert ya == yb and a.mode == b.mode == 'RGB'
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_timm_parity_without_split(sample_root):
    "split=None reads the whole root, train/ and val/ together, as timm's ImageDataset does."
    ours, theirs = ImageDataset(sample_root, split=None), timm_data.ImageDataset(str(sample_root))
    assert ours.filenames() == theirs.filenames() and ours.class_to_idx == theirs.reader.class_to_idx


def test_split_folders(sample_root):
    assert ImageDataset(sample_root).filenames() == ImageDataset(sample_root / 'train').filenames()
    for split in ('val', 'valid', 'validation', 'eval', 'evaluation'):
        assert len(ImageDataset(sample_root, split=split)) == 30
    assert len(ImageDataset(sample_root, split='train[:50%]')) == 60


def test_seed_snippet(sample_root):
    "`ImageDataset(root)[0]` with nothing else given is a (PIL RGB image, int target) pair, as in timm."
    img, target = ImageDataset(sample_root)[0]
    assert isinstance(img, Image.Image) and img.mode == 'RGB' and target == 0


# ---------- tar reader in worker processes ----------

@pytest.fixture(scope='module')
def train_tar(sample_root, tmp_path_factory):
    return make_tar(sample_root / 'train', tmp_path_factory.mktemp('tar') / 'train.tar')

@pytest.fixture(scope='module')
def per_class_tars(sample_root, tmp_path_factory):
    d = tmp_path_factory.mktemp('tars')
    for c in sorted(os.listdir(sample_root / 'train')):
        make_tar(sample_root / 'train' / c, d / f'{c}.tar')
    return d

@pytest.mark.slow
@pytest.mark.parametrize('layout,context', [('one tar', 'fork'), ('per-class tars', 'fork'), ('per-class tars', 'spawn')])
def test_tar_in_workers(sample_root, train_tar, per_class_tars, layout, context):
    root = train_tar if layout == 'one tar' else per_class_tars
    # only library objects and builtins cross to the workers: spawned workers then need not import this module
    ds = ImageDataset(root, load_bytes=True)
    assert isinstance(ds.reader, TarReader)
    ds[0]  # the parent opens a handle before forking: workers must not use it
    folder = ImageDataset(sample_root / 'train')
    want = Counter((digest(Path(folder.filename(i, absolute=True)).read_bytes()), t) for i, t in enumerate(folder.reader.targets))
    loader = DataLoader(ds, batch_size=7, num_workers=2, multiprocessing_context=context, collate_fn=list)
    for epoch in range(2 if context == 'fork' else 1):
        got = Counter((digest(b), t) for batch in loader for b, t in batch)
        assert got == want  # every sample exactly once, with its folder label
    assert ds[0] == ((sample_root / 'train' / folder.filename(0)).read_bytes(), 0)


def test_tar_decodes_like_folder(sample_root, train_tar):
    a, b = ImageDataset(train_tar), ImageDataset(sample_root / 'train')
    assert a.filenames() == b.filenames() and a.class_to_idx == b.class_to_idx
    assert np.array_equal(np.asarray(a[17][0]), np.asarray(b[17][0])) and a[17][1] == b[17][1]
    assert torch.equal(ImageDataset(train_tar, transform=TensorIn())[17][0], ImageDataset(sample_root / 'train', transform=TensorIn())[17][0])


# ---------- corrupt files ----------

BAD = {1: 'truncated', 2: 'zero bytes', 3: 'garbage header', 5: 'truncated png'}

@pytest.fixture(scope='module')
def bad_root(sample_root, tmp_path_factory):
    r = tmp_path_factory.mktemp('bad') / 'train'
    shutil.copytree(sample_root / 'train', r)
    files = ImageDataset(r).filenames(absolute=True)
    good = Path(files[1]).read_bytes()
    Path(files[1]).write_bytes(good[:len(good) // 2])
    Path(files[2]).write_bytes(b'')
    Path(files[3]).write_bytes(os.urandom(64) + good[64:])
    b = io.BytesIO(); make_sample_image(0, 0).save(b, 'PNG')
    Path(files[5]).write_bytes(b.getvalue()[:len(b.getvalue()) // 2])  # a PNG named .JPEG: content decides
    return r

@pytest.fixture(scope='module')
def bad_tar(bad_root, tmp_path_factory):
    return make_tar(bad_root, tmp_path_factory.mktemp('badtar') / 'bad.tar')

@pytest.mark.parametrize('source', ['folder', 'tar'])
@pytest.mark.parametrize('tensor', [False, True])
@pytest.mark.parametrize('load_truncated', [False, True])
def test_corrupt_files_raise(bad_root, bad_tar, source, tensor, load_truncated, monkeypatch):
    monkeypatch.setattr(ImageFile, 'LOAD_TRUNCATED_IMAGES', load_truncated)  # must not matter
    ds = ImageDataset(bad_root if source == 'folder' else bad_tar, transform=TensorIn() if tensor else None)
    for i, what in BAD.items():
        with pytest.raises(ImageDecodeError) as e:
            ds[i]
        msg = str(e.value)
        assert f'sample {i} ' in msg and ds.filename(i, basename=True) in msg, msg
    assert ds[0][1] == 0 and ds[4][1] == 0


def test_missing_file_after_scan(sample_root, tmp_path):
    r = shutil.copytree(sample_root / 'val', tmp_path / 'val')
    ds = ImageDataset(r)
    os.remove(ds.filename(4, absolute=True))
    with pytest.raises(ImageDecodeError, match='sample 4 .*No such file'):
        ds[4]


@pytest.mark.slow
@pytest.mark.parametrize('context', ['fork', 'spawn'])
def test_skip_policy_counts_across_workers(bad_root, context):
    ds = ImageDataset(bad_root, bad_sample='skip')
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=context, collate_fn=list)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        samples = [s for b in loader for s in b]
    assert [i for i, s in enumerate(samples) if s is None] == sorted(BAD)  # skipped samples are None, in place
    assert ds.bad_samples == sorted(BAD)  # recorded in the workers, read in the parent
    with pytest.warns(UserWarning, match='skipped sample 2 .*empty'):
        assert ds[2] is None
    assert ds[0] is not None and ds[0][1] == 0  # never a neighbour in place of a bad sample


# ---------- transient OS errors are not bad images ----------

class FlakyReader:
    "Wraps a reader; its first `fails` reads (per process) raise `exc`, e.g. too many open files. Module level: picklable."
    def __init__(self, reader, fails, exc): self.reader, self.fails, self.exc, self.calls = reader, fails, exc, 0
    def __len__(self): return len(self.reader)
    def __getitem__(self, i):
        self.calls += 1
        if self.calls <= self.fails: raise self.exc
        return self.reader[i]
    def filename(self, *a, **k): return self.reader.filename(*a, **k)

def flaky_dataset(root, fails, exc, policy):
    ds = ImageDataset(root, bad_sample=policy)
    ds.reader, ds.io_backoff = FlakyReader(ds.reader, fails, exc), 0
    return ds

EMFILE = OSError(errno.EMFILE, 'Too many open files')

@pytest.mark.parametrize('policy', ['raise', 'skip'])
@pytest.mark.parametrize('exc', [EMFILE, OSError(errno.ENFILE, 'Too many open files in system'), InterruptedError(errno.EINTR, 'Interrupted'),
                                 BlockingIOError(errno.EAGAIN, 'try again'), TimeoutError(errno.ETIMEDOUT, 'timed out'),
                                 ConnectionResetError('connection reset by peer')])
def test_transient_error_once_is_retried(sample_root, exc, policy):
    ds = flaky_dataset(sample_root, 1, exc, policy)
    img, y = ds[2]
    assert y == 0 and img.size == (426, 320) and ds.reader.calls == 2 and ds.bad_samples == []

@pytest.mark.parametrize('policy', ['raise', 'skip'])
def test_transient_error_always_is_raised_as_itself_never_counted(sample_root, policy):
    ds = flaky_dataset(sample_root, 10**9, EMFILE, policy)
    with pytest.raises(OSError) as e:
        with warnings.catch_warnings():
            warnings.simplefilter('error')  # and no 'skipped sample' warning either
            ds[5]
    assert type(e.value) is OSError and e.value.errno == errno.EMFILE  # not an ImageDecodeError
    said = str(e.value) + ' '.join(getattr(e.value, '__notes__', []))
    assert ds.filename(5, basename=True) in said and 'not counted as bad' in said and 'fix or remove' not in said, said
    assert ds.reader.calls == 1 + ds.io_retries and ds.bad_samples == []

def test_transient_error_in_workers_is_raised_not_counted(sample_root):
    ds = flaky_dataset(sample_root, 10**9, EMFILE, 'skip')
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context='fork', collate_fn=list)
    it = iter(loader)
    with pytest.raises(OSError, match='Too many open files') as e: next(it)
    assert not isinstance(e.value, ImageDecodeError) and ds.bad_samples == []
    # torch's iterator, left to the garbage collector after an error, took 10 s to stop its two workers (5 s each):
    # ended here, as a finished pass ends
    it._shutdown_workers()

@pytest.mark.parametrize('policy', ['raise', 'skip'])
def test_store_damaged_error_propagates_untouched(sample_root, policy):
    from timmdata.store.format import StoreDamagedError
    err = StoreDamagedError('chunk 00007 of the store is damaged: rebuild it')
    ds = flaky_dataset(sample_root, 1, err, policy)
    with pytest.raises(StoreDamagedError) as e: ds[0]
    assert e.value is err and ds.bad_samples == [] and ds.reader.calls == 1  # not retried, not counted, not wrapped

@pytest.mark.slow
def test_a_missing_file_is_still_a_bad_sample(sample_root, tmp_path):
    r = shutil.copytree(sample_root / 'val', tmp_path / 'val')
    ds = ImageDataset(r, bad_sample='skip')
    os.remove(ds.filename(4, absolute=True))
    with pytest.warns(UserWarning, match='sample 4 .*No such file'): assert ds[4] is None
    assert ds.bad_samples == [4]


# ---------- image modes ----------

_WEBP = features.check('webp')  # Pillow's free-threaded wheels may be built without libwebp


def _modes_tree(root: Path):
    rgb = make_sample_image(4, 1, (40, 30))
    rgba = rgb.copy(); rgba.putalpha(128)
    pal = rgb.quantize(8); pal_t = pal.copy(); pal_t.info['transparency'] = 0
    g16 = (np.arange(30 * 40, dtype=np.uint32).reshape(30, 40) * 53).astype(np.uint16)
    gray = np.repeat(np.asarray(rgb.convert('L'))[..., None], 3, 2)
    files = {  # file: (image, save kwargs, expected RGB pixels or None for 'equal to PIL convert')
        'rgb/a.png': (rgb, {}, np.asarray(rgb)),
        'rgba/a.png': (rgba, {}, np.asarray(rgb)),
        'la/a.png': (rgb.convert('LA'), {}, gray),
        'p/a.png': (pal, {}, np.asarray(pal.convert('RGB'))),
        'pt/a.png': (pal_t, {}, np.asarray(pal.convert('RGB'))),
        'l/a.png': (rgb.convert('L'), {}, gray),
        'i16/a.png': (Image.frombytes('I;16', (40, 30), g16.astype('<u2').tobytes()), {}, np.repeat((g16 >> 8).astype(np.uint8)[..., None], 3, 2)),
        'i16tif/a.tif': (Image.frombytes('I;16', (40, 30), g16.astype('<u2').tobytes()), {}, np.repeat((g16 >> 8).astype(np.uint8)[..., None], 3, 2)),
        'cmyk/a.tiff': (rgb.convert('CMYK'), {}, np.asarray(rgb.convert('CMYK').convert('RGB'))),
        'cmykjpg/a.jpg': (rgb.convert('CMYK'), {'quality': 95}, None),
        'grayjpg/a.jpg': (rgb.convert('L'), {'quality': 95}, None),
        'webp/a.webp': (rgba, {'lossless': True, 'exact': True}, np.asarray(rgb)),
        'bmp/a.bmp': (rgb, {}, np.asarray(rgb)),
    }
    if not _WEBP: del files['webp/a.webp']  # test_webp_mode says so
    for rel, (img, kw, _) in files.items(): save(img, root / rel, **kw)
    return files

@pytest.fixture(scope='module')
def modes_root(tmp_path_factory):
    r = tmp_path_factory.mktemp('modes')
    return r, _modes_tree(r)

@pytest.mark.parametrize('mode', ['RGB', 'L'])
@pytest.mark.parametrize('tensor', [False, True])
def test_image_modes(modes_root, mode, tensor):
    root, files = modes_root
    ds = ImageDataset(root, input_img_mode=mode, transform=TensorIn() if tensor else None)
    assert len(ds) == len(files)
    for i in range(len(ds)):
        rel = ds.filename(i)
        want = files[rel][2]
        if want is None: want = np.asarray(Image.open(root / rel).convert('RGB'))  # JPEGs: PIL's own decode
        if mode == 'L': want = np.asarray(Image.fromarray(want).convert('L'))
        x, _ = ds[i]
        got = x.permute(1, 2, 0).numpy() if tensor else np.asarray(x)
        if tensor: assert x.dtype == torch.uint8 and x.shape[0] == len(mode)
        else: assert x.mode == mode
        got = got[..., 0] if (mode == 'L' and got.ndim == 3) else got
        if mode == 'L' and tensor and rel.endswith('.jpg') and 'gray' not in rel:
            assert np.abs(got.astype(int) - want.astype(int)).max() <= 8, rel  # libjpeg luma vs PIL's RGB->L
        else:
            assert np.array_equal(got, want), rel


def test_webp_mode(modes_root):
    "test_image_modes reads a WebP file too, where this Pillow writes WebP."
    if not _WEBP: pytest.skip('this Pillow has no WebP support (no libwebp in its wheel): WebP left out of test_image_modes')
    assert 'webp/a.webp' in modes_root[1]


def test_16bit_is_scaled_not_clipped(modes_root):
    root, _ = modes_root
    x = np.asarray(decode_image(root / 'i16/a.png', 'L'))
    assert x.max() == (30 * 40 - 1) * 53 >> 8 and (x < 128).mean() > 0.45  # PIL's own convert makes 99% of them 255


# ---------- CSV and class maps ----------

def test_csv_names_and_ints(sample_root, tmp_path):
    folder = ImageDataset(sample_root / 'val')
    rows = [(os.path.relpath(folder.filename(i, absolute=True), tmp_path), folder.classes[t]) for i, t in enumerate(folder.reader.targets)]
    (tmp_path / 'names.csv').write_text('path,label\n' + ''.join(f'{p},{c}\n' for p, c in rows[::-1]))
    ds = ImageDataset(tmp_path / 'names.csv', allow_outside=True)  # a CSV we wrote, naming images outside its folder
    assert isinstance(ds.reader, CsvReader) and len(ds) == len(folder)
    assert ds.class_to_idx == folder.class_to_idx  # names numbered in natural order
    assert ds.filenames(absolute=True) == folder.filenames(absolute=True)[::-1]  # CSV order kept
    img, t = ds[0]
    assert t == folder[len(folder) - 1][1] and np.array_equal(np.asarray(img), np.asarray(folder[len(folder) - 1][0]))
    (tmp_path / 'ints.csv').write_text(''.join(f'{p},{10 + folder.class_to_idx[c]}\n' for p, c in rows))
    di = ImageDataset(tmp_path / 'ints.csv', allow_outside=True)
    assert di.reader.targets == [10 + t for t in folder.reader.targets]  # integer labels used as they are
    (tmp_path / 'train.csv').write_text((tmp_path / 'names.csv').read_text())
    assert isinstance(create_reader(tmp_path, split='train', allow_outside=True), CsvReader)  # root/<split>.csv is found too


@pytest.mark.parametrize('as_file', [False, True])
def test_class_map_filters(sample_root, tmp_path, as_file):
    cm = {'n03888257': 0, 'n01440764': 1}
    if as_file:
        (tmp_path / 'map.txt').write_text('n03888257\nn01440764\n'); cm = tmp_path / 'map.txt'
    ds = ImageDataset(sample_root, class_map=cm)
    assert len(ds) == 12 and set(ds.reader.targets) == {0, 1}
    assert all(ds.filename(i).startswith('n03888257' if t == 0 else 'n01440764') for i, t in enumerate(ds.reader.targets))
    theirs = timm_data.ImageDataset(str(sample_root / 'train'), class_map=cm if not as_file else str(cm))
    assert ds.filenames() == theirs.filenames()


# ---------- errors and the interface ----------

def test_bad_roots(tmp_path):
    with pytest.raises(FileNotFoundError, match='nope'):
        ImageDataset(tmp_path / 'nope')
    (tmp_path / 'txt').mkdir(); (tmp_path / 'txt/a.txt').write_text('x')
    with pytest.raises(RuntimeError, match=r"found no images under .*txt.*\.jpeg"):
        ImageDataset(tmp_path / 'txt')


def test_transform_is_settable_and_decides_input(sample_root):
    ds = ImageDataset(sample_root)
    assert isinstance(ds[0][0], Image.Image)
    ds.transform = TensorIn()
    x = ds[0][0]
    assert isinstance(x, torch.Tensor) and x.dtype == torch.uint8 and x.shape == (3, 320, 426)


def test_augmix_views(sample_root):
    primary = lambda im: torch.from_numpy(np.array(im.resize((8, 6)))).permute(2, 0, 1).contiguous()
    ds = AugMixDataset(ImageDataset(sample_root, transform=(primary, lambda x: x.flip(-1), lambda x: x.float() / 255)), num_splits=3)
    (clean, aug1, aug2), y = ds[7]
    assert y == 1 and clean.dtype == torch.float32
    assert torch.equal(aug1, clean.flip(-1)) and torch.equal(aug2, aug1)
