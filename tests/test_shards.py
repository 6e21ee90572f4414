"""`timmdata.tools.shards.write_shards`: timm reads the shards it writes (every sample and label), a killed build resumes
(complete shards untouched, the rest redone, byte-identical to a clean build), pre-resized shards, splits, sources."""
import json, os, signal, subprocess, sys, tarfile, time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from timmdata.readers import create_reader
from timmdata.tools.sample_data import make_sample_dataset
from timmdata.tools.shards import SHARD_INFO, SHARD_STATE, write_shards

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def src(tmp_path_factory):
    return make_sample_dataset(tmp_path_factory.mktemp('src'), n_train=5, n_val=2, classes=['a', 'b', 'c'],
                               size=(64, 48), num_workers=0)


def pixels(img) -> bytes:
    return np.asarray(img.convert('RGB')).tobytes()


def source_samples(root):
    "Sorted (pixels, label) of every image under a split folder, decoded by PIL."
    r = create_reader(root, split=None)
    out = []
    for i in range(len(r)):
        p, t = r[i]
        with Image.open(p) as im: out.append((pixels(im), t))
    return sorted(out)


def shard_files(d):
    return {f: (Path(d) / f).read_bytes() for f in sorted(os.listdir(d)) if f.endswith('.tar')}


@pytest.mark.parametrize('split', ['train', 'validation'])  # val/ is written as timm's 'validation'
def test_timm_reads_our_shards(src, tmp_path, split):
    timm_data = pytest.importorskip('timm.data')
    info = write_shards(src, tmp_path / 'sh', shard_size=4, progress=False)
    n = {'train': 15, 'validation': 6}[split]
    assert info['splits'][split]['num_samples'] == n
    ds = timm_data.create_dataset('wds/ours', root=str(tmp_path / 'sh'), split=split, is_training=False)
    got = sorted((pixels(img), t) for img, t in ds)
    assert len(got) == n
    assert got == source_samples(src / {'train': 'train', 'validation': 'val'}[split])  # every image, byte-identical pixels, with its label, once


def test_info_json_layout(src, tmp_path):
    write_shards(src, tmp_path, shard_size=4, progress=False)
    info = json.loads((tmp_path / SHARD_INFO).read_text())
    assert list(info['splits']) == ['train', 'validation']
    tr = info['splits']['train']
    assert tr['name'] == 'train' and tr['num_samples'] == 15 and tr['shard_lengths'] == [4, 4, 4, 3]
    assert tr['filenames'] == [f'train-{k:06d}.tar' for k in range(4)]
    assert info['classes'] == ['a', 'b', 'c'] and info['num_classes'] == 3
    with tarfile.open(tmp_path / 'train-000000.tar') as tf:
        names = tf.getnames()
    assert len(names) == 8 and {n.split('.', 1)[1] for n in names} == {'jpg', 'cls'}


@pytest.mark.slow
def test_resume_after_kill(src, tmp_path):
    "A build killed half-way (SIGKILL) is finished by a rerun: complete shards untouched, output identical to a clean build."
    dst = tmp_path / 'killed'
    code = ('import time, sys; import timmdata.tools.shards as s; f = s.sample_bytes\n'
            'def slow(*a, **k): time.sleep(0.1); return f(*a, **k)\n'
            's.sample_bytes = slow\n'
            f's.write_shards({str(src)!r}, {str(dst)!r}, shard_size=2, progress=False)')
    p = subprocess.Popen([sys.executable, '-c', code], cwd=ROOT)
    t0 = time.time()
    try:
        while time.time() - t0 < 120:
            st = json.loads((dst / SHARD_STATE).read_text()) if (dst / SHARD_STATE).exists() else {}
            if len(st.get('shards', {})) >= 2: break
            assert p.poll() is None, 'the build ended before it could be killed'
            time.sleep(0.05)
        time.sleep(0.15)  # into the next shard: a half-written temporary file
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait()
    assert not (dst / SHARD_INFO).exists()
    # complete: the shards the state file records (a kill between a shard's rename and its record leaves one more .tar
    # in place, unrecorded: the rerun writes that one again)
    complete = {f: (dst / f).stat() for f in json.loads((dst / SHARD_STATE).read_text())['shards']}
    assert 2 <= len(complete) < 11
    (dst / '.train-000009.tar.tmp4242').write_bytes(b'half a shard')  # as a kill during that shard leaves it
    write_shards(src, dst, shard_size=2, progress=False)
    for f, st in complete.items():  # kept: the same file, not rewritten
        now = (dst / f).stat()
        assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns), f
    assert not [f for f in os.listdir(dst) if '.tmp' in f]
    write_shards(src, tmp_path / 'clean', shard_size=2, progress=False)
    assert shard_files(dst) == shard_files(tmp_path / 'clean')
    assert json.loads((dst / SHARD_INFO).read_text()) == json.loads((tmp_path / 'clean' / SHARD_INFO).read_text())


def test_damaged_shard_redone_and_other_build_starts_over(src, tmp_path):
    write_shards(src, tmp_path, shard_size=4, progress=False)
    good = shard_files(tmp_path)
    with open(tmp_path / 'train-000001.tar', 'r+b') as f: f.truncate(700)
    keep = (tmp_path / 'validation-000000.tar').stat().st_mtime_ns
    write_shards(src, tmp_path, shard_size=4, progress=False)
    assert shard_files(tmp_path) == good and (tmp_path / 'validation-000000.tar').stat().st_mtime_ns == keep
    info = write_shards(src, tmp_path, shard_size=8, progress=False)  # other parameters: a new build, old shards gone
    assert sorted(shard_files(tmp_path)) == ['train-000000.tar', 'train-000001.tar', 'validation-000000.tar']
    assert info['splits']['train']['shard_lengths'] == [8, 7]


