"""Issue 61: the loader's figures where people look. A real Lightning `Trainer` on the CPU logs them through its logger
(`LoaderWatchCallback`); 4 gloo ranks on this machine, one slowed on purpose, and rank 0's warning names it;
`timmdata top` in a tmux pane shows the loaders of a training script that only set TIMMDATA_WATCH. No assertion
depends on timing: the slow rank sleeps 20 ms in each read against none on the others, and the tests wait for
what they look for with a generous deadline."""
import csv, json, multiprocessing as mp, os, shutil, socket, subprocess, sys, time, warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from timmdata import ImageDataset, create_loader
from timmdata.core.stages import READ, stage_clock
from timmdata.watch.loader_watch import FIGURES, LoaderWatch, LoaderWatchCallback, SlowRankWarning
from timmdata.tools.sample_data import make_sample_dataset

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    return make_sample_dataset(tmp_path_factory.mktemp('watch') / 'data', n_train=8, n_val=0, size=(64, 80),
                               classes=['a', 'b', 'c', 'd'], num_workers=0) / 'train'


def test_lightning_callback_logs_through_the_trainers_logger(data, tmp_path):
    L = pytest.importorskip('lightning')
    from lightning.pytorch.loggers import CSVLogger

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 4)

        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.lin(x.mean((2, 3))), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Data(L.LightningDataModule):
        def train_dataloader(self):
            return create_loader(ImageDataset(str(data)), 32, 4, is_training=True, num_workers=0, device='cpu', seed=0)

    logger = CSVLogger(tmp_path, name='run')
    cb = LoaderWatchCallback(every=2, publish=False)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        L.Trainer(accelerator='cpu', devices=1, max_epochs=1, logger=logger, callbacks=[cb], enable_progress_bar=False,
                  enable_model_summary=False, enable_checkpointing=False, log_every_n_steps=1).fit(Tiny(), datamodule=Data())
    rows = list(csv.DictReader(open(Path(logger.log_dir) / 'metrics.csv')))
    logged = [r for r in rows if r.get('loader/wait_share')]
    assert len(logged) == 4, rows  # 32 images in batches of 4: 8 batches, every 2nd
    assert set(f'loader/{k}' for k in FIGURES) <= set(rows[0]), sorted(rows[0])
    assert all(0 <= float(r['loader/wait_share']) <= 1 for r in logged)
    assert cb.watch is None  # closed at the end of fit


class Slowed(ImageDataset):
    "Sample data whose reads take 20 ms more per image on rank 3 (a slow disk)."

    def _load(self, index):
        if dist.get_rank() == 3:
            with stage_clock(READ):
                time.sleep(0.02)
        return super()._load(index)


