"""Multi-label targets end to end (issue 40), on tiny datasets made here: a Hugging Face dataset built in memory
(saved to disk for hfds/, written as parquet for hfids/) and WebDataset shards with JSON sidecars, images from the
sample-data generator. Targets are checked through create_dataset -> create_loader (fast_collate + the prefetcher,
worker processes and threads) -> Mixup/CutMix, and through create_naflex_loader."""
import io, json, tarfile

import numpy as np
import pytest
import torch

from timmdata import MultiLabelTarget, create_dataset, create_loader, create_naflex_loader
from timmdata.mixup import FastCollateMixup, Mixup
from timmdata.naflex_mixup import NaFlexMixup
from timmdata.tools.sample_data import make_sample_image

datasets = pytest.importorskip('datasets')

# sample i's labels; class 2 is in no sample, class 0 ... see SHARED: the class every sample has (kept at 1 by mixing)
LABELS = [[5, 1, 0], [2, 0], [0], [4, 0], [1, 5, 0], [3, 0], [0, 3], [2, 0]]
SHARED = 0
NAMES = ['complex', 'frog_eye_leaf_spot', 'healthy', 'powdery_mildew', 'rust', 'scab']
N = len(LABELS)


def multihot(labels, n=6):
    return [float(c in labels) for c in range(n)]


def jpeg(i: int) -> bytes:
    b = io.BytesIO()
    make_sample_image(i % 6, i, (24, 20)).save(b, 'JPEG', quality=90)
    return b.getvalue()


def records():
    "The per-sample fields both formats hold."
    return [dict(labels=LABELS[i], person=i % 2, dark=i >= 4, output={'pollen': float(i % 3 == 0)},
                 multihot=[int(c in LABELS[i]) for c in range(6)], boxes=[{'category': c, 'area': 1} for c in LABELS[i]],
                 alt=-1 if i == 3 else i % 2, cls=(i + 1) % 6) for i in range(N)]


