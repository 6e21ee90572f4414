"""The package builds quietly: no setuptools deprecation warning (an SPDX license expression, no License classifier).

Builds a wheel of this checkout with the installed setuptools (offline: no build isolation, no dependencies) into a
temporary folder; nothing is installed. `pip install -e` prints one more note that no setuptools editable mode
avoids ("Editable installation..." / "Editable install will be performed using .pth file"), so the install itself is
not what is scanned."""
import re, subprocess, sys, zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_builds_without_warnings(tmp_path):
    setuptools = pytest.importorskip('setuptools')
    if int(setuptools.__version__.split('.')[0]) < 77: pytest.skip('SPDX license expressions need setuptools >= 77')
    r = subprocess.run([sys.executable, '-m', 'pip', 'wheel', str(ROOT), '--no-deps', '--no-build-isolation', '--no-index',
                        '-w', str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert not re.search(r'warning', out, re.I), out
    wheels = list(tmp_path.glob('timmdata-*.whl'))
    assert len(wheels) == 1, out
    with zipfile.ZipFile(wheels[0]) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))).decode()
    assert 'License-Expression: Apache-2.0' in meta and 'Classifier: License ::' not in meta, meta[:1500]


def test_readme_pictures_are_committed_files():
    "The README shows its pictures on a code host: each links a file in the repository (made by a notebook cell)."
    readme = (ROOT / 'README.md').read_text(encoding='utf-8')
    links = re.findall(r'!\[[^\]]*\]\(([^)\s]+)\)', readme)
    assert 'nbs/images/data_way.png' in links, links
    for link in links:  # a real picture, not a placeholder or a Git LFS pointer (the tour's thumbnails are a few KB)
        assert not re.match(r'[a-z][a-z0-9+.-]*:', link), link
        data = (ROOT / link).read_bytes()
        assert data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) > 2_000, link


IMPORT = 'import timmdata; timmdata.create_loader; print(timmdata.__file__)'


def _import_from(cwd: Path) -> str:
    r = subprocess.run([sys.executable, '-c', IMPORT], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert r.returncode == 0, f'`python -c "{IMPORT}"` from {cwd} failed:\n{r.stderr[-2000:]}'
    return r.stdout.strip()


def test_import_from_the_clones_parent(tmp_path):
    "A script beside the clone imports the package: the clone's root (`~/timmdata`, no __init__.py) is never taken for it."
    # as Get started's `git clone ... && cd timmdata && pip install -e .` leaves it: a folder named like the package,
    # without __init__.py, beside the script. Python's own search finds it first; it must not win over the install
    (tmp_path / 'timmdata').mkdir()
    (tmp_path / 'timmdata' / 'nbs').mkdir()
    got = _import_from(tmp_path)
    assert got.endswith('__init__.py') and 'timmdata' in got, got
    if (ROOT / 'timmdata' / '__init__.py').samefile(got):  # the checkout's own install (make install): its parent too
        assert Path(_import_from(ROOT.parent)).samefile(got)


def _dry_run(target: str) -> str:
    "What `make TARGET` would run with every step out of date, printed and not run (`make -n -B`)."
    r = subprocess.run(['make', '-n', '-B', target], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_make_test_installs_nothing_outside_the_project():
    "`make test` installs no system package and nothing with npm; `make test-all` installs both, after saying so."
    if subprocess.run(['make', '--version'], capture_output=True).returncode != 0:
        pytest.skip('make is not installed')
    outside = re.compile(r'apt-get install[^\n]*chromium|npm install', re.I)
    test, test_all = _dry_run('test'), _dry_run('test-all')
    assert not outside.search(test), outside.search(test).group(0)
    assert len(outside.findall(test_all)) == 2, test_all
    assert test_all.index('== test-deps') < test_all.index('apt-get'), test_all


def test_make_demo_takes_the_cpu_torch_without_a_gpu(tmp_path):
    """`make demo` on Linux without an NVIDIA GPU installs torch and torchvision from PyTorch's CPU index before the
    library (pip's default torch brings 3 GB of CUDA libraries); with a GPU (a fake `nvidia-smi` that lists one, or a
    fake /proc/driver/nvidia that does) it says nothing of that index. Dry runs (`make -n -B`): nothing is installed."""
    if subprocess.run(['make', '--version'], capture_output=True).returncode != 0:
        pytest.skip('make is not installed')
    if sys.platform != 'linux': pytest.skip("only Linux's default torch brings CUDA's libraries")
    smi = tmp_path / 'nvidia-smi'
    smi.write_text('#!/bin/sh\necho "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)"\n')
    smi.chmod(0o755)
    no_proc, proc = tmp_path / 'no-driver', tmp_path / 'driver'
    (proc / 'gpus' / '0000:01:00.0').mkdir(parents=True)

    def demo(nvidia_smi, nvidia_proc) -> str:
        r = subprocess.run(['make', '-n', '-B', 'demo', f'NVIDIA_SMI={nvidia_smi}', f'NVIDIA_PROC={nvidia_proc}'],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    cpu = re.compile(r'^bash tools/demo_torch\.sh install \S+ https://download\.pytorch\.org/whl/cpu$', re.M)
    lib = re.compile(r'^\S+ -m pip install -q -e \.$', re.M)
    out = demo(tmp_path / 'no-such-nvidia-smi', no_proc)
    assert len(cpu.findall(out)) == 1 and len(lib.findall(out)) == 1, out
    assert cpu.search(out).start() < lib.search(out).start(), out
    for gpu in (demo(smi, no_proc), demo(tmp_path / 'no-such-nvidia-smi', proc)):
        assert len(lib.findall(gpu)) == 1, gpu
        assert 'download.pytorch.org' not in gpu and 'demo_torch' not in gpu, gpu
    assert 'demo_torch' not in _dry_run('install')  # the development install as it was
