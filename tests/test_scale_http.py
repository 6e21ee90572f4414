"""Issue 44, the real multi-process check at the largest scale this machine allows (slow): 8 gloo ranks x 2 workers
over 2,000 small shards with a dataset index, as 4 nodes of 2 ranks: each node its own shard cache folder and its own
counting HTTP server (answering ranged reads) over the same shards, and the node-aware global order (partitions=4).
Every sample exactly once in an epoch; each node's requests within 10% of what the simulator (`timmdata.tools.simulate`)
predicts for the same configuration, and each shard downloaded by about one node; a rescale mid-epoch (8 x 2 -> 6 x 1,
3 nodes, the order's 4 partitions taken from the state) keeping every remaining sample exactly once."""
import io, json, os, subprocess, sys, tarfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'bench'))
from bench_startup_requests import CountingServer  # the bench's counting server: one definition

SHARDS, PER, BATCH, STOP = 2000, 2, 5, 10  # 4,000 samples; 8 ranks x 5 = 40 a global batch: 100 of them; stop after 10
NODE, PARTS = 2, 4  # ranks a node; the order's canonical partitions (the first run's nodes)

SCRIPT = r'''
import json, os, sys
import torch.distributed as dist
from timmdata.dataset_factory import create_dataset
from timmdata.loader import create_loader
urls, cache, out, bs, workers, stop, tag, node, parts = sys.argv[1:10]
bs, workers, stop, node = int(bs), int(workers), int(stop), int(node)
dist.init_process_group('gloo')
rank = dist.get_rank()
url, cache = urls.split(',')[rank // node], os.path.join(cache, f'node{rank // node}')  # a node's server and cache
extra = {} if tag == 'resumed' else dict(partitions=int(parts))  # resumed: the state's partitions
ds = create_dataset('wds/scale', root=url, split='train', is_training=True, batch_size=bs, cache_dir=cache,
                    cache_limit='2GB', **extra)
loader = create_loader(ds, (3, 24, 24), bs, is_training=True, num_workers=workers, distributed=True, device='cpu',
                       persistent_workers=False)
sd_path = os.path.join(out, 'state.json')
if tag == 'resumed':
    with open(sd_path) as f: loader.load_state_dict(json.load(f))
ys = []
for _, y in loader:
    ys.append(y.tolist())
    if tag == 'first' and len(ys) == stop and rank == 0:
        with open(sd_path, 'w') as f: json.dump(loader.state_dict(), f)
with open(os.path.join(out, f'{tag}-rank{rank}.json'), 'w') as f:
    json.dump(dict(order=ds.order, partitions=ds.partitions, spans=ds._spans is not None, ys=ys), f)
dist.barrier(); dist.destroy_process_group()
'''


def _write(root: Path):
    "2,000 shards of 2 samples; each sample's label is its own index (so a label names the sample), `_info.json` with lengths."
    from timmdata.tools.sample_data import make_sample_image
    buf = io.BytesIO()
    make_sample_image(0, 0, (32, 24)).save(buf, 'JPEG', quality=80)
    jpg, names = buf.getvalue(), []
    for s in range(SHARDS):
        names.append(f'scale-train-{s:06d}.tar')
        with tarfile.open(root / names[-1], 'w', format=tarfile.USTAR_FORMAT) as t:
            for i in range(s * PER, (s + 1) * PER):
                for ext, data in (('jpg', jpg), ('cls', str(i).encode())):
                    ti = tarfile.TarInfo(f'{i:08d}.{ext}'); ti.size = len(data); t.addfile(ti, io.BytesIO(data))
    split = {'name': 'train', 'num_samples': SHARDS * PER, 'filenames': names, 'shard_lengths': [PER] * SHARDS}
    (root / '_info.json').write_text(json.dumps({'name': 'scale', 'splits': {'train': split}}))
    from timmdata.index.dataset_index import write_dataset_index
    write_dataset_index(root, progress=False)  # samples read by their spans from the nodes' cached copies


