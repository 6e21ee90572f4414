"""Issue 14, the batch ring and the output pool under real use: slots come back after early breaks, Ctrl-C and dead
workers; a dead worker is a clear error that leaves no process and no shared memory behind; the busy flags' atomic and
plain paths; one shared-memory budget per machine; the output pool never reuses memory someone still references."""
import gc, os, signal, time
from contextlib import contextmanager
from types import SimpleNamespace
import pytest, torch
from timmdata.engine import batch_ring
from timmdata.pixels import decode
from timmdata.engine.batch_ring import BatchRing, shm_report
from timmdata.engine.collate import fast_collate
from timmdata.loader import create_loader
from timmdata.engine.prefetch import PrefetchLoader

N = 160  # samples: 20 batches of 8

class IndexImages(torch.utils.data.Dataset):
    "Sample i is a 3x16x16 uint8 image whose pixels spell i (channel 0: i % 256, channel 1: i // 256), label i."
    def __init__(self, n=N): self.n, self.transform = n, None
    def __len__(self): return self.n
    def __getitem__(self, i):
        x = torch.empty(3, 16, 16, dtype=torch.uint8)
        x[0], x[1], x[2] = i % 256, i // 256, 7
        return x, i

class Trap(IndexImages):
    "Sample `at`, the first time it is made, runs `act` in its worker (a signal to the main process, or the worker's death)."
    def __init__(self, at, act, armed=True):
        super().__init__(); self.at, self.act, self.main = at, act, os.getpid()  # the main process: under forkserver not the parent
        self.armed = torch.full((1,), int(armed), dtype=torch.int32).share_memory_()  # seen by every forked worker
    def __getitem__(self, i):
        if i == self.at and int(self.armed[0]) == 1:
            self.armed[0] = 0
            self.act(self.main)
        return super().__getitem__(i)

def interrupt_main(main): os.kill(main, signal.SIGINT); time.sleep(0.5)  # main waits for this batch meanwhile
def die(main): time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)  # main waits for this batch when the worker dies

def ids_of(x):
    "Undo the normalisation (mean 0, std 1) and read each image's index back."
    u = (x * 255).round().to(torch.int64)
    assert (u[:, 2] == 7).all()
    return (u[:, 0, 0, 0] + 256 * u[:, 1, 0, 0]).tolist()

def loader(ds, **kw):
    ld = create_loader(ds, (3, 16, 16), 8, mean=(0, 0, 0), std=(1, 1, 1), num_workers=2, device='cpu', **kw)
    assert isinstance(ld.collate, BatchRing)
    return ld

def full_epoch_on_ring(ld):
    "One whole epoch: every sample once and right, every batch read from a slot, every slot free at the end."
    ring = ld.collate
    ring.counts.update(ring=0, fresh=0)
    ids, labels = [], []
    for x, y in ld:
        assert ids_of(x) == y.tolist()
        ids += ids_of(x); labels += y.tolist()
    assert ids == labels == list(range(N))
    assert ring.counts == {'ring': N // 8, 'fresh': 0}, ring.counts  # no batch went through fresh memory
    assert int(ring.busy.sum()) == 0

@contextmanager
def hang_guard(seconds=60):
    "Fail instead of hanging (not a timing assertion: only a test that would otherwise never end)."
    def boom(*_): raise TimeoutError(f'no result within {seconds} s')
    old = signal.signal(signal.SIGALRM, boom); signal.alarm(seconds)
    try: yield
    finally: signal.alarm(0); signal.signal(signal.SIGALRM, old)

def worker_pids(ld): return [w.pid for w in ld.loader._iterator._workers]

def gone(pid):
    try:
        with open(f'/proc/{pid}/status') as f: return any(l.startswith('State:') and 'Z' in l for l in f)  # a zombie is gone
    except FileNotFoundError: return True

def shm_handles():
    "This process's open files and mappings in /dev/shm (torch's shared segments: deleted files, held by fd or mapping)."
    fds = []
    for fd in os.listdir('/proc/self/fd'):
        try: fds.append(os.readlink(f'/proc/self/fd/{fd}'))
        except OSError: pass
    with open('/proc/self/maps') as f: maps = [l.split(None, 5)[-1].strip() for l in f if '/dev/shm/' in l]
    return sorted(p for p in fds if p.startswith('/dev/shm/')), sorted(set(maps))

# ---- 1. slots come back

@pytest.mark.slow
@pytest.mark.parametrize('persistent', [True, False])
def test_full_epoch_on_the_ring_after_five_early_breaks(persistent):
    ld = loader(IndexImages(), persistent_workers=persistent)
    for _ in range(5):
        for k, (x, y) in enumerate(ld):
            assert ids_of(x) == y.tolist()
            if k == 2: break
    full_epoch_on_ring(ld)

@pytest.fixture
def ctrl_c():
    "Python's Ctrl-C handler for the test, even where pytest was started with SIGINT ignored (a shell's background job)."
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)

