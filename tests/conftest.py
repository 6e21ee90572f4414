"""Shared pytest fixtures: small generated datasets (never downloaded), markers for slow and CUDA tests.
Slow tests (stress, fuzzing) run only with TIMMDATA_SLOW=1: `TIMMDATA_SLOW=1 .venv/bin/python -m pytest -m slow tests`.
Every test starts from global RNG states drawn from its own name, so a run here and a run in CI draw the same numbers;
`TIMMDATA_TEST_SEED=N` draws others (to hunt for tests that pass only by luck)."""
import fcntl, gc, os, random, shutil, socket, socketserver, sys, zlib
import numpy as np
import pytest, torch
from timmdata.tools.sample_data import make_sample_dataset

# One intra-op thread per test process (TIMMDATA_TEST_THREADS=N for others): `make test` runs two pytest processes
# on two cores (xdist), and a loader resizing in the main process (num_workers=0) with two threads on busy cores spent
# ~20x longer per resize (thread hand-offs), which is most of the in-process tests' time. Workers use one thread anyway.
torch.set_num_threads(int(os.environ.get('TIMMDATA_TEST_THREADS', '1')))

def _hung_up(sock) -> bool:
    "Has the client closed its end of `sock`? (its FIN read as the end of the stream, or its reset)"
    try:
        sock.settimeout(0)
        return sock.recv(1, socket.MSG_PEEK) == b''
    except BlockingIOError:  # nothing to read yet: still there
        return False
    except OSError:
        return True

_handle_error = socketserver.BaseServer.handle_error

def _quiet_hang_ups(self, request, client_address):
    """The tests' HTTP servers (threads in this process) let a client hang up: a reader that times out, gives up a read or
    closes on purpose left socketserver printing the BrokenPipeError's traceback into a green run. An error while the
    client is still connected, and any other error, is printed as before (timmdata's LocalS3 proxy does the same)."""
    if isinstance(sys.exc_info()[1], ConnectionError) and _hung_up(request):
        return
    _handle_error(self, request, client_address)

socketserver.BaseServer.handle_error = _quiet_hang_ups

def pytest_configure(config):
    config.addinivalue_line('markers', 'cuda: needs a CUDA device (skipped without one)')
    config.addinivalue_line('markers', 'slow: takes more than a few seconds')

# The files that take longest (the fast tests: `make test`; with the slow ones: `make test-all`), longest first: they
# run first, so the two pytest-xdist workers (`--dist loadfile --no-loadscope-reorder`) end together instead of one of
# them running a long file alone at the end (xdist's default order puts files with the most tests first). Only the
# order changes: a file missing here runs after them, in the usual order.
LONG_FIRST = ['test_cli.py', 'test_house.py', 'test_augment_ops_parity.py', 'test_transforms_parity.py', 'test_layout.py',
              'test_hostile_net.py', 'test_streaming.py', 'test_thread_streams.py', 'test_object_store.py',
              'test_object_store_hostile.py', 'test_loader.py', 'test_resume.py', 'test_elastic_stream.py', 'test_cache.py']
LONG_FIRST_ALL = ['test_docs_browser.py', 'test_pages_as_copied.py', 'test_start_methods.py', 'test_object_store.py',
                  'test_ring_reliability.py', 'test_resume.py', 'test_error_lines.py', 'test_thread_streams.py',
                  'test_threads.py', 'test_frameworks.py', 'test_timm_scripts.py', 'test_dataset.py', 'test_cli.py',
                  'test_object_store_gcs.py', 'test_tune.py', 'test_torchrun.py', 'test_fuzz.py']

def pytest_collection_finish(session):
    """What collection imported (torch, timm, the test modules) stays out of the tests' garbage collections: a full
    collection no longer walks those objects again, nor writes to their pages in the workers forked from here."""
    gc.freeze()

