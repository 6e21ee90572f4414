"""Map-style reading of WebDataset shards (`ShardReader`, reader kind 'shards'): a validation loader over the shards gives
exactly the samples of the folder they were written from, alone and over 2 ranks with the ordered distributed sampler."""
import pytest
import torch

import timmdata.scheduled_sampler as tss  # where create_loader's batch plan takes timm's sampler
from timmdata.dataset import ImageDataset
from timmdata.distributed_sampler import OrderedDistributedSampler
from timmdata.loader import create_loader
from timmdata.tools.sample_data import make_sample_dataset
from timmdata.tools.shards import write_shards

N_VAL = 15  # 3 classes x 5: shards of 4 hold 4, 4, 4, 3; an odd count, so 2 ranks pad with one repeat


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('shard_index')
    src = make_sample_dataset(tmp / 'src', n_train=2, n_val=5, classes=['a', 'b', 'c'], size=(48, 40))
    write_shards(src, tmp / 'shards', shard_size=4, progress=False)  # shuffled once (seeded): shard order != folder order
    return src, tmp / 'shards'


def _batches(loader):
    xs, ys = [], []
    for x, y in loader: xs.append(x.clone()); ys.append(y.clone())
    return torch.cat(xs), torch.cat(ys)


def _folder(src):
    return _batches(create_loader(ImageDataset(str(src / 'val')), 32, 4, is_training=False, num_workers=0, device='cpu'))


def _key(ds, j: int) -> int:
    "The folder index sample `j` of the shards was written from (`timmdata shards` names a sample by its source index)."
    return int(ds.reader.filename(j, basename=True).split('.')[0])


@pytest.mark.parametrize('workers', [0, 2])
def test_shards_map_style_equal_folder(data, workers):
    src, shards = data
    fx, fy = _folder(src)
    ds = ImageDataset(str(shards), reader='shards', split='val')  # timm's synonym finds 'validation'
    assert type(ds.reader).__name__ == 'ShardReader' and len(ds) == len(fy) == N_VAL
    x, y = _batches(create_loader(ds, 32, 4, is_training=False, num_workers=workers, device='cpu'))
    assert len(y) == N_VAL
    keys = [_key(ds, j) for j in range(len(ds))]
    assert sorted(keys) == list(range(N_VAL))  # every sample once
    assert keys != list(range(N_VAL))  # the shards were shuffled: the test compares by key, not by position
    for j, k in enumerate(keys):
        assert torch.equal(x[j], fx[k]), f'sample {j} (folder {k}): pixels differ'
        assert int(y[j]) == int(fy[k])


def test_shards_two_ranks_ordered_sampler(data, monkeypatch):
    "Two simulated ranks, timm's ordered distributed sampler: rank r reads r, r+2, ...; together every sample, padded by one repeat."
    src, shards = data
    fx, fy = _folder(src)
    ds = ImageDataset(str(shards), reader='shards', split='validation')
    keys = [_key(ds, j) for j in range(len(ds))]
    seen = []
    for r in range(2):
        def sampler(dataset, distributed, is_training, num_aug_repeats, r=r):
            assert distributed and not is_training
            return OrderedDistributedSampler(dataset, num_replicas=2, rank=r)
        monkeypatch.setattr(tss, 'timm_sampler', sampler)
        loader = create_loader(ds, 32, 4, is_training=False, distributed=True, num_workers=0, device='cpu', seed=0)
        x, y = _batches(loader)
        order = list(OrderedDistributedSampler(range(N_VAL), 2, r))
        assert len(order) == len(y) == 8
        for n, j in enumerate(order):
            assert torch.equal(x[n], fx[keys[j]]) and int(y[n]) == int(fy[keys[j]])
        seen += order
    assert sorted(set(seen)) == list(range(N_VAL)) and len(seen) == N_VAL + 1  # one repeat pads rank 1


def test_cut_shard_named(data, tmp_path):
    import shutil
    _, shards = data
    cut = tmp_path / 'cut'
    shutil.copytree(shards, cut)
    p = cut / 'validation-000002.tar'
    p.write_bytes(p.read_bytes()[:2500])
    with pytest.raises(OSError, match='validation-000002.tar is truncated'):
        ImageDataset(str(cut), reader='shards', split='validation')


def _gloo_rank(rank, port, shards, out):
    import json, os
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2)
    try:
        ds = ImageDataset(shards, reader='shards', split='validation')
        loader = create_loader(ds, 32, 4, is_training=False, distributed=True, num_workers=0, device='cpu')
        keys = [_key(ds, j) for j in loader.sampler] if loader.sampler is not None else None
        x, y = _batches(loader)
        torch.save({'x': x, 'y': y, 'keys': keys, 'sampler': type(loader.sampler).__name__}, os.path.join(out, f'rank{rank}.pt'))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned processes importing torch: ~14 s on 2 cores; the simulated ranks above are the fast check
def test_shards_two_ranks_gloo(data, tmp_path):
    "Two real ranks (torch.distributed, gloo): create_loader(distributed=True) picks the ordered sampler over the shards."
    import torch.multiprocessing as mp
    from _helpers import free_port
    src, shards = data
    fx, fy = _folder(src)
    port = free_port()
    mp.spawn(_gloo_rank, args=(port, str(shards), str(tmp_path)), nprocs=2, join=True)
    res = [torch.load(tmp_path / f'rank{r}.pt') for r in range(2)]
    seen = []
    for r in res:
        assert r['sampler'] == 'OrderedDistributedSampler' and len(r['keys']) == len(r['y']) == 8
        for n, k in enumerate(r['keys']):
            assert torch.equal(r['x'][n], fx[k]) and int(r['y'][n]) == int(fy[k])
        seen += r['keys']
    assert sorted(set(seen)) == list(range(N_VAL)) and len(seen) == N_VAL + 1
