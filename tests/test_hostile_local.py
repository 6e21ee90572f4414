"""Hostile datasets, part six, local files: what a folder dataset holds that is not what it looks like. A FIFO named
like an image, a link to a device, a sparse file over the bound: each a bad sample naming the file, in the dataset, in
DataLoader workers and in `timmdata check`, never a hang or a read without end. Each case runs in a process group of
its own, killed whole at its time limit, its memory capped: a hang or a runaway read fails the test, not the machine."""
import json, os, resource, signal, subprocess, sys, textwrap
from pathlib import Path
import pytest
from timmdata.tools.sample_data import make_sample_dataset

MEMORY_CAP = 6 << 30  # the data segment a case may grow to: a read of /dev/zero stops there (MemoryError), not at the machine's end


def _capped():
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_CAP, MEMORY_CAP))


def _run(script: str, *args, timeout: float = 120) -> dict:
    "The JSON `script` prints last, run in a process group of its own with its memory capped; the group killed at `timeout`."
    p = subprocess.Popen([sys.executable, '-c', textwrap.dedent(script), *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_capped)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail(f'still running after {timeout} s (a hang): killed')
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the workers it left, if any
        except ProcessLookupError:
            pass
    assert p.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def not_files(tmp_path) -> Path:
    "A folder dataset whose class folders hold, beside real images, a FIFO `x.jpg` and a link `zero.jpg -> /dev/zero`."
    root = make_sample_dataset(tmp_path / 'ds', n_train=2, n_val=0, classes=['a', 'b'], size=(32, 24), num_workers=0)
    os.mkfifo(root / 'train' / 'a' / 'x.jpg')
    os.symlink('/dev/zero', root / 'train' / 'b' / 'zero.jpg')
    return root / 'train'


READ = '''
import contextlib, io, json, sys, warnings
import torch
from timmdata import ImageDataset
from timmdata.tools.cli import main
root = sys.argv[1]
ds = ImageDataset(root)
names = ds.filenames()
bad = [names.index('a/x.jpg'), names.index('b/zero.jpg')]
said = {}
for i in bad:
    try:
        ds[i]
        said[names[i]] = 'read'
    except OSError as e:
        said[names[i]] = str(e)
skip = ImageDataset(root, bad_sample='skip')
with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    got = list(torch.utils.data.DataLoader(skip, batch_size=None, num_workers=2))
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    try:
        status = main(['check', root, '--workers', '2', '--no-progress'])
    except SystemExit as e:
        status = e.code
print(json.dumps(dict(bad=bad, said=said, nones=[i for i, s in enumerate(got) if s is None], skipped=skip.bad_samples,
                      n=len(ds), status=status, check=out.getvalue())))
'''


@pytest.mark.slow
def test_files_that_are_not_files_are_bad_samples(not_files):
    r = _run(READ, not_files)
    for name in ('a/x.jpg', 'b/zero.jpg'):
        assert f"{name}) could not be read or decoded" in r['said'][name] and 'is not a regular file' in r['said'][name], r
    assert r['nones'] == r['skipped'] == sorted(r['bad']), r  # the workers skip both, the others read
    assert r['status'] not in (0, None) and r['check'].count('is not a regular file') == 2, r
    assert 'x.jpg' in r['check'] and 'zero.jpg' in r['check'], r


CHECK = '''
import contextlib, io, json, sys, time
from timmdata.tools.cli import main
t0, out = time.perf_counter(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    try:
        status = main(['check', sys.argv[1], '--no-progress'])
    except SystemExit as e:
        status = e.code
print(json.dumps(dict(status=status, said=out.getvalue(), seconds=time.perf_counter() - t0)))
'''


@pytest.mark.slow  # `timmdata check` in a fresh interpreter
def test_check_ends_on_two_links_to_the_parent(tmp_path):
    "`timmdata check` walks as the dataset does: two links to `..` (which `os.walk(followlinks=True)` never ends) are an error naming a link."
    root = make_sample_dataset(tmp_path / 'ds', n_train=1, n_val=0, classes=['a', 'b'], size=(32, 24), num_workers=0)
    for c in ('a', 'b'):
        os.symlink('..', root / 'train' / c / 'up')
    r = _run(CHECK, root / 'train', timeout=60)
    assert r['status'] == 2 and 'a loop' in r['said'], r
    assert "the link 'a/up' leads to" in r['said'] or "the link 'b/up' leads to" in r['said'], r  # the first walked


LADDER = '''
import json, sys, time
from timmdata import ImageDataset
t0 = time.perf_counter()
try:
    ImageDataset(sys.argv[1])
    said = 'read'
except OSError as e:
    said = f'{type(e).__name__}: {e}'
print(json.dumps(dict(said=said, seconds=time.perf_counter() - t0)))
'''


@pytest.mark.slow
def test_a_ladder_of_links_ends_at_once(tmp_path):
    "48 levels, each linking twice to the next (2^48 paths): the walk stops at the first folder reached by too many paths, naming it."
    ladder = tmp_path / 'ladder'
    for k in range(48):
        (ladder / f'l{k}' / 'c').mkdir(parents=True)
        make_sample_dataset(ladder / f'l{k}' / 'src', n_train=1, n_val=0, classes=['c'], size=(16, 16), num_workers=0)
        os.replace(next((ladder / f'l{k}' / 'src' / 'train' / 'c').iterdir()), ladder / f'l{k}' / 'c' / 'img.jpg')
        if k:
            for side in 'ab':
                os.symlink(f'../../l{k}', ladder / f'l{k - 1}' / 'c' / side)
    r = _run(LADDER, ladder / 'l0', timeout=60)
    assert r['said'].startswith('FolderWalkError') and 'paths through links (links that fan out' in r['said'], r
