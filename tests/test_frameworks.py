"""timmdata's loaders inside training frameworks (issue 31): PyTorch Lightning, Hugging Face Accelerate,
torch.distributed.checkpoint (DCP) and torchdata's StatefulDataLoader protocol. Each test stops a run mid-epoch and
resumes it through the framework's own checkpoint; the resumed batches must be the uninterrupted run's, bit for bit.
The two-process Lightning and Accelerate runs are slow (`TIMMDATA_SLOW=1 python -m pytest -m slow tests/test_frameworks.py`)."""
import json, os, pickle, subprocess, sys
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _frameworks import batch_digest, load_seen, make_loader, tiny_root
from _helpers import free_port

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope='module')
def root(tmp_path_factory): return tiny_root(tmp_path_factory.mktemp('frameworks'))


def _digests(loader, epochs=(0, 1)):
    out = []
    for e in epochs:
        loader.set_epoch(e)
        out += [(e, batch_digest(x, y)) for x, y in loader]
    return out


def _env():
    return {**os.environ, 'PYTHONPATH': os.pathsep.join([os.path.dirname(HERE), HERE, os.environ.get('PYTHONPATH', '')])}


def _lightning(root, out, **kw):
    "A Lightning run in a process of its own (it may os._exit, as a killed run does)."
    subprocess.run([sys.executable, os.path.join(HERE, '_frameworks.py'), 'lightning', str(root), str(out), json.dumps(kw)],
                   check=True, env=_env(), cwd=str(out), timeout=300, capture_output=True)


# ---------------------------------------------------------------- PyTorch Lightning
@pytest.mark.slow  # the Lightning how-to (nbs/howto/10_lightning_accelerate.ipynb) resumes a Trainer from its checkpoint in make test
def test_lightning_kill_and_resume_from_step_checkpoint(root, tmp_path):
    "Killed after step 5 of 10 in epoch 0, resumed from Lightning's step-3 checkpoint: steps 4..20 as the uninterrupted run."
    pytest.importorskip('lightning')
    want = _digests(make_loader(root))  # timmdata's own batches, no framework: Lightning must deliver exactly these
    assert len(want) == 20
    _lightning(root, tmp_path, ckpt_every=3, kill_at=5, accelerator='cpu', devices=1)
    head = load_seen(tmp_path)
    assert head == want[:5]
    _lightning(root, tmp_path, ckpt_path=str(tmp_path / 'ckpt' / 'step=3.ckpt'), accelerator='cpu', devices=1)
    tail = load_seen(tmp_path)
    assert len(tail) == 17, [e for e, _ in tail]  # the resumed epoch ends where the uninterrupted one does (issue 31's bug: 14)
    assert tail == want[3:]


@pytest.mark.slow
def test_lightning_ddp_two_processes_kill_and_resume(root, tmp_path):
    "strategy='ddp' over gloo, 2 CPU processes: the loader's own DistributedSampler shards; the resumed run is exact."
    pytest.importorskip('lightning')
    kw = dict(accelerator='cpu', devices=2, strategy='ddp')
    ref = tmp_path / 'ref'; ref.mkdir()
    _lightning(root, ref, **kw)
    want = [load_seen(ref, r) for r in (0, 1)]
    assert all(len(w) == 10 for w in want)
    _lightning(root, tmp_path, ckpt_every=2, kill_at=4, **kw)
    _lightning(root, tmp_path, ckpt_path=str(tmp_path / 'ckpt' / 'step=2.ckpt'), **kw)
    for r in (0, 1): assert load_seen(tmp_path, r) == want[r][2:], r


