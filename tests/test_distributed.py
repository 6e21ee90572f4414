"""Distributed loading for real: two processes, torch.distributed with gloo on the CPU."""
import json, os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from timmdata.distributed_sampler import OrderedDistributedSampler
from timmdata.loader import create_loader
from timmdata.tools.sample_data import make_sample_dataset
from _datasets import IndexDataset, SeedDataset
from _helpers import free_port

WORLD = 2


def _run(rank, port, root, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=WORLD)
    try:
        torch.manual_seed(0)  # both ranks seeded alike: worker seeds must still differ
        res = {}
        torch.manual_seed(10 + rank)  # ranks seeded apart (timm seeds seed + rank): the loader's seed is still rank 0's
        train = create_loader(IndexDataset(os.path.join(root, 'train')), 32, 5, is_training=True, distributed=True,
                              num_workers=0, device='cpu')
        res['train_seed'] = train.state_dict()['seed']
        torch.manual_seed(0)
        res['train_sampler'] = type(train.sampler).__name__
        res['train'] = []
        for epoch in range(2):
            train.set_epoch(epoch)
            res['train'].append([y.tolist() for _, y in train])
        val = create_loader(IndexDataset(os.path.join(root, 'val')), 32, 2, distributed=True, num_workers=0, device='cpu')
        res['val'] = torch.cat([y for _, y in val]).tolist()
        res['val_valid'] = val.sampler.num_valid_samples
        seeds = create_loader(SeedDataset(), 8, 1, num_workers=2, device='cpu')
        res['seeds'] = [int(y[0]) for _, y in seeds][:2]  # first numpy draw of worker 0 and worker 1
        with open(os.path.join(out_dir, f'rank{rank}.json'), 'w') as f: json.dump(res, f)
    finally:
        dist.destroy_process_group()


def test_distributed_two_ranks(tmp_path):
    # 4 classes x 5 train images = 20 (10 per rank, two batches of 5); 3 x 3 val images = 9 (odd: padding)
    root = make_sample_dataset(tmp_path / 'data', n_train=5, n_val=3, classes=['a', 'b', 'c', 'd'], size=(64, 48))
    import shutil
    shutil.rmtree(root / 'val' / 'd')  # 9 val images
    # forked ranks: what is checked is the loaders across ranks, not a fresh interpreter (spawn: torch imported again in
    # each rank, about 10 s of a 2-core machine)
    mp.start_processes(_run, args=(free_port(), str(root), str(tmp_path)), nprocs=WORLD, join=True, start_method='fork')
    res = [json.loads((tmp_path / f'rank{r}.json').read_text()) for r in range(WORLD)]
    assert all(r['train_sampler'] == 'DistributedSampler' for r in res)
    assert res[0]['train_seed'] == res[1]['train_seed']  # one plan for all ranks (broadcast from rank 0)
    for epoch in range(2):
        per_rank = [sum(r['train'][epoch], []) for r in res]
        assert all(len(b) == 5 for r in res for b in r['train'][epoch])
        assert set(per_rank[0]).isdisjoint(per_rank[1])
        assert sorted(per_rank[0] + per_rank[1]) == list(range(20))
    assert res[0]['train'][0] != res[0]['train'][1]  # set_epoch reshuffles
    # eval: in order, padded by wrapping round, exactly as timm's OrderedDistributedSampler
    from timm.data.distributed_sampler import OrderedDistributedSampler as TimmODS
    for r in range(WORLD):
        assert res[r]['val'] == list(TimmODS(range(9), WORLD, r)) == list(OrderedDistributedSampler(range(9), WORLD, r))
    assert res[0]['val'] == [0, 2, 4, 6, 8] and res[1]['val'] == [1, 3, 5, 7, 0]
    assert [r['val_valid'] for r in res] == [5, 4]
    # worker seeds: different per worker and per rank
    seeds = res[0]['seeds'] + res[1]['seeds']
    assert len(set(seeds)) == 4, seeds