def test_slots_come_back_after_interrupts_in_the_consumer_and_in_the_loader(ctrl_c):
    ds = Trap(at=100, act=interrupt_main, armed=False)
    ld = loader(ds)
    for _ in range(5):  # Ctrl-C in the consumer's own code
        try:
            for k, (x, y) in enumerate(ld):
                if k == 2: raise KeyboardInterrupt
        except KeyboardInterrupt: pass
    full_epoch_on_ring(ld)
    got, ds.armed[0] = None, 1  # Ctrl-C while the loader waits for a batch (the worker making sample 100 sends it)
    try:
        for x, y in ld: pass
    except KeyboardInterrupt: got = True
    assert got, 'the interrupt was not raised'
    full_epoch_on_ring(ld)  # new workers, every slot back

@pytest.mark.slow
def test_a_dead_worker_is_a_clear_error_and_leaves_nothing_behind():
    gc.collect()
    before = shm_handles()
    ld = loader(Trap(at=100, act=die))
    ring = ld.collate
    it = iter(ld); next(it)
    pids = worker_pids(ld)
    with hang_guard():
        with pytest.raises(RuntimeError) as e:
            for _ in it: pass
    msg = str(e.value)
    assert 'killed by signal' in msg or 'exited unexpectedly' in msg, msg
    assert 'iterate the loader again' in msg and 'out-of-memory' in msg, msg  # says what happened and what to do
    del e, it
    assert all(gone(p) for p in pids), [open(f'/proc/{p}/status').read()[:60] for p in pids if not gone(p)]
    assert int(ring.busy.sum()) == 0  # the dead worker's slots came back
    with hang_guard(): full_epoch_on_ring(ld)  # and the loader runs again, on new workers
    pids = worker_pids(ld)
    del ld, ring
    gc.collect()
    assert all(gone(p) for p in pids)
    assert shm_handles() == before  # no segment of the ring, no batch left mapped or open

@pytest.mark.slow
def test_a_worker_killed_while_the_consumers_code_runs():
    "torch raises its error in the consumer's own code; the loader finds the dead worker when the loop ends."
    ld = loader(IndexImages())
    raised = None
    with hang_guard():
        try:
            for k, (x, y) in enumerate(ld):
                if k == 3:
                    pids = worker_pids(ld)
                    os.kill(pids[0], signal.SIGKILL)
                    time.sleep(2)  # torch's SIGCHLD handler raises here
        except RuntimeError as e: raised = str(e)
    assert raised and 'DataLoader worker' in raised, raised
    assert all(gone(p) for p in pids)
    with hang_guard(): full_epoch_on_ring(ld)

# ---- 2. the busy flags: native atomics or plain loads and stores

class Spy:
    "decode.native with its flag operations counted in shared memory (the workers' calls too)."
    def __init__(self, nat):
        self.nat, self.calls = nat, torch.zeros(3, dtype=torch.int64).share_memory_()  # releases, then acquires per worker
    def flag_acquire(self, flags, i):
        self.calls[1 + torch.utils.data.get_worker_info().id] += 1  # one counter per process: no lost updates
        return self.nat.flag_acquire(flags, i)
    def flag_release(self, flags, i): self.calls[0] += 1; return self.nat.flag_release(flags, i)
    def __getattr__(self, name): return getattr(self.nat, name)

