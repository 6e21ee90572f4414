"""Issue 44, the real multi-process check at the largest scale this machine allows (slow): 8 gloo ranks x 2 workers
over 2,000 small shards through a local HTTP server with ranged reads and a node's shard cache (one cache folder, as one
node's ranks share it). Every sample exactly once in an epoch; the requests the node makes within 10% of what the
simulator (`timmdata.tools.simulate`) predicts for the same configuration; a rescale mid-epoch (8 x 2 -> 6 x 1) keeping
every remaining sample exactly once."""
import io, json, os, subprocess, sys, tarfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'bench'))
from bench_startup_requests import CountingServer  # the bench's counting server: one definition

SHARDS, PER, BATCH, STOP = 2000, 2, 5, 10  # 4,000 samples; 8 ranks x 5 = 40 a global batch: 100 of them; stop after 10

SCRIPT = r'''
import json, os, sys
import torch.distributed as dist
from timmdata.dataset_factory import create_dataset
from timmdata.loader import create_loader
url, cache, out, bs, workers, stop, tag = sys.argv[1:8]
bs, workers, stop = int(bs), int(workers), int(stop)
dist.init_process_group('gloo')
rank = dist.get_rank()
ds = create_dataset('wds/scale', root=url, split='train', is_training=True, batch_size=bs, cache_dir=cache, cache_limit='2GB')
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
with open(os.path.join(out, f'{tag}-rank{rank}.json'), 'w') as f: json.dump(dict(order=ds.order, ys=ys), f)
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


def _run(tmp, url, nproc, workers, tag):
    env = dict(os.environ, GLOO_SOCKET_IFNAME='lo', OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get('PYTHONPATH', '')]))
    p = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc-per-node', str(nproc),
                        str(tmp / 'scale.py'), url, str(tmp / 'cache'), str(tmp), str(BATCH), str(workers), str(STOP), tag],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    errors = [l for l in p.stdout.splitlines() if 'Error' in l and 'ChildFailedError' not in l]
    assert p.returncode == 0, '\n'.join(errors[-20:]) + '\n' + p.stdout[-2000:]
    runs = [json.loads((tmp / f'{tag}-rank{r}.json').read_text()) for r in range(nproc)]
    assert {r['order'] for r in runs} == {'global'}
    return [r['ys'] for r in runs]


@pytest.mark.slow
def test_eight_ranks_two_thousand_shards_over_http(tmp_path):
    from timmdata.streams.global_order import GlobalOrder
    from timmdata.tools.simulate import cache_replay, node_accesses
    root = tmp_path / 'shards'; root.mkdir()
    _write(root)
    (tmp_path / 'scale.py').write_text(SCRIPT)
    n = SHARDS * PER
    srv = CountingServer(root)
    try:
        first = _run(tmp_path, srv.url, 8, 2, 'first')
        counts = srv.snapshot()
        srv.reset()
        resumed = _run(tmp_path, srv.url, 6, 1, 'resumed')
    finally:
        srv.close()
    # every sample exactly once in the epoch (4,000 = 100 global batches of 40: no wrap-round)
    assert [len(ys) for ys in first] == [n // (8 * BATCH)] * 8
    labels = sorted(v for ys in first for b in ys for v in b)
    assert len(labels) == n and labels == list(range(n))
    # the requests of the node (all 8 ranks here): as the simulator predicts, within 10%
    order = GlobalOrder([PER] * SHARDS, 42, 0, 0, 8)
    acc, _, _, _ = node_accesses(order, BATCH, 8, range(8))
    predicted = 8 + cache_replay(acc, np.full(SHARDS, 4096), None)['downloads']  # _info.json per rank + downloads
    measured = sum(counts.values())
    print(f'requests of the node: measured {measured} ({counts}), the simulator predicts {predicted}')
    assert abs(measured - predicted) <= 0.1 * predicted, (measured, predicted, counts)
    # the rescale: 10 global batches on 8 x 2, the rest on 6 x 1 (3,600 = 120 global batches of 30): each sample once
    head = [v for ys in first for b in ys[:STOP] for v in b]
    tail = [v for ys in resumed for b in ys for v in b]
    assert len(head) == STOP * 8 * BATCH and len(tail) == n - len(head)
    assert sorted(head + tail) == list(range(n))