def rank_job(rank: int, world: int, port: int, data: str, out: str):
    "One rank (a forked process: torch and timmdata already imported): 4 epochs of 2 batches, watched every 2."
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world)
    loader = create_loader(Slowed(data), 32, 4, is_training=True, num_workers=0, device='cpu', seed=0, distributed=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', SlowRankWarning)
        with LoaderWatch(loader, every=2, publish=False) as w:
            for epoch in range(4):
                loader.set_epoch(epoch)
                for x, y in loader:
                    time.sleep(0.005)  # the model's step
    warned = [str(c.message) for c in caught if issubclass(c.category, SlowRankWarning)]
    Path(out, f'{rank}.json').write_text(json.dumps(dict(slow=w.slow, warned=warned)))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_four_gloo_ranks_name_the_slow_one(data, tmp_path):
    port, world, ctx = free_port(), 4, mp.get_context('fork')
    procs = [ctx.Process(target=rank_job, args=(r, world, port, str(data), str(tmp_path))) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    assert [p.exitcode for p in procs] == [0] * world
    res = [json.loads((tmp_path / f'{r}.json').read_text()) for r in range(world)]
    assert len(res[0]['warned']) >= 1, res[0]
    assert res[0]['warned'][0].startswith('rank 3 waits '), res[0]['warned']
    assert 'read ' in res[0]['warned'][0]  # the stage its time goes to: the slow read
    assert all(r['warned'] == [] for r in res[1:])  # rank 0 warns, the others do not
    assert all(r['slow'] is not None and r['slow'].startswith('rank 3 ') for r in res)  # every rank knows it


def rank0_only_job(rank: int, world: int, port: int, data: str, out: str):
    "One rank of two, stepping together as DDP does (an all_reduce a step); only rank 0 watches, as under `if rank == 0:`."
    from timmdata.watch import loader_watch as wm

    torch.set_num_threads(1)
    wm.JOIN_WAIT = 2.0  # the wait for the other ranks at the first exchange (30 s by default)
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world)
    loader = create_loader(ImageDataset(data), 32, 4, is_training=True, num_workers=0, device='cpu', seed=0, distributed=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        w = LoaderWatch(loader, every=1, publish=False) if rank == 0 else None
        for epoch in range(2):
            loader.set_epoch(epoch)
            for x, y in loader:
                dist.all_reduce(torch.ones(1))  # the model's step: the ranks' gradients
        if w is not None:
            w.close()
    said = [str(c.message) for c in caught if 'exchange between ranks' in str(c.message)]
    Path(out, f'{rank}.json').write_text(json.dumps(dict(said=said, on=None if w is None else w.exchange.on)))
    dist.destroy_process_group()


def test_a_watch_on_rank_0_only_does_not_hang(data, tmp_path):
    "A `LoaderWatch` made on one rank of two: it once waited for ever in the exchange's `all_gather`; now it goes on without the exchange, and says why."
    port, world, ctx = free_port(), 2, mp.get_context('fork')
    procs = [ctx.Process(target=rank0_only_job, args=(r, world, port, str(data), str(tmp_path))) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.exitcode is None:
            p.kill()
    assert codes == [0, 0], f'the ranks did not end ({codes}): rank 0 waited in the exchange'
    res = [json.loads((tmp_path / f'{r}.json').read_text()) for r in range(world)]
    assert res[0]['on'] is False and len(res[0]['said']) == 1, res
    assert '1 of 2 ranks watch their loader' in res[0]['said'][0] and 'if rank == 0:' in res[0]['said'][0]


TRAIN_SCRIPT = '''
import sys, time
from pathlib import Path
from timmdata import ImageDataset, create_loader

if __name__ == '__main__':  # forkserver and spawn (Python 3.14, macOS) import the script again in each worker
    data, stop = sys.argv[1], Path(sys.argv[2])
    loader = create_loader(ImageDataset(data), 32, 4, is_training=True, num_workers=2, worker_mode='process', device='cpu',
                           seed=0, persistent_workers=True)
    deadline = time.time() + 120
    while not stop.exists() and time.time() < deadline:
        for x, y in loader:
            time.sleep(0.02)  # the model's step
'''


@pytest.mark.slow
@pytest.mark.skipif(shutil.which('tmux') is None, reason='tmux is not installed (apt-get install -y tmux)')
def test_top_in_tmux_shows_a_training_scripts_loaders(data, tmp_path):
    wdir, stop = tmp_path / 'watch', tmp_path / 'stop'
    script = tmp_path / 'train.py'
    script.write_text(TRAIN_SCRIPT)
    env = {**os.environ, 'TIMMDATA_WATCH': '2', 'TIMMDATA_WATCH_DIR': str(wdir)}  # no change to the script
    train = subprocess.Popen([sys.executable, str(script), str(data), str(stop)], env=env)
    sock = f'timmdata-test-{os.getpid()}'
    top = f'{sys.executable} -c "from timmdata.tools.cli import main; main()" top --dir {wdir} --interval 0.3'
    screen = ''
    try:
        deadline = time.time() + 120
        while not (wdir.exists() and any(wdir.glob('*.json'))):
            assert train.poll() is None and time.time() < deadline, 'the training script published nothing'
            time.sleep(0.2)
        subprocess.run(['tmux', '-L', sock, 'new-session', '-d', '-s', 'top', '-x', '160', '-y', '40', top], check=True)
        while time.time() < deadline:
            screen = subprocess.run(['tmux', '-L', sock, 'capture-pane', '-p', '-t', 'top'], capture_output=True,
                                    text=True).stdout
            rows = [l.split() for l in screen.splitlines()]
            if any(r[:3] == ['0', 'train', str(train.pid)] for r in rows) and sum(r[:1] == ['worker'] for r in rows) == 2:
                break
            time.sleep(0.3)
        rows = [l.split() for l in screen.splitlines()]
        assert any(r[:3] == ['0', 'train', str(train.pid)] for r in rows), screen
        assert sum(r[:1] == ['worker'] for r in rows) == 2, screen  # its 2 worker processes, a row each
        assert any(l.split()[:2] == ['rank', 'loader'] for l in screen.splitlines()), screen
    finally:
        subprocess.run(['tmux', '-L', sock, 'kill-server'], capture_output=True)
        stop.touch()
        try:
            train.wait(timeout=60)
        except subprocess.TimeoutExpired:
            train.kill()
            train.wait()
    assert not any(wdir.glob('*.json'))  # the script's file went when it ended
