"""Elastic streams (issue 30): IterableImageDataset's global order (the training default where shards can be read by position;
order='global') gives one global order per epoch whatever the ranks and workers, and a state_dict() saved on one layout resumes
on another. Ranks are simulated with the dataset's rank/world_size."""
import http.server, io, json, os
from pathlib import Path
import pytest, torch
from PIL import Image
from timmdata.loader import create_loader
from timmdata.streams.streaming import IterableImageDataset
from _helpers import http_folder, write_shards

N_SHARDS, PER_SHARD, N = 10, 5, 50  # 50 samples; global batch 12: 5 global batches, the last wrapping 10 into the next pass


@pytest.fixture(scope='module')
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp('elastic')
    b = io.BytesIO(); Image.new('RGB', (20, 16), (90, 30, 60)).save(b, 'JPEG'); jpg = b.getvalue()
    write_shards(root, 'el', N_SHARDS, PER_SHARD, lambda i, s: jpg)
    return root


def _loader(root, rank, world, batch_size, workers):
    ds = IterableImageDataset(str(root), reader='wds/el', split='train', is_training=True, batch_size=batch_size, order='global',
                              block_shards=3, rank=rank, world_size=world)
    return create_loader(ds, (3, 16, 16), batch_size, is_training=True, num_workers=workers, device='cpu')


def _run(root, world, batch_size, workers, stop=None, sd=None, epoch=0):
    "Global batches (targets of every rank's t-th batch, rank after rank) and rank 0's state after `stop` batches."
    per_rank, states = [], []
    for r in range(world):
        dl = _loader(root, r, world, batch_size, workers)
        if sd is not None: dl.load_state_dict(json.loads(json.dumps(sd)))
        dl.set_epoch(epoch)
        out = []
        for _, y in dl:
            out.append(y.tolist())
            if len(out) == stop: break
        states.append(dl.state_dict()); per_rank.append(out)
    assert all(len(o) == len(per_rank[0]) for o in per_rank)  # ranks in lockstep
    assert all(json.dumps(s) == json.dumps(states[0]) for s in states)  # any rank's state will do
    return [sum((o[t] for o in per_rank), []) for t in range(len(per_rank[0]))], states[0]


def test_same_global_order_for_any_ranks_and_workers(shards):
    "Global batch 12 on 1x1, 2x2 (batch 6), 3x1 and 1x3 (batch 12 / 4): the same global batches; the epoch holds every sample."
    ref, _ = _run(shards, 1, 12, 0)
    assert len(ref) == 5 and all(len(b) == 12 for b in ref)
    flat = sum(ref, [])
    assert sorted(flat[:N]) == list(range(N))  # the first pass: every sample once; the last 10 wrap into the next pass
    for world, bs, workers in [(2, 6, 2), (3, 4, 1), (1, 12, 3)]:
        got, _ = _run(shards, world, bs, workers)
        assert got == ref, (world, bs, workers)
    other, _ = _run(shards, 1, 12, 0, epoch=1)
    assert len(other) == 5 and other != ref  # a new epoch, a new order


@pytest.mark.parametrize('world,bs,workers', [(1, 12, 3), (3, 4, 1)])
def test_cut_on_2x2_resumes_elsewhere(shards, world, bs, workers):
    "Cut after 2 global batches on 2 ranks x 2 workers; resumed on another layout with the global batch (12) kept: the same batches."
    ref, _ = _run(shards, 2, 6, 2)
    head, sd = _run(shards, 2, 6, 2, stop=2)
    assert sd['samples_delivered'] == 24 and json.loads(json.dumps(sd)) == sd
    tail, _ = _run(shards, world, bs, workers, sd=sd)
    assert len(head) == 2 and len(tail) == 3 and head + tail == ref


def test_resume_with_another_global_batch(shards):
    "Resumed with global batch 8 instead of 12: every remaining sample of the epoch's order once, in the order (the rule)."
    ref, _ = _run(shards, 1, 12, 0)
    head, sd = _run(shards, 2, 6, 2, stop=2)
    tail, _ = _run(shards, 2, 4, 1, sd=sd)
    rest = sum(tail, [])
    assert sum(head, []) == sum(ref[:2], [])
    assert len(rest) == 32 and rest[:26] == sum(ref, [])[24:N]  # the 26 samples left of the pass, then the next pass's start