# ---------------------------------------------------------------- Hugging Face Accelerate
def test_accelerate_prepare_and_save_state_resume(root, tmp_path):
    "prepare() hands timmdata's loader back as it is; save_state at step 7, stop at 9, load_state: steps 8..20 exact."
    pytest.importorskip('accelerate')
    from _frameworks import accelerate_run
    want = accelerate_run(root, tmp_path / 'ref')
    assert len(want) == 20 and all(sorted(sum((y for e, _, y in want if e == ep), [])) == list(range(40)) for ep in (0, 1))
    head = accelerate_run(root, tmp_path, save_at=7, stop_at=9)
    assert head == want[:9]
    tail = accelerate_run(root, tmp_path, resume=True)
    assert tail == want[7:]
    head = accelerate_run(root, tmp_path / 'edge', save_at=10, stop_at=10)  # saved after an epoch's last batch
    assert accelerate_run(root, tmp_path / 'edge', resume=True) == want[10:]


def test_accelerate_prepare_keeps_bare_dataloader(root):
    "use_prefetcher=False gives a torch DataLoader: Accelerate would re-create it (sampler, shard) but hands timmdata's back."
    pytest.importorskip('accelerate')
    from accelerate import Accelerator
    acc = Accelerator(cpu=True)
    ld = make_loader(root, use_prefetcher=False)
    assert acc.prepare(ld) is ld
    want = _digests(make_loader(root, use_prefetcher=False), epochs=(0,))
    ld.set_epoch(0)
    it = iter(ld); got = [batch_digest(*next(it)) for _ in range(3)]
    acc.register_for_checkpointing(ld)
    sd = ld.state_dict()
    ld2 = acc.prepare(make_loader(root, use_prefetcher=False)); ld2.load_state_dict(sd); ld2.set_epoch(0)
    got += [batch_digest(x, y) for x, y in ld2]
    assert got == [d for _, d in want]


def _accelerate2(root, out, **kw):
    "An Accelerate run over 2 CPU processes (torchrun, gloo)."
    # --standalone: torchrun binds its own free port (a port picked here first could be taken before it binds)
    r = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '2',
                        os.path.join(HERE, '_frameworks.py'), 'accelerate', str(root), str(out), json.dumps(kw)],
                       env=_env(), cwd=str(out), timeout=300, capture_output=True, text=True)
    assert r.returncode == 0, f'Accelerate run {kw} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}'


@pytest.mark.slow
def test_accelerate_two_processes_shard_and_resume(root, tmp_path):
    "2 processes: every sample once per epoch over the ranks; save_state at step 3 of 5, stop at 4, load_state: exact."
    pytest.importorskip('accelerate')
    ref = tmp_path / 'ref'; ref.mkdir()
    _accelerate2(root, ref)
    want = [json.load(open(ref / f'seen{r}.json')) for r in (0, 1)]
    assert all(len(w) == 10 for w in want)
    for ep in (0, 1): assert sorted(i for w in want for e, _, y in w if e == ep for i in y) == list(range(40))
    _accelerate2(root, tmp_path, save_at=3, stop_at=4)
    _accelerate2(root, tmp_path, resume=True)
    for r in (0, 1): assert json.load(open(tmp_path / f'seen{r}.json')) == want[r][3:], r


# ---------------------------------------------------------------- torch.distributed.checkpoint (DCP)
def _digest_any(b):
    "A digest of a batch: (images, targets) or NaFlex's (dict, targets)."
    x, y = b
    if isinstance(x, dict): x = torch.cat([v.flatten().float() for k, v in sorted(x.items()) if isinstance(v, torch.Tensor)])
    return batch_digest(x, y)


def _loaders(root):
    "A loader of each kind create_loader and create_naflex_loader make, with every random step on."
    from timmdata.dataset import ImageDataset
    from timmdata.naflex_loader import create_naflex_loader
    return {
        'prefetch': lambda: make_loader(root),
        'no_prefetcher': lambda: make_loader(root, use_prefetcher=False),
        'multi_epochs': lambda: make_loader(root, use_multi_epochs_loader=True),
        'scheduled': lambda: make_loader(root, input_size_choices=[16, 24], batch_size_choices=[6, 4], num_batches=8),
        'naflex': lambda: create_naflex_loader(ImageDataset(str(root)), patch_size_choices=[8], train_seq_lens=(4, 8),
                                               batch_size=4, is_training=True, re_prob=0.5, num_workers=0, device='cpu', seed=3),
    }