@pytest.fixture(scope='module')
def hf_root(tmp_path_factory):
    "A Hugging Face dataset: saved to disk (hfds/<folder>) and as one parquet file per half (hfids/parquet)."
    root = tmp_path_factory.mktemp('hf')
    recs = records()
    feats = datasets.Features({
        'image': datasets.Image(), 'labels': datasets.Sequence(datasets.ClassLabel(names=NAMES)),
        'person': datasets.ClassLabel(names=['no', 'yes']), 'dark': datasets.Value('bool'),
        'output': {'pollen': datasets.Value('float64')}, 'multihot': datasets.Sequence(datasets.Value('int64')),
        'boxes': datasets.List({'category': datasets.ClassLabel(names=NAMES), 'area': datasets.Value('int64')}),
    })
    ds = datasets.Dataset.from_dict({
        'image': [{'bytes': jpeg(i), 'path': f'{i}.jpg'} for i in range(N)],
        **{k: [r[k] for r in recs] for k in ('labels', 'person', 'dark', 'output', 'multihot', 'boxes')},
    }, features=feats)
    ds.save_to_disk(str(root / 'disk'))
    for h in range(2):
        ds.select(range(h * N // 2, (h + 1) * N // 2)).to_parquet(str(root / f'part-{h}.parquet'))
    return root


def hf_dataset(hf_root, reader, **kw):
    if reader == 'hfds':
        return create_dataset(f'hfds/{hf_root / "disk"}', split='train', **kw)
    files = [str(hf_root / f'part-{h}.parquet') for h in range(2)]
    return create_dataset('hfids/parquet', split='train', data_files={'train': files}, num_samples=N, **kw)


def add(tar, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    tar.addfile(ti, io.BytesIO(data))


@pytest.fixture(scope='module')
def wds_root(tmp_path_factory):
    "Two shards of four samples (.jpg, .cls = i % 6, .json) in timm's layout; split 'alt' reads the 'alt' field."
    root = tmp_path_factory.mktemp('wds')
    names = []
    for s in range(2):
        names.append(f'train-{s:06d}.tar')
        with tarfile.open(root / names[-1], 'w') as t:
            for i in range(4 * s, 4 * s + 4):
                add(t, f'{i:06d}.jpg', jpeg(i))
                add(t, f'{i:06d}.cls', str(i % 6).encode())
                add(t, f'{i:06d}.json', json.dumps(records()[i]).encode())
    split = dict(name='train', num_samples=N, filenames=names, shard_lengths=[4, 4])
    (root / '_info.json').write_text(json.dumps({'splits': {'train': split, 'alt': dict(split, name='alt', alt_label='alt')}}))
    return root


def targets(ds):
    return [t for _, t in ds]


@pytest.mark.parametrize('reader', ['hfds', 'hfids'])
def test_hf_target_keys(hf_root, reader):
    ds = hf_dataset(hf_root, reader, target_key='labels')
    assert ds.reader.class_to_idx['scab'] == 5 and targets(ds) == LABELS
    ds = hf_dataset(hf_root, reader, target_key='person,dark,output/pollen')
    assert ds.reader.class_to_idx == {'person': 0, 'dark': 1, 'output/pollen': 2}
    r = records()
    assert targets(ds) == [[k for k, v in enumerate((x['person'], x['dark'], x['output']['pollen'])) if v > 0] for x in r]
    ds = hf_dataset(hf_root, reader, target_key='boxes/category', class_map={n: 5 - i for i, n in enumerate(NAMES)})
    assert targets(ds) == [[5 - c for c in labels] for labels in LABELS]  # a path into a list of records, names remapped
    ds = hf_dataset(hf_root, reader, target_key='multihot', target_format='multihot', class_map={i: 5 - i for i in range(6)},
                    target_transform=MultiLabelTarget(6, dense=True))
    torch.testing.assert_close(torch.stack(targets(ds)), torch.tensor([multihot(l) for l in LABELS]).flip(1))
    with pytest.raises(ValueError, match='not found in dataset features'):
        hf_dataset(hf_root, reader, target_key='person,nope')
    with pytest.raises(ValueError, match='Unknown target format'):
        hf_dataset(hf_root, reader, target_key='multihot', target_format='dense')


def test_wds_targets(wds_root):
    root = str(wds_root)
    assert targets(create_dataset('wds/', root=root, split='train')) == [i % 6 for i in range(N)]  # the .cls file
    assert targets(create_dataset('wds/', root=root, split='train', target_key='cls')) == [(i + 1) % 6 for i in range(N)]
    assert targets(create_dataset('wds/', root=root, split='train', target_key='labels')) == LABELS
    assert targets(create_dataset('wds/', root=root, split='alt')) == [i % 2 for i in range(N) if i != 3]  # -1: left out
    assert targets(create_dataset('wds/', root=root, split='alt', target_key='labels')) == LABELS
    ds = create_dataset('wds/', root=root, split='train', target_key='person,dark')
    assert ds.reader.class_to_idx == {'person': 0, 'dark': 1}
    assert targets(ds)[5] == [0, 1]
    ds = create_dataset('wds/', root=root, split='train', target_key='boxes/category', class_map={i: 5 - i for i in range(6)})
    assert targets(ds) == [[5 - c for c in labels] for labels in LABELS]
    ds = create_dataset('wds/', root=root, split='train', target_key='multihot', target_format='multihot',
                        class_map={i: 5 - i for i in range(6)})
    assert targets(ds)[0] == multihot(LABELS[0])[::-1]
    with pytest.raises(ValueError, match="Target key.*'nope'.*not found"):
        targets(create_dataset('wds/', root=root, split='train', target_key='nope'))


def loader_dataset(kind, hf_root, wds_root, is_training=False):
    tt = MultiLabelTarget(6)
    if kind == 'wds':
        return create_dataset('wds/', root=str(wds_root), split='train', target_key='labels', target_transform=tt,
                              is_training=is_training, batch_size=4)
    return hf_dataset(hf_root, kind, target_key='labels', target_transform=tt)


# worker threads read map-style datasets; a stream (wds/, hfids/) runs in worker processes (timmdata.engine.threads)
MODES = [('hfds', 'process'), ('hfds', 'thread'), ('hfids', 'process'), ('wds', 'process')]


@pytest.mark.parametrize('kind,worker_mode', MODES)
@pytest.mark.parametrize('prefetch', [True, False])
def test_loader_targets(hf_root, wds_root, kind, worker_mode, prefetch):
    "Evaluation order: every sample's multi-hot target, batched by fast_collate (prefetcher) or the default collate."
    ds = loader_dataset(kind, hf_root, wds_root)
    workers = 1 if kind != 'hfds' else 2  # a stream of two shards (wds) / two parquet files feeds at most 2 workers
    loader = create_loader(ds, input_size=(3, 16, 16), batch_size=4, num_workers=workers, worker_mode=worker_mode,
                           use_prefetcher=prefetch, device=torch.device('cpu'))
    got = [t for _, t in loader]
    assert all(t.dtype == torch.float32 and t.shape[1:] == (6,) for t in got)
    torch.testing.assert_close(torch.cat(got), torch.tensor([multihot(l) for l in LABELS]))


@pytest.mark.parametrize('kind,worker_mode', [m for m in MODES if m[0] != 'hfids'])
@pytest.mark.parametrize('cutmix', [False, True])
def test_loader_mixup(hf_root, wds_root, kind, worker_mode, cutmix):
    "Training: FastCollateMixup as the collate (prefetcher) and Mixup on the batch mix multi-hot rows; a label every sample has stays 1."
    args = dict(mixup_alpha=0. if cutmix else 1., cutmix_alpha=1. if cutmix else 0., label_smoothing=0., num_classes=6,
                multi_label=True)
    for prefetch in (True, False):
        ds = loader_dataset(kind, hf_root, wds_root, is_training=True)
        loader = create_loader(ds, input_size=(3, 16, 16), batch_size=4, is_training=True, no_aug=True, num_workers=2,
                               worker_mode=worker_mode, use_prefetcher=prefetch, device=torch.device('cpu'),
                               collate_fn=FastCollateMixup(**args) if prefetch else None)
        mix = None if prefetch else Mixup(**args)
        n, mixed = 0, False
        for x, t in loader:
            if mix is not None:
                x, t = mix(x.float(), t)
            assert t.shape == (4, 6) and t.dtype == torch.float32
            assert torch.all((t >= 0) & (t <= 1)) and torch.all(t[:, SHARED] == 1)
            mixed |= bool(((t > 0) & (t < 1)).any())
            n += len(t)
        assert n == N
        assert mixed or cutmix  # mixup's lam from Beta(1, 1) is never 0 or 1 (a cutmix box may cover all or nothing)


@pytest.mark.parametrize('prefetch', [False, True])
@pytest.mark.parametrize('is_training', [False, True])
def test_naflex_multilabel(hf_root, prefetch, is_training):
    ds = hf_dataset(hf_root, 'hfds', target_key='labels', target_transform=MultiLabelTarget(6))
    mixup = NaFlexMixup(num_classes=6, multi_label=True, mixup_alpha=1., cutmix_alpha=0.) if is_training else None
    loader = create_naflex_loader(ds, patch_size=4, train_seq_lens=(4, 9), max_seq_len=9, batch_size=8,
                                  is_training=is_training, mixup_fn=mixup, no_aug=True, num_workers=0,
                                  use_prefetcher=prefetch, device=torch.device('cpu'))
    batches = list(loader)
    assert batches
    for _, t in batches:
        assert t.ndim == 2 and t.shape[1] == 6 and t.dtype == torch.float32 and torch.all((t >= 0) & (t <= 1))
    if not is_training:
        torch.testing.assert_close(torch.cat([t for _, t in batches]), torch.tensor([multihot(l) for l in LABELS]))


def test_reader_paths():
    "timm's module paths under timmdata.readers, with timm's names."
    from timmdata.readers.class_map import remap_dense_target, remap_labels, remap_target, load_class_map
    from timmdata.readers.targets import get_field, has_field, multi_field_target, parse_target_keys, check_target_format
    from timmdata.readers.reader_wds import ReaderWds
    from timmdata.readers.reader_hfds import ReaderHfds
    from timmdata.readers.reader_hfids import ReaderHfids
    from timmdata.readers.reader_image_folder import ReaderImageFolder
    from timmdata.readers.reader_image_in_tar import ReaderImageInTar
    from timmdata.readers.reader_factory import create_reader
    from timmdata.readers.img_extensions import get_img_extensions
    from timmdata.readers import FolderReader, MAX_JSON_BYTES, create_reader as cr  # today's names still there
    assert ReaderImageFolder is FolderReader and create_reader is cr
    assert remap_labels(np.array([2, 5]), {i: 5 - i for i in range(6)}) == [3, 0]
    assert get_field({'a/b': 1, 'a': {'b': 2}}, 'a/b') == 1


class ListReader:
    "A reader kind of this test (files named *.mltest: one image path per line) whose targets are label lists."
    def __init__(self, root, class_map=None, **kw):
        self.root, self.paths = root, open(root).read().split()
        self.class_to_idx = {n: i for i, n in enumerate(NAMES)}

    def __len__(self): return len(self.paths)
    def __getitem__(self, i): return self.paths[i], LABELS[i]
    @property
    def targets(self): return [LABELS[i] for i in range(len(self))]
    def filename(self, i, basename=False, absolute=False): return self.paths[i]
    def filenames(self, basename=False, absolute=False): return list(self.paths)


def test_shards_writer_multilabel(tmp_path):
    "`timmdata shards` writes label lists as .json sidecars and names them the split's alt_label: read back as lists."
    from timmdata.readers import register_reader
    from timmdata.tools.shards import write_shards
    for i in range(N):
        (tmp_path / f'{i}.jpg').write_bytes(jpeg(i))
    (tmp_path / 'list.mltest').write_text('\n'.join(str(tmp_path / f'{i}.jpg') for i in range(N)))
    register_reader('mltest', ListReader, lambda root: str(root).endswith('.mltest'))
    write_shards(tmp_path / 'list.mltest', tmp_path / 'shards', shard_size=3, workers=0)
    info = json.loads((tmp_path / 'shards' / '_info.json').read_text())
    assert info['splits']['train']['alt_label'] == 'labels'
    ds = create_dataset('wds/', root=str(tmp_path / 'shards'), split='train')
    assert sorted(map(sorted, targets(ds))) == sorted(map(sorted, LABELS))


def test_shard_reader_refuses_json_targets(wds_root, tmp_path):
    "The map-style shard reader reads .cls integers: a split whose targets are JSON fields (alt_label) is refused, not read as -1."
    from timmdata.index.shard_index import ShardReader
    assert ShardReader(str(wds_root), split='train', index_dir=str(tmp_path)).targets == [i % 6 for i in range(N)]
    with pytest.raises(ValueError, match="alt_label 'alt'.*create_dataset"):
        ShardReader(str(wds_root), split='alt', index_dir=str(tmp_path))


@pytest.mark.parametrize('prefetch', [True, False])
def test_alt_label_skip_in_training(wds_root, prefetch):
    "Training on a split whose alt_label is -1 for a sample: the sample is left out by the collate, the epoch's count kept."
    ds = create_dataset('wds/', root=str(wds_root), split='alt', is_training=True, batch_size=4)
    loader = create_loader(ds, input_size=(3, 16, 16), batch_size=4, is_training=True, no_aug=True, num_workers=2,
                           use_prefetcher=prefetch, device=torch.device('cpu'))
    got = sorted(int(v) for _, t in loader for v in t)
    assert got == sorted(i % 2 for i in range(N) if i != 3)