def ring_epochs(ring, epochs=2):
    # forked workers: they see the test's monkeypatch of the extension (forkserver's and spawn's import it afresh)
    dl = torch.utils.data.DataLoader(IndexImages(64), batch_size=8, num_workers=2, collate_fn=ring, multiprocessing_context='fork')
    for _ in range(epochs):
        ys = []
        for x, y in dl:
            assert (x[:, 0, 0, 0].long() + 256 * x[:, 1, 0, 0].long()).tolist() == y.tolist()
            ys += y.tolist(); ring.release(x)
        assert ys == list(range(64))
    assert ring.counts['fresh'] == 0 and int(ring.busy.sum()) == 0

@pytest.mark.skipif(getattr(decode.native, 'flag_acquire', None) is None, reason='the C extension is not built')
def test_busy_flags_use_the_native_atomics(monkeypatch):
    spy = Spy(decode.native)
    monkeypatch.setattr(decode.NATIVE, 'loaded', spy)
    ring = BatchRing((8, 3, 16, 16), num_workers=2, slots_per_worker=4)
    ring_epochs(ring)
    assert int(spy.calls[1:].sum()) >= 16 and int(spy.calls[0]) == 16  # workers took slots by CAS; each release a release store
    f = torch.zeros(3, dtype=torch.int32).numpy()
    assert [spy.nat.flag_acquire(f, 1), spy.nat.flag_acquire(f, 1)] == [True, False] and f.tolist() == [0, 1, 0]
    spy.nat.flag_release(f, 1); assert f.tolist() == [0, 0, 0]

def test_busy_flags_without_the_extension(monkeypatch):
    "Switched off, the extension's flag operations are never called (its spy counts none), yet every batch had a slot: the plain loads and stores took and freed them."
    spy = Spy(decode.native)
    monkeypatch.setattr(decode.NATIVE, 'loaded', spy)
    monkeypatch.setattr(decode.NATIVE, 'enabled', False)  # as with TIMMDATA_NATIVE=0, or no compiler
    ring = BatchRing((8, 3, 16, 16), num_workers=2, slots_per_worker=4)
    ring_epochs(ring)
    assert spy.calls.tolist() == [0, 0, 0] and ring.counts == {'ring': 16, 'fresh': 0}, (spy.calls, ring.counts)

# ---- 3. one shared-memory budget per machine