def _run(tmp, urls, nproc, workers, tag):
    env = dict(os.environ, GLOO_SOCKET_IFNAME='lo', OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get('PYTHONPATH', '')]))
    p = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc-per-node', str(nproc),
                        str(tmp / 'scale.py'), ','.join(urls), str(tmp / 'cache'), str(tmp), str(BATCH), str(workers), str(STOP), tag,
                        str(NODE), str(PARTS)],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    errors = [l for l in p.stdout.splitlines() if 'Error' in l and 'ChildFailedError' not in l]
    assert p.returncode == 0, '\n'.join(errors[-20:]) + '\n' + p.stdout[-2000:]
    runs = [json.loads((tmp / f'{tag}-rank{r}.json').read_text()) for r in range(nproc)]
    assert {r['order'] for r in runs} == {'global'} and {r['partitions'] for r in runs} == {PARTS}
    assert all(r['spans'] for r in runs)  # read by spans from the cached copies
    return [r['ys'] for r in runs]


@pytest.mark.slow
def test_eight_ranks_two_thousand_shards_over_http(tmp_path):
    from timmdata.streams.global_order import GlobalOrder
    from timmdata.tools.simulate import _reads_per_shard, cache_replay, node_accesses
    root = tmp_path / 'shards'; root.mkdir()
    _write(root)
    (tmp_path / 'scale.py').write_text(SCRIPT)
    n, nodes = SHARDS * PER, 8 // NODE
    servers = [CountingServer(root) for _ in range(nodes)]  # one a node: its requests counted apart
    try:
        first = _run(tmp_path, [s.url for s in servers], 8, 2, 'first')
        counts = [s.snapshot() for s in servers]
        for s in servers:
            s.reset()
        resumed = _run(tmp_path, [s.url for s in servers], 6, 1, 'resumed')
    finally:
        for s in servers:
            s.close()
    # every sample exactly once in the epoch (4,000 = 100 global batches of 40: no wrap-round)
    assert [len(ys) for ys in first] == [n // (8 * BATCH)] * 8
    labels = sorted(v for ys in first for b in ys for v in b)
    assert len(labels) == n and labels == list(range(n))
    # each node's requests: as the simulator predicts, within 10%: _info.json a rank, the table once, and for each
    # shard the node reads its download and its spans, once each (the node cache)
    order = GlobalOrder([PER] * SHARDS, 42, 0, 0, 8, PARTS)
    total_downloads = 0
    for k in range(nodes):
        acc, _, _, _ = node_accesses(order, BATCH, 8, range(k * NODE, (k + 1) * NODE))
        d = cache_replay(acc, np.full(SHARDS, 4096), None)['downloads']
        predicted, measured = NODE + 1 + 2 * d, sum(counts[k].values())
        print(f'node {k}: requests measured {measured} ({counts[k]}), the simulator predicts {predicted}')
        assert abs(measured - predicted) <= 0.1 * predicted, (k, measured, predicted, counts[k])
        total_downloads += counts[k].get('GET', 0) - NODE - 1
    egress = _reads_per_shard(order, BATCH, 8, NODE)['egress_x_dataset']
    print(f'shards downloaded {total_downloads} of {SHARDS} ({total_downloads / SHARDS:.2f}x), the simulator predicts {egress:.2f}x')
    assert total_downloads <= 1.1 * egress * SHARDS and egress < 1.2  # each shard by about one node, not every node
    # the rescale: 10 global batches on 8 x 2, the rest on 6 x 1 (3,600 = 120 global batches of 30): each sample once
    head = [v for ys in first for b in ys[:STOP] for v in b]
    tail = [v for ys in resumed for b in ys for v in b]
    assert len(head) == STOP * 8 * BATCH and len(tail) == n - len(head)
    assert sorted(head + tail) == list(range(n))