def test_partitions_come_with_the_state(shards):
    "A node-aware order (partitions=2, as 2 nodes of 2 ranks) cut after 2 global batches, resumed on 3 ranks with the"
    " partitions left to the default: the state's partitions are taken, every sample of the epoch comes once; built with"
    " other partitions, the load is refused by name."
    def run(world, bs, parts, stop=None, sd=None):
        per_rank, states = [], []
        for r in range(world):
            ds = IterableImageDataset(str(shards), reader='wds/el', split='train', is_training=True, batch_size=bs,
                                      order='global', block_shards=3, rank=r, world_size=world, partitions=parts)
            dl = create_loader(ds, (3, 16, 16), bs, is_training=True, num_workers=1, device='cpu')
            if sd is not None:
                dl.load_state_dict(json.loads(json.dumps(sd)))
            out = []
            for _, y in dl:
                out.append(y.tolist())
                if len(out) == stop:
                    break
            states.append(dl.state_dict()); per_rank.append(out)
            assert ds.partitions == 2
        return [v for o in per_rank for b in o for v in b], states[0]
    full, _ = run(4, 3, 2)
    assert len(full) == 60 and set(full) == set(range(N))  # 5 global batches of 12: the pass, then 10 of the next
    head, sd = run(4, 3, 2, stop=2)
    assert sd['fingerprint']['partitions'] == 2 and sd['samples_delivered'] == 24
    tail, _ = run(3, 4, None, sd=sd)
    assert len(head) == 24 and len(tail) == 36
    assert sorted(head + tail) == sorted(full)  # the epoch's samples, each as often as in the run left alone
    from timmdata.engine.resume import ResumeStateError
    ds = IterableImageDataset(str(shards), reader='wds/el', split='train', is_training=True, batch_size=4, order='global',
                              block_shards=3, rank=0, world_size=3, partitions=3)
    with pytest.raises(ValueError, match='built with partitions=3'):
        create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=0, device='cpu').load_state_dict(sd)


def test_shards_order_still_refuses_another_layout(shards):
    "order='shards' keeps its rule: a state from 2 ranks does not load on 3."
    from timmdata.engine.resume import ResumeStateError
    def mk(r, world):
        ds = IterableImageDataset(str(shards), reader='wds/el', split='train', is_training=True, batch_size=4, rank=r, world_size=world,
                                  order='shards')
        return create_loader(ds, (3, 16, 16), 4, is_training=True, num_workers=0, device='cpu')
    dl = mk(0, 2); it = iter(dl); next(it); sd = dl.state_dict(); del it
    assert 'samples_delivered' not in sd
    with pytest.raises(ResumeStateError, match='stream'): mk(0, 3).load_state_dict(sd)


def test_default_is_global_and_its_fallback(shards):
    "The training default reads local shards in the global order; a pipe: stream falls back to order='shards', warned once, and refuses an elastic state."
    import warnings
    from timmdata.engine.resume import ResumeStateError
    mk = lambda root, **kw: IterableImageDataset(root, reader='wds/el', is_training=True, batch_size=6, rank=0, world_size=2, **kw)
    ds = mk(str(shards), split='train')
    assert ds.order == 'global' and ds.elastic and ds._spans is not None  # read by position: the member-offset index
    dl = create_loader(ds, (3, 16, 16), 6, is_training=True, num_workers=0, device='cpu')
    it = iter(dl); next(it); sd = dl.state_dict(); del it
    assert sd['samples_delivered'] == 12
    pipe = 'pipe:cat ' + str(shards) + '/el-train-{000000..000009}.tar'
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        fb = [mk(pipe, split='', num_samples=50) for _ in range(2)]
    assert [x.order for x in fb] == ['shards', 'shards'] and len([x for x in w if 'order=' in str(x.message)]) == 1  # warned once
    assert 'pipe: stream' in str(w[0].message)
    with pytest.raises(ResumeStateError, match="order: saved 'global', this loader None"):
        create_loader(fb[0], (3, 16, 16), 6, is_training=True, num_workers=0, device='cpu').load_state_dict(sd)