def test_workers_give_identical_shards(src, tmp_path):
    write_shards(src, tmp_path / 'w0', shard_size=3, progress=False)
    write_shards(src, tmp_path / 'w2', shard_size=3, workers=2, progress=False)
    assert shard_files(tmp_path / 'w0') == shard_files(tmp_path / 'w2')


def test_original_bytes_and_shuffle(src, tmp_path):
    write_shards(src / 'train', tmp_path, shard_size=100, progress=False)
    r = create_reader(src / 'train', split=None)
    with tarfile.open(tmp_path / 'train-000000.tar') as tf:
        members = {m.name: tf.extractfile(m).read() for m in tf}
    keys = [n.split('.')[0] for n in members if n.endswith('.jpg')]
    assert keys != sorted(keys)  # shuffled once across the split
    for k in keys:
        path, t = r[int(k)]
        assert members[f'{k}.jpg'] == Path(path).read_bytes() and int(members[f'{k}.cls']) == t
    write_shards(src / 'train', tmp_path / 'ordered', shard_size=100, shuffle=False, progress=False)
    with tarfile.open(tmp_path / 'ordered' / 'train-000000.tar') as tf:
        assert [n.split('.')[0] for n in tf.getnames() if n.endswith('.cls')] == [f'{i:08d}' for i in range(15)]


def test_resized_shards_have_the_stated_size(tmp_path):
    src = make_sample_dataset(tmp_path / 'big', n_train=2, n_val=0, classes=['a', 'b'], size=(200, 150),
                              portrait_every=2, num_workers=0)
    (src / 'train' / 'a' / 'tiny.png').write_bytes(b'')
    Image.new('RGB', (40, 30), (9, 9, 9)).save(src / 'train' / 'a' / 'tiny.png')
    info = write_shards(src / 'train', tmp_path / 'sh', shard_size=10, resize=64, quality=80, progress=False)
    with tarfile.open(tmp_path / 'sh' / 'train-000000.tar') as tf:
        sizes = sorted(Image.open(tf.extractfile(m)).size for m in tf if not m.name.endswith('.cls'))
        assert all(m.name.endswith(('.jpg', '.cls')) for m in tf)
    assert sizes == sorted([(40, 30), (64, 85), (85, 64), (64, 85), (85, 64)])  # shorter side 64, never upscaled
    assert info['timmdata']['params']['resize'] == 64 and info['timmdata']['params']['quality'] == 80


def test_splits_and_sources(src, tmp_path):
    # a plain class folder: one split, 'train'
    assert list(write_shards(src / 'val', tmp_path / 'plain', progress=False)['splits']) == ['train']
    # a class missing from val keeps the labels of train
    both = tmp_path / 'both'
    make_sample_dataset(both, n_train=2, n_val=1, classes=['a', 'b', 'c'], size=(32, 32), num_workers=0)
    for f in (both / 'val' / 'a').iterdir(): f.unlink()
    (both / 'val' / 'a').rmdir()
    info = write_shards(both, tmp_path / 'both_sh', shuffle=False, progress=False)
    assert info['classes'] == ['a', 'b', 'c']
    with tarfile.open(tmp_path / 'both_sh' / 'validation-000000.tar') as tf:
        assert sorted(int(tf.extractfile(m).read()) for m in tf if m.name.endswith('.cls')) == [1, 2]
    # a tar of class folders, and a CSV
    with tarfile.open(tmp_path / 'val.tar', 'w') as tf: tf.add(src / 'val', arcname='.')
    info = write_shards(tmp_path / 'val.tar', tmp_path / 'tar_sh', split='val', progress=False)
    assert info['splits']['validation']['num_samples'] == 6 and list(info['splits']) == ['validation']
    csv = tmp_path / 'list.csv'
    r = create_reader(src / 'val', split=None)
    csv.write_text(''.join(f'{r.filename(i, absolute=True)},{t}\n' for i, t in enumerate(r.targets)))
    info = write_shards(csv, tmp_path / 'csv_sh', progress=False, allow_outside=True)  # a CSV we wrote: absolute paths
    assert info['splits']['train']['num_samples'] == 6 and info['class_to_idx'] == {'0': 0, '1': 1, '2': 2}


def test_bad_images_named_or_listed(src, tmp_path):
    bad = tmp_path / 'bad'
    make_sample_dataset(bad, n_train=2, n_val=0, classes=['a'], size=(32, 32), num_workers=0)
    (bad / 'train' / 'a' / 'broken.jpg').write_bytes(b'\xff\xd8\xffnot really')
    with pytest.raises(OSError, match='broken.jpg'):  # ImageDecodeError: damaged data, not a wrong argument
        write_shards(bad / 'train', tmp_path / 'b1', resize=16, progress=False)
    info = write_shards(bad / 'train', tmp_path / 'b2', resize=16, bad_sample='skip', progress=False)
    assert info['splits']['train']['num_samples'] == 2 and 'broken.jpg' in info['splits']['train']['bad'][0][1]
    with pytest.raises(ValueError, match='must not be inside the source'):
        write_shards(src, src / 'train' / 'shards', progress=False)
    with pytest.raises(ValueError, match='shard_size must be an int >= 1'):
        write_shards(src, tmp_path / 'x', shard_size=0)
