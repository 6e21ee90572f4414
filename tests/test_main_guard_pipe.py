"""The main-guard check (`timmdata.core.runtime.check_main_guard`) and scripts it cannot read back: a correct script
run from a pipe (`cat train.py | python /dev/stdin`) starts its spawn workers and reads every batch, where the check
once read the drained pipe as an empty script and refused it; the same script without the guard, run from a file,
is still refused before any worker starts. (run: TIMMDATA_SLOW=1 pytest tests/test_main_guard_pipe.py)"""
import os, subprocess, sys, textwrap

import pytest

SCRIPT = """
import multiprocessing, sys
from timmdata import ImageDataset, create_loader, make_sample_dataset
{guard}
    multiprocessing.set_start_method('spawn', force=True)  # workers import the main script again
    root = make_sample_dataset(sys.argv[1], n_train=2, n_val=0, classes=['a', 'b'], size=(32, 32), num_workers=0)
    loader = create_loader(ImageDataset(str(root / 'train')), (3, 32, 32), batch_size=2, num_workers=1, device='cpu')
    print('batches', sum(1 for _ in loader), flush=True)
"""


def _script(guarded: bool) -> str:
    return textwrap.dedent(SCRIPT).format(guard="if __name__ == '__main__':" if guarded else 'if True:')


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k != 'TIMMDATA_DEBUG'}


@pytest.mark.slow  # a spawn worker imports torch again: about 20 s on two busy cores
@pytest.mark.skipif(not os.path.exists('/dev/stdin'), reason='no /dev/stdin on this system')
def test_guarded_script_from_a_pipe(tmp_path):
    "`python /dev/stdin` fed a guarded script through a pipe: its spawn worker starts and both batches are read."
    r = subprocess.run([sys.executable, '/dev/stdin', str(tmp_path / 'data')], input=_script(True), cwd=tmp_path,
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert 'MainGuardError' not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0 and 'batches 2' in r.stdout, (r.stdout, r.stderr[-3000:])


@pytest.mark.slow
def test_unguarded_script_file_still_refused(tmp_path):
    "The same script without the guard, run from a file: `MainGuardError` naming the script, no batch read."
    (tmp_path / 'train.py').write_text(_script(False))
    r = subprocess.run([sys.executable, 'train.py', str(tmp_path / 'data')], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=300)
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''
    assert r.returncode == 1 and 'MainGuardError' in last and 'train.py' in last, r.stderr[-3000:]
    assert 'batches' not in r.stdout, r.stdout
