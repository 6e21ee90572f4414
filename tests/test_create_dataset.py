"""`timmdata.dataset_factory.create_dataset`: every name scheme (no prefix, torch/, hfds/, hfids/, wds/, tfds/ and
unknown ones), parity with `timm.data.create_dataset` where both run, torchvision sets through create_loader."""
import io, os, pickle, struct, sys, tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from timmdata.dataset_factory import create_dataset
from timmdata.loader import create_loader
from timmdata.tools.sample_data import make_sample_dataset, make_sample_image
from timmdata.tools.shards import write_shards


@pytest.fixture(scope='module')
def root(tmp_path_factory):
    return make_sample_dataset(tmp_path_factory.mktemp('img'), n_train=4, n_val=2, classes=['b', 'a', 'c10', 'c2'],
                               size=(48, 40), num_workers=0)


def rgb(img):
    return np.asarray(img.convert('RGB'))


@pytest.mark.parametrize('name,split', [('', 'validation'), ('', 'train'), ('', 'val'), ('torch/image_folder', 'validation')])
def test_folder_parity_with_timm(root, name, split):
    timm_data = pytest.importorskip('timm.data')
    ours, theirs = create_dataset(name, root=str(root), split=split), timm_data.create_dataset(name, root=str(root), split=split)
    assert len(ours) == len(theirs) == (16 if split == 'train' else 8)
    classes = theirs.classes if hasattr(theirs, 'classes') else theirs.reader.class_to_idx
    assert list(ours.class_to_idx) == list(classes if isinstance(classes, dict) else classes)
    for i in range(len(ours)):
        (a, y), (b, z) = ours[i], theirs[i]
        assert y == z and np.array_equal(rgb(a), rgb(b)), i


