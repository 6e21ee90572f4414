"""Multi-node streaming on a real engine: `torchrun --nnodes 2 --nproc-per-node 2` launched as two "node" processes on
localhost (c10d rendezvous, gloo), 2 loader workers per rank, one shard set, 2 epochs through create_loader."""
import json, os, subprocess, sys, textwrap
from pathlib import Path
import pytest

pytest.importorskip('webdataset')
from test_streaming import write_timm_shards
from _helpers import free_port

# 4 ranks x 2 workers = 8 global workers; 16 shards of 12 = 192 samples: 2 shards, 24 samples = 6 batches of 4 per worker
N_SHARDS, PER_SHARD, BATCH = 16, 12, 4

RANK_SCRIPT = textwrap.dedent('''
    import json, os, sys
    import torch.distributed as dist
    from timmdata.loader import create_loader
    from timmdata.streams.streaming import IterableImageDataset
    def main():  # guarded: forkserver and spawn (Python 3.14, macOS) import the script again in each loader worker
        root, out, start = sys.argv[1], sys.argv[2], sys.argv[3]
        if start != 'default':
            import multiprocessing; multiprocessing.set_start_method(start, force=True)
        dist.init_process_group('gloo')
        rank = dist.get_rank()
        ds = IterableImageDataset(root, reader='wds/toy', is_training=True, batch_size=4, shuffle_size=64, shuffle_initial=16)
        loader = create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=2, distributed=True, device='cpu')
        res = {'world': dist.get_world_size(), 'len': len(loader), 'epochs': []}
        for epoch in range(2):
            ds.set_epoch(epoch)
            ys = [y.tolist() for _, y in loader]
            res['epochs'].append(ys)
            dist.barrier()
        with open(os.path.join(out, f'rank{rank}.json'), 'w') as f: json.dump(res, f)
        dist.destroy_process_group()
    if __name__ == '__main__':
        main()
''')


# forkserver (Python 3.14's default start method) with the slow tests: `make ft-test` runs it where it is the default
@pytest.mark.slow  # two "nodes" of two processes each, launched by torchrun
@pytest.mark.parametrize('start', ['default', pytest.param('forkserver', marks=pytest.mark.slow)])
def test_torchrun_two_nodes(tmp_path, start):
    "With the platform's start method and with forkserver (Python 3.14's default on Linux), whose workers have no process"
    " group: each rank's workers read that rank's share, not the whole dataset (fixed: the stream carries the rank's view)."
    root = write_timm_shards(tmp_path / 'shards', n_shards=N_SHARDS, per_shard=PER_SHARD)
    script = tmp_path / 'rank.py'; script.write_text(RANK_SCRIPT)
    out = tmp_path / 'out'; out.mkdir()
    port = free_port()
    env = dict(os.environ, GLOO_SOCKET_IFNAME='lo', OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get('PYTHONPATH', '')]))
    nodes = [subprocess.Popen([sys.executable, '-m', 'torch.distributed.run', '--nnodes', '2', '--nproc-per-node', '2',
                               '--node-rank', str(n), '--rdzv-backend', 'c10d', '--rdzv-endpoint', f'127.0.0.1:{port}',
                               '--rdzv-id', 'timmdata-test', '--rdzv-conf', f'is_host={int(n == 0)}',
                               '--max-restarts', '0', '--monitor-interval', '0.2', str(script), str(root), str(out), start],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n in (0, 1)]
    logs = []
    try:
        for p in nodes: logs.append(p.communicate(timeout=240)[0])
    finally:
        for p in nodes:
            if p.poll() is None: p.kill()
    assert all(p.returncode == 0 for p in nodes), '\n----\n'.join(l[-3000:] for l in logs)
    ranks = [json.loads((out / f'rank{r}.json').read_text()) for r in range(4)]
    assert all(r['world'] == 4 for r in ranks)
    n = N_SHARDS * PER_SHARD
    for r in ranks:  # every rank: the same number of batches, all full, as its len() says
        assert r['len'] == n // 4 // BATCH
        assert [len(e) for e in r['epochs']] == [r['len']] * 2
        assert all(len(b) == BATCH for e in r['epochs'] for b in e)
    orders = []
    for e in range(2):
        seen = [y for r in ranks for b in r['epochs'][e] for y in b]
        assert sorted(seen) == list(range(n)), f'epoch {e}: not every sample exactly once'
        orders.append([[y for b in r['epochs'][e] for y in b] for r in ranks])
    assert orders[0] != orders[1]
    for r in range(4): assert orders[0][r] != orders[1][r]  # each rank's order changes, not only the shard deal
