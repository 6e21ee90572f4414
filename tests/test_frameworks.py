"""timmdata's loaders inside training frameworks (issue 31): PyTorch Lightning, Hugging Face Accelerate,
torch.distributed.checkpoint (DCP) and torchdata's StatefulDataLoader protocol. Each test stops a run mid-epoch and
resumes it through the framework's own checkpoint; the resumed batches must be the uninterrupted run's, bit for bit.
The two-process Lightning and Accelerate runs are slow (`TIMMDATA_SLOW=1 python -m pytest -m slow tests/test_frameworks.py`)."""
import json, os, pickle, socket, subprocess, sys
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _frameworks import batch_digest, load_seen, make_loader, tiny_root

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope='module')
def root(tmp_path_factory): return tiny_root(tmp_path_factory.mktemp('frameworks'))


def _free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


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