def fake_cifar10(d, n=6):
    rng = np.random.default_rng(0)
    b = Path(d) / 'cifar-10-batches-py'; b.mkdir(parents=True)
    pickle.dump({'label_names': [f'c{i}' for i in range(10)]}, open(b / 'batches.meta', 'wb'))
    for f in [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']:
        pickle.dump({'data': rng.integers(0, 256, (n, 3072), dtype=np.uint8), 'labels': rng.integers(0, 10, n).tolist()},
                    open(b / f, 'wb'))


def fake_mnist(d, n=5):
    raw = Path(d) / 'MNIST' / 'raw'; raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for pre in ('train', 't10k'):
        (raw / f'{pre}-images-idx3-ubyte').write_bytes(struct.pack('>IIII', 0x803, n, 28, 28) + rng.integers(0, 256, n * 784, dtype=np.uint8).tobytes())
        (raw / f'{pre}-labels-idx1-ubyte').write_bytes(struct.pack('>II', 0x801, n) + rng.integers(0, 10, n, dtype=np.uint8).tobytes())


@pytest.fixture
def no_md5(monkeypatch):
    "torchvision checks CIFAR's files against their MD5 sums: a made-up copy passes on existence alone."
    monkeypatch.setattr(torchvision.datasets.cifar, 'check_integrity', lambda path, md5=None: os.path.isfile(path))


@pytest.mark.parametrize('split', ['train', 'validation'])
def test_torch_cifar10_parity_and_fast_path(tmp_path, no_md5, split):
    timm_data = pytest.importorskip('timm.data')
    fake_cifar10(tmp_path)
    ours = create_dataset('torch/cifar10', root=str(tmp_path), split=split)
    theirs = timm_data.create_dataset('torch/cifar10', root=str(tmp_path), split=split)
    assert len(ours) == len(theirs) == (30 if split == 'train' else 6)
    assert ours.classes == theirs.classes
    for i in range(len(ours)):
        assert ours[i][1] == theirs[i][1] and np.array_equal(rgb(ours[i][0]), rgb(theirs[i][0]))
    # create_loader sets the transform; the samples reach it as uint8 tensors (no PIL round trip), batches come out
    loader = create_loader(ours, (3, 32, 32), batch_size=3, is_training=True, num_workers=0)
    assert ours.transform is not None and ours._to_tensor
    x, y = next(iter(loader))
    assert x.shape == (3, 3, 32, 32) and x.dtype == torch.float32 and y.shape == (3,)


def test_torch_mnist(tmp_path):
    timm_data = pytest.importorskip('timm.data')
    fake_mnist(tmp_path)
    ours = create_dataset('torch/mnist', root=str(tmp_path), split='train')
    theirs = timm_data.create_dataset('torch/mnist', root=str(tmp_path), split='train')
    assert len(ours) == len(theirs) == 5 and ours.classes[0] == '0 - zero'
    img, y = ours[3]
    assert img.mode == 'RGB' and y == theirs[3][1] and np.array_equal(rgb(img)[..., 0], np.asarray(theirs[3][0]))
    one = create_dataset('torch/mnist', root=str(tmp_path), split='train', input_img_mode='L')
    assert one[3][0].mode == 'L'
    with pytest.raises(RuntimeError, match='download=True'):  # download passed through: off, so torchvision says so
        create_dataset('torch/kmnist', root=str(tmp_path), split='train')


def hf_images(n=6):
    import datasets
    def jpeg(c, s):
        b = io.BytesIO(); make_sample_image(c, s, (40, 30)).save(b, 'JPEG'); return b.getvalue()
    feats = datasets.Features({'image': datasets.Image(), 'label': datasets.ClassLabel(names=['cat', 'dog', 'emu'])})
    return datasets.Dataset.from_dict({'image': [{'bytes': jpeg(i % 3, i), 'path': None} for i in range(n)],
                                       'label': [i % 3 for i in range(n)]}, features=feats), jpeg


def test_hfds(tmp_path):
    pytest.importorskip('datasets')
    hf, jpeg = hf_images()
    hf.save_to_disk(str(tmp_path / 'tiny'))
    ds = create_dataset(f'hfds/{tmp_path / "tiny"}', split='train')
    assert type(ds).__name__ == 'ImageDataset' and len(ds) == 6 and ds.classes == ['cat', 'dog', 'emu']
    img, y = ds[4]
    assert y == 1 and img.size == (40, 30)
    assert create_dataset(f'hfds/{tmp_path / "tiny"}', split='train', load_bytes=True)[4][0] == jpeg(1, 4)
    pq = tmp_path / 'tiny.parquet'
    hf.to_parquet(str(pq))
    ds = create_dataset('hfds/parquet', split='train', data_files=str(pq), class_map={'emu': 0, 'dog': 1})
    assert len(ds) == 4 and ds.reader.targets == [1, 0, 1, 0]


def test_hfids(tmp_path):
    pytest.importorskip('datasets')
    hf, jpeg = hf_images()
    files = []
    for k in range(3):
        files.append(str(tmp_path / f'part-{k}.parquet'))
        hf.select(range(2 * k, 2 * k + 2)).to_parquet(files[-1])
    ds = create_dataset('hfids/parquet', split='train', data_files=files)
    assert type(ds).__name__ == 'IterableImageDataset' and ds.source.shards == [0, 1, 2]
    got = sorted((np.asarray(img).tobytes(), y) for img, y in ds)
    assert [y for _, y in got] == sorted(i % 3 for i in range(6)) and len(got) == 6
    ds = create_dataset('hfids/parquet', split='train', data_files=files, is_training=True, num_samples=6, batch_size=2)
    assert sorted(y for _, y in ds) == sorted(i % 3 for i in range(6))


def test_wds_reads_timmdata_shards(root, tmp_path):
    write_shards(root, tmp_path, shard_size=3, progress=False)
    ds = create_dataset('wds/sample', root=str(tmp_path), split='val')
    assert type(ds).__name__ == 'IterableImageDataset' and len(ds) == 8
    ref = create_dataset('', root=str(root), split='val')
    assert sorted((rgb(i).tobytes(), y) for i, y in ds) == sorted((rgb(i).tobytes(), y) for i, y in (ref[k] for k in range(len(ref))))


def test_errors(root, tmp_path, monkeypatch):
    with pytest.raises(NotImplementedError, match='timmdata shards SRC DST'):
        create_dataset('tfds/imagenet2012', root=str(tmp_path))
    with pytest.raises(ValueError, match="unknown dataset scheme 'foo/'"):
        create_dataset('foo/bar', root=str(root))
    with pytest.raises(ValueError, match="unknown torchvision dataset 'torch/svhn'"):
        create_dataset('torch/svhn', root=str(tmp_path))
    with pytest.raises(ValueError, match='needs root='):
        create_dataset('')
    with pytest.raises(ValueError, match='class_map is not supported for torchvision'):
        create_dataset('torch/image_folder', root=str(root), class_map={'a': 0})
    monkeypatch.setitem(sys.modules, 'datasets', None)  # as if `datasets` were not installed
    with pytest.raises(ImportError, match=r"pip install 'timmdata\[hf\]'"):
        create_dataset('hfds/parquet', split='train', data_files='x.parquet')
    with pytest.raises(ImportError, match=r"pip install 'timmdata\[hf\]'"):
        create_dataset('hfids/parquet', split='train', data_files='x.parquet')


def test_plain_names_like_timm(root):
    "A plain name that is no reader kind is ignored (timm's folder fallback); a reader kind picks that reader."
    assert len(create_dataset('imagenet', root=str(root), split='train')) == 16
    with pytest.raises(Exception, match='tar'):
        create_dataset('tar', root=str(root), split='train')


def test_split_synonyms_in_tar_and_store_roots(tmp_path):
    "timm's split names find a split stored under a synonym: val.tar and a store in val/ answer split='validation'."
    from timmdata.store.builder import build_cache
    from timmdata.readers import create_reader
    src = make_sample_dataset(tmp_path / 'src', n_train=1, n_val=2, classes=['a', 'b'], size=(32, 32), num_workers=0)
    tars = tmp_path / 'tars'; tars.mkdir()
    with tarfile.open(tars / 'val.tar', 'w') as tf: tf.add(src / 'val', arcname='.')
    build_cache(src / 'val', tmp_path / 'stores' / 'val', max_size=16, num_workers=0, progress=False)
    for root, kind in ((src, 'FolderReader'), (tars, 'TarReader'), (tmp_path / 'stores', 'ReaderStore')):
        for split in ('validation', 'eval', 'val'):
            r = create_reader(str(root), split=split)
            assert (type(r).__name__, len(r)) == (kind, 4), (root, split, r)


def _last_own_frame(e: BaseException):
    "The last frame of a traceback that is not timmdata's own code: where the user's call is."
    import traceback
    import inspect
    lib = str(Path(inspect.unwrap(create_dataset).__code__.co_filename).parent)  # timmdata/, under its decorators
    return [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(lib)][-1]


def test_misspelt_split_is_an_error_at_the_users_call(root):
    "A split the root does not hold, beside train/ and val/, is a ValueError at the call that named it, naming the splits and the closest; never all of root read as one, never a warning."
    import warnings
    from timmdata.dataset import ImageDataset
    from timmdata.readers import SplitNotFoundError
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no warning either: the error is the only thing it says
        with pytest.raises(ValueError) as by_factory:
            create_dataset('', root=str(root), split='tain')
        with pytest.raises(ValueError) as by_class:
            ImageDataset(str(root), split='tain')
        for made_by, e in (("create_dataset('', root=str(root), split='tain')", by_factory),
                           ("ImageDataset(str(root), split='tain')", by_class)):
            assert isinstance(e.value, SplitNotFoundError)
            assert "holds the splits 'train', 'val'; did you mean 'train'?" in str(e.value), e.value
            frame = _last_own_frame(e.value)  # the user's line that called it, and nothing of theirs after it
            assert frame.filename == __file__ and frame.line == made_by, (frame, frame.line)
        assert len(create_dataset('', root=str(root), split='validation')) == 8  # a synonym of val/: as before
        assert len(create_dataset('', root=str(root / 'train'), split='tain')) == 16  # class folders: timm reads them as they are
        assert len(create_dataset('', root=str(root), split=None)) == len(ImageDataset(str(root), split='')) == 24


def test_misspelt_split_timm_would_mix(root):
    "What the error prevents: timm reads all of root for a split it does not find, train/ and val/ as one set."
    timm_data = pytest.importorskip('timm.data')
    assert len(timm_data.create_dataset('', root=str(root), split='tain')) == 24
    with pytest.raises(ValueError, match="did you mean 'train'"):
        create_dataset('', root=str(root), split='tain')