@pytest.mark.parametrize('kind', ['prefetch', 'no_prefetcher', 'multi_epochs', 'scheduled', 'naflex'])
def test_every_loader_is_dcp_stateful_and_json(root, kind):
    "Each loader is a torch.distributed.checkpoint Stateful; its state survives json and resumes exactly."
    from torch.distributed.checkpoint.stateful import Stateful
    make = _loaders(root)[kind]
    ref = make(); want = []
    for e in (0, 1):
        ref.set_epoch(e); want += [_digest_any(b) for b in ref]
    ld = make()
    assert isinstance(ld, Stateful)
    ld.set_epoch(0); it = iter(ld); got = [_digest_any(next(it)) for _ in range(3)]
    sd = json.loads(json.dumps(ld.state_dict()))  # plain JSON: DCP, YAML or a log line can carry it
    ld2 = make(); ld2.load_state_dict(sd)
    for e in (0, 1):
        ld2.set_epoch(e); got += [_digest_any(b) for b in ld2]
    assert len(want) > 3 and got == want


def _dcp_rank(rank, port, root, ckpt, out):
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2)
    try:
        import torch.distributed.checkpoint as dcp
        ref = make_loader(root, distributed=True)
        want = _digests(ref)
        ld = make_loader(root, distributed=True)
        ld.set_epoch(0); it = iter(ld); head = [(0, batch_digest(*next(it))) for _ in range(2)]
        dcp.save({'loader': ld}, checkpoint_id=ckpt)
        ld2 = make_loader(root, distributed=True)
        dcp.load({'loader': ld2}, checkpoint_id=ckpt)  # calls ld2.load_state_dict with what was saved
        got = head + _digests(ld2)
        with open(os.path.join(out, f'dcp{rank}.json'), 'w') as f: json.dump([got, want, ld2.state_dict()], f)
    finally: dist.destroy_process_group()


def test_dcp_save_load_two_processes(root, tmp_path):
    "dcp.save / dcp.load of {'loader': loader} on 2 gloo ranks, mid-epoch: each rank goes on with its own batches."
    mp.start_processes(_dcp_rank, args=(free_port(), str(root), str(tmp_path / 'ckpt'), str(tmp_path)), nprocs=2, join=True,
                       start_method='fork')  # no re-import in the ranks: a few seconds less
    res = [json.load(open(tmp_path / f'dcp{r}.json')) for r in (0, 1)]
    for got, want, _ in res: assert len(want) == 10 and got == want
    assert res[0][1] != res[1][1]  # the ranks read different samples


# ---------------------------------------------------------------- torchdata's StatefulDataLoader protocol
def _torchdata_style_loop(dl, state=None, stop=None, epochs=2):
    "A loop written for torchdata.stateful_dataloader.StatefulDataLoader (its docs' way): no set_epoch, state_dict at a step."
    if state is not None: dl.load_state_dict(state)
    out = []
    for _ in range(epochs):
        for x, y in dl:
            out.append(batch_digest(x, y))
            if len(out) == stop: return out, dl.state_dict()
    return out, dl.state_dict()


def test_torchdata_loop_runs_unchanged(root):
    "The same loop with a StatefulDataLoader and with timmdata's loader: both resume exactly (here: 13 of 20, then the rest)."
    sdl = pytest.importorskip('torchdata.stateful_dataloader')
    from timmdata.dataset import ImageDataset
    from timmdata.transforms_factory import create_transform
    mk = {'torchdata': lambda: sdl.StatefulDataLoader(ImageDataset(str(root), transform=create_transform(24)), batch_size=4,
                                                      shuffle=True, generator=torch.Generator().manual_seed(0)),
          'timmdata': lambda: make_loader(root)}
    for name, make in mk.items():
        want, _ = _torchdata_style_loop(make())
        head, sd = _torchdata_style_loop(make(), stop=13)
        tail, _ = _torchdata_style_loop(make(), state=pickle.loads(pickle.dumps(sd)), epochs=1)  # the epoch cut, then one more
        assert len(want) == 20 and head + tail == want, name