def pytest_unconfigure(config):
    """The frozen objects back in the collector's reach before the interpreter's last collection: frozen, Triton's
    reference cycles (torch._dynamo imports it) outlived the interpreter, and nanobind printed each test process's
    "leaked 4 instances! ... 64 types! ... 514 functions!" report (30 lines) at its exit."""
    gc.unfreeze()

@pytest.hookimpl(trylast=True)  # after a plugin's random order (pytest-random-order): the long files still go first
def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST_ALL if os.environ.get('TIMMDATA_SLOW') == '1' else LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the usual order within and after them
    slow = None if os.environ.get('TIMMDATA_SLOW') == '1' else pytest.mark.skip(reason='slow: run with TIMMDATA_SLOW=1')
    cuda = None if torch.cuda.is_available() else pytest.mark.skip(reason='no CUDA device on this machine')
    for item in items:
        if slow is not None and 'slow' in item.keywords: item.add_marker(slow)
        if cuda is not None and 'cuda' in item.keywords: item.add_marker(cuda)

def pytest_terminal_summary(terminalreporter):
    """The skips counted by reason at the end of a run, the commands that run them named in the reasons: what a green run
    did not check is never silent (`make test` skips the slow tests, the CUDA ones here, and those whose programs
    `make test-deps` installs)."""
    reasons = {}
    for rep in terminalreporter.stats.get('skipped', []):
        why = rep.longrepr[2] if isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3 else str(rep.longrepr)
        why = why.removeprefix('Skipped: ').splitlines()[0] if why else '?'
        reasons[why] = reasons.get(why, 0) + 1
    if reasons:
        terminalreporter.write_line(f'skipped {sum(reasons.values())}, by reason:')
        for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f'  {n:5d}  {why[:160]}')

@pytest.fixture(autouse=True)
def seeded_globals(request):
    "Seed random, numpy and torch from the test's id (and TIMMDATA_TEST_SEED): loaders built with seed=None draw from them."
    seed = zlib.crc32(f"{request.node.nodeid}:{os.environ.get('TIMMDATA_TEST_SEED', '0')}".encode())
    random.seed(seed); np.random.seed(seed); torch.manual_seed(seed)

@pytest.fixture(scope='module', autouse=True)
def environment_as_before():
    """A test file leaves the process's environment as it found it: a variable one file set (TIMMDATA_WATCH, a store's
    address) made the next files' loaders behave otherwise, so a file's result depended on which files ran before it in
    the same pytest process. Set within a file (a module fixture's store), restored when the file ends."""
    keep = dict(os.environ)
    yield
    for k in set(os.environ) - set(keep): del os.environ[k]
    for k, v in keep.items():
        if os.environ.get(k) != v: os.environ[k] = v

@pytest.fixture(scope='module', autouse=True)
def forks_as_before():
    """A test file that read an object store leaves its process as it found it: the clients closed and the process no
    longer `fork_unsafe`, as tests/test_object_store.py's fixture does. Otherwise every loader of every file that ran
    after it in the same pytest process started its workers by forkserver, each importing its dataset's modules again
    (test_multilabel's Hugging Face loaders: ~4 s each instead of ~0.4 s), and a file's time and start method depended
    on which files ran before it."""
    yield
    from timmdata.core.runtime import _FORK_UNSAFE
    if os.getpid() in _FORK_UNSAFE:
        from timmdata.net.object_store import close_clients
        close_clients()
        _FORK_UNSAFE.pop(os.getpid(), None)

@pytest.fixture(scope='session')
def sample_root(tmp_path_factory):
    """A small imagenette-like tree: train/ (6 per class) and val/ (3 per class), 10 classes. Built once per run and
    shared by pytest-xdist's worker processes (under a lock; the build is deterministic, ~7 s): tests copy it before
    changing anything in it."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get('PYTEST_XDIST_WORKER') else base  # the run's folder, above each worker's own
    root, done = shared / 'sample_shared', shared / 'sample_shared.done'
    with open(shared / 'sample_shared.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            make_sample_dataset(root, n_train=6, n_val=3)
            done.touch()
    return root
