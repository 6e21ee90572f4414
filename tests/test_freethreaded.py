"""Free-threaded Python (issue 58; `make ft-python`, `make ft-test`): the GIL stays off through timmdata, torch,
torchvision and timm and a thread-mode epoch (free-threaded builds only); thread workers, worker processes and
`num_workers=0` give the same batches bit for bit (training with RandAugment, random erasing and Mixup; eval) and a
run cut mid-epoch resumes exactly, on whichever build runs the tests; and the other build, where it is installed
(.ft/venv for the free-threaded one, .venv for the GIL one), gives the same batches as this one."""
import json, os, subprocess, sys, sysconfig
from pathlib import Path
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import _ft_batches as fb  # noqa: E402

FREE_THREADED = bool(sysconfig.get_config_var('Py_GIL_DISABLED'))

GIL_CHECK = r'''
import json, sys, warnings
warnings.simplefilter('always')
on, seen = [], []
def check(what):
    if sys._is_gil_enabled() and not on: on.append(what)
with warnings.catch_warnings(record=True) as caught:
    for m in ('timmdata', 'timmdata._native', 'numpy', 'PIL.Image', 'torch', 'torchvision', 'timm'):
        try: __import__(m)
        except ImportError: continue
        seen.append(m); check('import ' + m)
    from timmdata import ImageDataset, create_loader
    import timmdata.engine.threads, timmdata.pixels.decode  # noqa: F401 (timmdata imports its modules lazily)
    check('import timmdata.engine.threads, timmdata.pixels.decode')
    ld = create_loader(ImageDataset(sys.argv[1]), 64, 8, is_training=True, auto_augment='rand-m9-mstd0.5', re_prob=0.5,
                       device='cpu', seed=1, num_workers=2, worker_mode='thread')
    n = sum(len(y) for _, y in ld)
    check('a thread-mode epoch')
print(json.dumps(dict(gil=sys._is_gil_enabled(), on=on, seen=seen, n=n,
                      why=[str(w.message) for w in caught if 'GIL' in str(w.message)])))
'''


@pytest.fixture(scope='module')
def root(sample_root): return sample_root / 'train'


def test_gil_stays_off(root):
    "After importing timmdata, numpy, Pillow, torch, torchvision and timm and a thread-mode epoch: still no GIL."
    if not FREE_THREADED: pytest.skip('a build with the GIL (free-threaded builds: python3.13t, 3.14t; make ft-python)')
    env = {k: v for k, v in os.environ.items() if k != 'PYTHON_GIL'}  # PYTHON_GIL=1 would turn it on by request
    r = subprocess.run([sys.executable, '-c', GIL_CHECK, str(root)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got['n'] == 60 // 8 * 8
    assert not got['gil'], f"the GIL was turned on by {got['on'][0]} ({'; '.join(got['why']) or 'no warning'}); modules: {got['seen']}"


def _check_modes(h):
    for case in fb.CASES:
        ref = h[f'{case}/process/0']
        assert len(ref) == (60 // 8 if case == 'train' else -(-60 // 8)), (case, len(ref))
        for mode, workers in fb.MODES:
            got = h[f'{case}/{mode}/{workers}']
            assert len(got) == len(ref), (case, mode, workers, len(got))
            bad = [i for i, (a, b) in enumerate(zip(got, ref, strict=True)) if a != b]
            assert not bad, f'{case}: {mode} x{workers} differs from num_workers=0 at batches {bad}'
    assert len(h['resume']) == len(h['train/thread/2']) and h['resume'] == h['train/thread/2'], 'the resumed run differs'


@pytest.fixture(scope='module')
def here_digests(root): return fb.all_cases(root)


@pytest.mark.slow
def test_modes_give_the_same_batches_and_resume_exactly(here_digests):
    "On this build: thread workers, worker processes and num_workers=0, training (RandAugment, erasing, Mixup) and eval."
    _check_modes(here_digests)


def _other_python():
    "The other build's interpreter: the GIL venv from the free-threaded one, and the other way round (None: not installed)."
    p = REPO / ('.venv' if FREE_THREADED else '.ft/venv') / 'bin' / 'python'
    if not p.exists(): return None
    r = subprocess.run([str(p), '-c', 'import sysconfig, timmdata; print(bool(sysconfig.get_config_var("Py_GIL_DISABLED")))'],
                       capture_output=True, text=True, cwd=REPO)
    return p if r.returncode == 0 and r.stdout.strip() == str(not FREE_THREADED) else None


@pytest.mark.slow  # make test-all: the other interpreter's whole run (about 50 s of make test's 5 minutes)
def test_the_other_build_gives_the_same_batches(root, here_digests):
    "The GIL build and the free-threaded one (make ft-python), same seed: the same batches, case by case."
    other = _other_python()
    if other is None:
        pytest.skip(f"the other build is not installed ({'.venv: make install' if FREE_THREADED else '.ft/venv: make ft-python'})")
    r = subprocess.run([str(other), str(HERE / '_ft_batches.py'), str(root)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    there = json.loads(r.stdout.strip().splitlines()[-1])
    _check_modes(there)
    assert there.keys() == here_digests.keys()
    for k in here_digests:
        assert there[k] == here_digests[k], f'{k}: {other} gives other batches than {sys.executable}'