class _Ranged(http.server.SimpleHTTPRequestHandler):
    "Answers ranged GETs (206), as object stores and most web servers do (Python's own http.server does not)."
    def log_message(self, *a): pass
    def do_GET(self):
        rng, path = self.headers.get('Range'), self.translate_path(self.path)
        if not rng or not os.path.isfile(path): return super().do_GET()
        a, b = map(int, rng.split('=', 1)[1].split('-'))
        with open(path, 'rb') as f: f.seek(a); data = f.read(b + 1 - a)
        self.send_response(206); self.send_header('Content-Length', str(len(data)))
        self.send_header('Content-Range', f'bytes {a}-{a + len(data) - 1}/{os.path.getsize(path)}'); self.end_headers(); self.wfile.write(data)


def test_global_order_over_http(shards, tmp_path):
    "Shards over HTTP: with ranged reads, the default global order gives the local run's batches; without them, order='shards' (warned)."
    import warnings
    mk = lambda root, i: IterableImageDataset(root, reader='wds/el', split='train', is_training=True, batch_size=12, block_shards=3,
                                              index_dir=str(tmp_path / i))
    with http_folder(shards, _Ranged) as ranged, http_folder(shards) as plain:
        ds = mk(ranged, 'a')
        assert ds.order == 'global'
        got = [y.tolist() for _, y in create_loader(ds, (3, 16, 16), 12, is_training=True, num_workers=0, device='cpu')]
        assert got == _run(shards, 1, 12, 0)[0]
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            assert mk(plain, 'b').order == 'shards'
        assert any('ignores ranged reads' in str(x.message) and "order='shards'" in str(x.message) for x in w)


ELASTIC_SCRIPT = '''
import json, os, sys
import torch.distributed as dist
from timmdata.loader import create_loader
from timmdata.streams.streaming import IterableImageDataset
root, out, bs, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dist.init_process_group('gloo')
rank = dist.get_rank()
ds = IterableImageDataset(root, reader='wds/el', split='train', is_training=True, batch_size=bs, order='global', block_shards=3)
loader = create_loader(ds, (3, 16, 16), bs, is_training=True, num_workers=2, distributed=True, device='cpu')
sd_path = os.path.join(out, 'state.json')
if os.path.exists(sd_path):
    with open(sd_path) as f: loader.load_state_dict(json.load(f))
ys = []
for _, y in loader:
    ys.append(y.tolist())
    if len(ys) == stop: break
if rank == 0 and stop:
    with open(sd_path, 'w') as f: json.dump(loader.state_dict(), f)
with open(os.path.join(out, f'run{dist.get_world_size()}-rank{rank}.json'), 'w') as f: json.dump(ys, f)
dist.barrier(); dist.destroy_process_group()
'''


@pytest.mark.slow
def test_torchrun_2x2_resumes_as_1x2(shards, tmp_path):
    "torchrun: 2 ranks x 2 workers (batch 6) stopped after 2 batches, resumed by 1 rank x 2 workers (batch 12): the uninterrupted global batches."
    import os, subprocess, sys
    script = tmp_path / 'elastic.py'; script.write_text(ELASTIC_SCRIPT)
    env = dict(os.environ, GLOO_SOCKET_IFNAME='lo', OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get('PYTHONPATH', '')]))
    for nproc, bs, stop in ((2, 6, 2), (1, 12, 0)):
        p = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc-per-node', str(nproc),
                            str(script), str(shards), str(tmp_path), str(bs), str(stop)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        assert p.returncode == 0, p.stdout[-3000:]
    head = [json.loads((tmp_path / f'run2-rank{r}.json').read_text()) for r in range(2)]
    tail = json.loads((tmp_path / 'run1-rank0.json').read_text())
    assert [len(h) for h in head] == [2, 2]
    ref, _ = _run(shards, 1, 12, 0)
    assert [h0 + h1 for h0, h1 in zip(*head, strict=True)] + tail == ref
