"""The `timmdata` console script as a shell runs it: in a subprocess, exit status and stderr.

Uses the installed console script next to the running Python (`.venv/bin/timmdata`), else
`python -m timmdata.cli`. User mistakes must give one line on stderr and exit status 2, never a traceback."""
import os, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / 'timmdata'
CMD = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, '-m', 'timmdata.cli']


def timmdata(*args, **env):
    return subprocess.run([*CMD, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_info():
    r = timmdata('info')
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for key in ('timmdata:', 'python:', 'torch:', 'torchvision:', 'C extension:', 'JPEG decoder:', 'device:', 'CPUs:'):
        assert any(l.startswith(key) for l in lines), f'no {key!r} line in:\n{r.stdout}'
    assert f'CPUs:          {os.cpu_count()} ' in r.stdout, r.stdout


def test_info_says_why_the_extension_is_off():
    r = timmdata('info', TIMMDATA_NATIVE='0')
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith('C extension:'))
    assert 'TIMMDATA_NATIVE=0' in line, line


def test_python_m_runs_the_cli():
    r = subprocess.run([sys.executable, '-m', 'timmdata.cli', '--version'], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith('timmdata '), (r.stdout, r.stderr)


def one_line_error(r, says):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert 'Traceback' not in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1, f'expected one line on stderr, got:\n{r.stderr}'
    assert r.stderr.startswith('timmdata') and says in r.stderr, r.stderr


def test_missing_root():
    one_line_error(timmdata('demo', '--root', '/nonexistent'), "timmdata demo: dataset root '/nonexistent' does not exist")


def test_root_without_images(tmp_path):
    (tmp_path / 'a').mkdir(); (tmp_path / 'a' / 'notes.txt').write_text('not an image')
    one_line_error(timmdata('demo', '--root', str(tmp_path)), 'holds no images')


def test_unknown_command():
    one_line_error(timmdata('train'), "unknown command 'train'")


@pytest.mark.parametrize('args', [('demo', '--batch-size', '0'), ('bench', '--workers', '-1'), ('info', '--nope')])
def test_bad_option_is_a_usage_error(args):
    r = timmdata(*args)
    assert r.returncode == 2 and 'Traceback' not in r.stderr, r.stderr
    assert 'error: ' in r.stderr.splitlines()[-1], r.stderr
