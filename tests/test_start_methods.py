"""Worker processes started by fork, forkserver (Python 3.14's default on Linux) and spawn (macOS's and Windows'): the
same batches bit for bit, for training (RandAugment, random erasing, a Mixup collate on numpy's global stream), eval,
a WebDataset stream, a resumed run and the device-decode loader on the CPU (its batch ring of JPEG bytes); and a
dataset that does not pickle gets an error that names the start method and what to do, not pickle's alone. Found on
3.14t: a FastCollateMixup held the module np.random, which does not pickle, so every Mixup run with worker processes
failed on Python 3.14."""
import io, json, multiprocessing, subprocess, sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _helpers import write_shards  # noqa: E402


@pytest.fixture(scope='module')
def shards(tmp_path_factory):
    from timmdata.tools.sample_data import make_sample_image
    root = tmp_path_factory.mktemp('toy')

    def jpeg(i, s):
        b = io.BytesIO(); make_sample_image(i, i % 10, (48, 40)).save(b, 'JPEG', quality=85); return b.getvalue()
    write_shards(root, 'toy', 4, 10, jpeg)
    return root


def batches(method, root, shards) -> dict:
    r = subprocess.run([sys.executable, str(HERE / '_start_batches.py'), method, str(root), str(shards)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope='module')
def by_fork(sample_root, shards): return batches('fork', sample_root / 'train', shards)


def _same(got: dict, ref: dict, method: str):
    assert sorted(got) == sorted(ref) == ['device', 'eval', 'resume', 'stream', 'train']
    assert len(ref['train']) == len(ref['device']) == 60 // 8 and len(ref['eval']) == -(-60 // 8)
    assert len(ref['stream']) == 40 // 8
    assert ref['resume'] == ref['train']  # the resumed run is the whole one
    for case in ref:
        assert len(got[case]) == len(ref[case]), (method, case)
        bad = [i for i, (a, b) in enumerate(zip(got[case], ref[case], strict=True)) if a != b]
        assert not bad, f'{case}: workers started by {method} differ from fork at batches {bad}'


@pytest.mark.slow
def test_forkserver_gives_forks_batches(sample_root, shards, by_fork):
    _same(batches('forkserver', sample_root / 'train', shards), by_fork, 'forkserver')


@pytest.mark.slow
def test_spawn_gives_forks_batches(sample_root, shards, by_fork):
    "(run: TIMMDATA_SLOW=1 pytest -m slow tests/test_start_methods.py; each spawned worker imports torch again)"
    _same(batches('spawn', sample_root / 'train', shards), by_fork, 'spawn')


@pytest.mark.filterwarnings('ignore:Got pickle error:UserWarning')  # torch's hint before the error, which says more
def test_a_dataset_that_does_not_pickle_is_named(sample_root):
    "A lambda transform under forkserver: the error names the start method, says what does not pickle and what to do."
    from timmdata import ImageDataset
    from timmdata.engine.resume import ResumableDataLoader
    before = multiprocessing.get_start_method(allow_none=True)
    ds = ImageDataset(str(sample_root / 'train'), transform=lambda im: 0)
    ld = ResumableDataLoader(ds, batch_size=4, num_workers=1, multiprocessing_context='forkserver')
    with pytest.raises(TypeError) as e:
        next(iter(ld))
    msg = str(e.value)
    assert "start by 'forkserver'" in msg and 'lambda' in msg and "worker_mode='thread'" in msg, msg
    after = multiprocessing.get_start_method(allow_none=True)
    # the loader's context only: the process's default untouched. Python's forkserver, once it has modules to preload
    # (an earlier loader's in this process), reads the default and so fixes an unset one to the platform's own: the same
    assert after == before or (before is None and after == multiprocessing.get_all_start_methods()[0]), (before, after)


@pytest.mark.slow
def test_forkserver_workers_see_the_settings_of_when_the_loader_was_made(sample_root):
    """A forkserver's workers begin with the environment its server started with: create_loader hands them the
    settings (and the cloud clients' variables) as they are when the loader is made, so a bucket configured after the
    server started is seen; a variable unset since is unset there too."""
    r = subprocess.run([sys.executable, str(HERE / '_env_workers.py'), str(sample_root)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got['method'] == 'forkserver'
    assert got['targets'] == [71]  # WDS_SHUFFLE_SIZE 7 and the emulator on, no account named, in every worker