def fake_shm(monkeypatch, tmp_path, free, taken):
    "/dev/shm reporting `free` bytes free less what the rings made here took; the ledger in tmp_path."
    def statvfs(path): return SimpleNamespace(f_bavail=(free - taken[0]) // 4096, f_frsize=4096, f_blocks=2**18)
    monkeypatch.setattr(os, 'statvfs', statvfs)
    monkeypatch.setattr(batch_ring, 'SHM_DIR', str(tmp_path))

def test_eight_ranks_share_one_budget(monkeypatch, tmp_path):
    "Eight processes of one machine making their rings at once: together at most a quarter of /dev/shm."
    taken, rings = [0], []
    fake_shm(monkeypatch, tmp_path, 64 * 2**20, taken)
    monkeypatch.delenv('LOCAL_WORLD_SIZE', raising=False)
    for rank in range(8):
        r = BatchRing.choose((32, 3, 64, 64), 2, 5).ring  # 3.75 MB each
        if r is not None: rings.append(r); taken[0] += r.nbytes
    assert 0 < taken[0] <= 64 * 2**20 // 4, taken[0] / 2**20
    note = BatchRing.choose((32, 3, 64, 64), 2, 5).note
    assert 'fresh shared memory' in note and '--shm-size' in note
    monkeypatch.setenv('LOCAL_WORLD_SIZE', '8')  # torchrun sets it: each process takes at most its eighth
    c = BatchRing.choose((32, 3, 64, 64), 2, 5)
    assert c.ring is None and 'LOCAL_WORLD_SIZE=8' in c.note
    assert 'batch ring(s) on this machine' in shm_report()

def test_small_shm_falls_back_to_fresh_memory_quietly(monkeypatch, tmp_path, recwarn):
    fake_shm(monkeypatch, tmp_path, 128 * 2**10, [0])  # a tiny /dev/shm: a quarter of it is less than the 62 kB ring
    ld = create_loader(IndexImages(), (3, 16, 16), 8, mean=(0, 0, 0), std=(1, 1, 1), num_workers=2, device='cpu')
    assert ld.loader.collate_fn is fast_collate
    assert sum(len(y) for _, y in ld) == N
    note = BatchRing.choose((8, 3, 16, 16), 2, 5).note  # what the loader was told
    assert 'no batch ring' in note and 'needs' in note
    # timmdata says nothing; Python 3.12's fork warning about a thread another test left (tqdm's monitor) is not ours
    ours = [w for w in recwarn.list if not (issubclass(w.category, (DeprecationWarning, ResourceWarning)) and 'timmdata' not in w.filename)]
    assert not ours, [(w.category.__name__, str(w.message)) for w in ours]

def test_a_ring_that_cannot_be_made_is_fresh_memory(monkeypatch, tmp_path):
    fake_shm(monkeypatch, tmp_path, 64 * 2**20, [0])
    def full(self): raise RuntimeError('unable to write to file </torch_1_2_3>: No space left on device (28)')
    monkeypatch.setattr(torch.Tensor, 'share_memory_', full)  # /dev/shm filled up by something else meanwhile
    c = BatchRing.choose((8, 3, 16, 16), 2, 5)
    assert c.ring is None and 'No space left' in c.note
    assert not (tmp_path / f'timmdata-rings-{os.getuid()}').exists()  # nothing listed

def test_dead_processes_leave_the_ledger(monkeypatch, tmp_path):
    import subprocess, sys
    dead = int(subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'], capture_output=True, text=True).stdout)
    (tmp_path / f'timmdata-rings-{os.getuid()}').write_text(f'{dead} gone 999999999999\n{os.getpid()} mine 5\n')
    fake_shm(monkeypatch, tmp_path, 64 * 2**20, [0])
    r = BatchRing.choose((8, 3, 16, 16), 2, 5).ring  # the dead process's 1 TB no longer counts
    assert r is not None
    lines = (tmp_path / f'timmdata-rings-{os.getuid()}').read_text().split()
    assert 'gone' not in lines and 'mine' in lines and r.key in lines

def test_create_loader_without_statvfs(monkeypatch):
    monkeypatch.delattr(os, 'statvfs')  # Windows
    ld = create_loader(IndexImages(), (3, 16, 16), 8, mean=(0, 0, 0), std=(1, 1, 1), num_workers=2, device='cpu')
    assert ld.loader.collate_fn is fast_collate and 'cannot be read' in BatchRing.choose((8, 3, 16, 16), 2, 5).note
    ids = [i for x, _ in ld for i in ids_of(x)]
    assert ids == list(range(N))

# ---- 4. the output pool never hands out memory someone still references

def raw_batches(n=6):
    return [(torch.full((4, 3, 8, 8), 10 * k, dtype=torch.uint8), torch.arange(4)) for k in range(n)]

def test_pool_keeps_a_buffer_held_through_its_storage():
    pl = PrefetchLoader(raw_batches(), mean=(0, 0, 0), std=(1, 1, 1), device='cpu')
    kept = None
    for k, (x, _) in enumerate(pl):
        if k == 0: kept, ref = x.untyped_storage(), x.clone()  # the storage object only: not the tensor
        assert x.data_ptr() != kept.data_ptr() or k == 0
    view = torch.empty(0).set_(kept, 0, ref.shape)
    assert torch.equal(view, ref)  # never overwritten

def test_pool_after_share_memory_hands_out_private_memory():
    pl = PrefetchLoader(raw_batches(), mean=(0, 0, 0), std=(1, 1, 1), device='cpu')
    seen = []
    for k, (x, _) in enumerate(pl):
        if k == 0:
            x.share_memory_()  # in place: the batch's data moves into a shared segment another process may map
            shared, ref = x.data_ptr(), x.clone()
            fd, size = x.untyped_storage()._share_fd_cpu_()  # what sending the batch to another process hands over
            peer = torch.UntypedStorage._new_shared_fd_cpu(fd, size)  # the segment as that process maps it
        else: assert not x.is_shared() and x.data_ptr() != shared, k  # never that segment again
        seen.append(x.data_ptr())
    assert torch.equal(torch.empty(0).set_(peer, 0, ref.shape), ref)  # what the other process reads is still the batch
    assert len(set(seen[1:])) <= 2  # the pool still reuses its own (private) buffers


def _ledger_script(tmp_path, body: str):
    "Runs `body` in a fresh Python with the ledger in `tmp_path`; a hang (the old code's) fails after 60 s."
    import subprocess, sys
    code = f"import os; from timmdata.engine import batch_ring; batch_ring.SHM_DIR = {str(tmp_path)!r}\n{body}\nprint('ok')"
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == 'ok', r.stderr[-2000:]


@pytest.mark.slow
def test_ring_finaliser_inside_a_ledger_block_does_not_deadlock(tmp_path):
    "The gc may free an old ring (its finaliser unlists it) while this thread holds the ledger, e.g. while BatchRing.choose allocates."
    _ledger_script(tmp_path,
                   "with batch_ring._ledger() as rings:\n"
                   "    rings['old'] = (os.getpid(), 1)\n"
                   "    batch_ring._unlist('old', os.getpid())  # what the finaliser does: it must not wait for the lock this thread holds\n"
                   "    assert 'old' not in rings\n"
                   "with batch_ring._ledger() as rings: assert rings == {}")


@pytest.mark.slow
def test_ring_finaliser_after_the_ledger_is_written_does_not_deadlock(tmp_path):
    "The gc may run a ring's finaliser in the last moment of a ledger block: written, the file lock not yet let go."
    _ledger_script(tmp_path,
                   "with batch_ring._ledger() as rings: rings.update(old=(os.getpid(), 1), keep=(os.getpid(), 2))\n"
                   "real, fired = os.close, []\n"
                   "def close(fd):  # the block lets the lock go by closing the file: the finaliser runs just before\n"
                   "    if not fired: fired.append(1); batch_ring._unlist('old', os.getpid())\n"
                   "    real(fd)\n"
                   "os.close = close\n"
                   "with batch_ring._ledger() as rings: pass\n"
                   "os.close = real\n"
                   "assert fired\n"
                   "with batch_ring._ledger() as rings: assert rings == {'keep': (os.getpid(), 2)}, rings")


@pytest.mark.slow
@pytest.mark.parametrize('mode', ['process', 'thread'])
def test_a_script_ending_with_a_live_iterator_exits_quietly(tmp_path, mode):
    "A script (or a notebook kernel) that stops mid-epoch: no 'Exception ignored' traceback at exit, no worker left behind."
    import subprocess, sys
    script = tmp_path / 'stop_mid_epoch.py'
    script.write_text(
        'import sys, torch\n'
        f'sys.path.insert(0, {os.path.dirname(__file__)!r})\n'
        'from test_ring_reliability import IndexImages\n'
        'from timmdata import ImageDataset, make_sample_dataset\n'
        'from timmdata.loader import create_loader\n'
        # thread workers read timmdata datasets only: a generated folder there
        + (f'ds = ImageDataset(str(make_sample_dataset({str(tmp_path / "s")!r}, n_train=2, n_val=1, num_workers=0) / "train"))\n'
           if mode == 'thread' else 'ds = IndexImages()\n')
        + 'if __name__ == "__main__":  # forkserver and spawn (Python 3.14, macOS) import the script again in each worker\n'
        f'    ld = create_loader(ds, (3, 16, 16), 8, num_workers=2, device="cpu", worker_mode={mode!r})\n'
        '    it = iter(ld)\n'
        '    x, y = next(it)\n'
        '    print("pids", *(w.pid for w in getattr(getattr(ld.loader, "_iterator", None), "_workers", [])), flush=True)\n'
    )
    with hang_guard(120):
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stderr
    assert 'Traceback' not in r.stderr and 'Exception ignored' not in r.stderr, r.stderr
    pids = [int(p) for p in r.stdout.split()[1:]]
    assert len(pids) == (2 if mode == 'process' else 0), r.stdout
    deadline = time.time() + 10
    while not all(gone(p) for p in pids) and time.time() < deadline: time.sleep(0.1)
    assert all(gone(p) for p in pids), pids
