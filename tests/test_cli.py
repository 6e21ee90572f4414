"""The `timmdata` console script as a shell runs it: in a subprocess, exit status and stderr.

Uses the installed console script next to the running Python (`.venv/bin/timmdata`), else
`python -m timmdata.tools.cli`. User mistakes must give one line on stderr and exit status 2, never a traceback.
Every command starts a Python that imports torch (seconds), so they are started together, once per module, and the
cases per command (a damaged file, a missing root, an empty folder, a bad option, --debug) and the one-line mistakes
run in ONE Python (DRIVER) calling `main` as the console script does; the finer cases are tested in-process in nbs/47_cli.ipynb.
Those Pythons take ~25 s here, so every test reading their results (`runs`) is marked slow (`make test-all`);
the tests that need no fresh interpreter (each option's help, the extras) stay in `make test`."""
import argparse, json, os, re, shutil, subprocess, sys, tarfile
from pathlib import Path

import pytest
from PIL import Image
from timmdata.tools.cli import COMMANDS, HelpFormatter, command_parser, usage
from timmdata.tools.sample_data import make_sample_dataset

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / 'timmdata'
CMD = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, '-m', 'timmdata.tools.cli']


DRIVER = '''
import contextlib, io, json, os, sys, traceback
from timmdata.tools.cli import main
res = {}
for cmd, kinds in json.loads(sys.argv[1]).items():
    for kind, argv in kinds.items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if kind == 'env': os.environ['TIMMDATA_DEBUG'] = '1'
            try: status = main(argv)
            except SystemExit as e: status = e.code
            except BaseException: status, _ = 'raised', err.write(traceback.format_exc())
            finally: os.environ.pop('TIMMDATA_DEBUG', None)
        res[f'{cmd}/{kind}'] = [status, out.getvalue(), err.getvalue()]
print(json.dumps(res))
'''


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    "name -> CompletedProcess-like (returncode, stdout, stderr), all commands run at the same time."
    empty = tmp_path_factory.mktemp('no_images')
    (empty / 'a').mkdir(); (empty / 'a' / 'notes.txt').write_text('not an image')
    clean = make_sample_dataset(tmp_path_factory.mktemp('clean'), n_train=2, n_val=1, classes=['a', 'b'], size=(96, 64))
    damaged = tmp_path_factory.mktemp('damaged')
    shutil.copytree(clean, damaged, dirs_exist_ok=True)
    jpg = damaged / 'train' / 'b' / sorted(os.listdir(damaged / 'train' / 'b'))[0]
    jpg.write_bytes(jpg.read_bytes()[:600])  # cut short
    (damaged / 'val' / 'a' / 'zero.jpg').write_bytes(b'')
    empty_dir = tmp_path_factory.mktemp('empty')
    out = tmp_path_factory.mktemp('out')
    pq_bad, pq_clean, pq_cut = parquet_folders(clean, tmp_path_factory)
    cases = {  # command -> kind of mistake -> argv: run in one Python (one torch import), see DRIVER
        'demo': {'damaged': ['demo', '--root', str(damaged), '--batch-size', '2', '--no-progress', '--out', str(out / 'd.png')],
                 'missing': ['demo', '--root', '/nonexistent'], 'empty': ['demo', '--root', str(empty_dir)],
                 'bad_option': ['demo', '--workers', 'two']},
        'bench': {'damaged': ['bench', '--root', str(damaged / 'train'), '--no-progress', '--out', str(out / 'b')],
                  'missing': ['bench', '--root', '/nonexistent'], 'empty': ['bench', '--root', str(empty_dir)],
                  'bad_option': ['bench', '--pipelines', 'test']},
        'cache': {'damaged': ['cache', str(damaged / 'train'), str(out / 'store'), '--workers', '0'],
                  'damaged_raise': ['cache', str(damaged / 'train'), str(out / 'store'), '--workers', '0', '--bad-sample', 'raise'],
                  'missing': ['cache', '/nonexistent', str(out / 's1')], 'empty': ['cache', str(empty_dir), str(out / 's2')],
                  'bad_option': ['cache', str(damaged), str(out / 's3'), '--format', 'png'],
                  'bad_workers': ['cache', str(damaged), str(out / 's4'), '--workers', '-1']},
        'check': {'damaged': ['check', str(damaged), '--workers', '0', '--no-progress'], 'missing': ['check', '/nonexistent'],
                  'empty': ['check', str(empty_dir)], 'bad_option': ['check', str(damaged), '--workers', '-1'],
                  'bad_split': ['check', str(clean), '--split', 'tain', '--no-progress'],
                  'no_images': ['check', str(empty), '--no-progress'],
                  'parquet_bad': ['check', str(pq_bad), '--workers', '2', '--no-progress'],
                  'parquet_clean': ['check', str(pq_clean), '--workers', '0', '--no-progress'],
                  'clean': ['check', str(clean), '--no-progress']},
        'index': {'parquet_cut': ['index', str(pq_cut), '--no-progress'], 'parquet': ['index', str(pq_clean), '--no-progress']},
        'tune': {'damaged': ['tune', str(damaged / 'train'), '--batch-size', '2', '--window', '1', '--seconds', '0',
                             '--max-batches', '4']},
        'shards': {'damaged': ['shards', str(damaged), str(out / 'sh'), '--resize', '32', '--no-progress'],
                   'missing': ['shards', '/nonexistent', str(out / 'sh1')], 'empty': ['shards', str(empty_dir), str(out / 'sh2')],
                   'bad_option': ['shards', str(damaged), str(out / 'sh3'), '--shard-size', '0'],
                   'bad_split': ['shards', str(clean), str(out / 'sh4'), '--split', 'tain', '--no-progress']},
        'profile': {'damaged': ['profile', str(damaged / 'train'), '--batches', '2', '--batch-size', '2', '--workers', '0'],
                    'missing': ['profile', '/nonexistent'], 'empty': ['profile', str(empty_dir)],
                    'bad_option': ['profile', str(damaged), '--worker-mode', 'fiber']},
        'info': {'bad_option': ['info', '--colour'], 'plain': ['info']},
        'help': {'demo': ['demo', '--help'], 'profile': ['profile', '--help'], 'index': ['index', '--help']},
        'short': {'profile': ['profile', str(clean / 'train'), '--batches', '10', '--batch-size', '1', '--workers', '0']},
        'top': {'missing_root': ['demo', '--root', '/nonexistent'], 'no_images': ['demo', '--root', str(empty)],
                'bad_option': ['demo', '--batch-size', '0'], 'check_missing': ['check', '/nonexistent']},
        'debug': {'flag': ['check', '/nonexistent', '--debug'], 'env': ['demo', '--root', '/nonexistent']},
    }
    # a Python each only where a case needs its own: the environment read at import (info_off), `python -m`, the console
    # script's exit path (check_damaged, shards); `info` and a clean `check` run in DRIVER's (a torch import each saved)
    cmds = {'cases': ([sys.executable, '-c', DRIVER, json.dumps(cases)], {}),
            'info_off': (CMD + ['info'], {'TIMMDATA_NATIVE': '0'}),
            'python_m': ([sys.executable, '-m', 'timmdata.tools.cli', 'train'], {}),  # `python -m` works, and an unknown command
            'check_damaged': (CMD + ['check', str(damaged), '--workers', '2'], {}),
            'shards': (CMD + ['shards', str(clean), str(tmp_path_factory.mktemp('shards') / 'sh'), '--shard-size', '3', '--resize', '48',
                              '--workers', '2', '--no-progress'], {})}
    procs = {k: subprocess.Popen(c, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, **env}) for k, (c, env) in cmds.items()}
    out = {'damaged_name': jpg.name}
    for k, p in procs.items():
        so, se = p.communicate(timeout=300)
        out[k] = subprocess.CompletedProcess(cmds[k][0], p.returncode, so, se)
    return out


def parquet_folders(clean, tmp_path_factory) -> tuple:
    "Parquet files of the clean dataset's 4 training images, 4 times: 4 files of 4 rows, row 9 a JPEG cut short and the last file cut short (bad); the same rows whole (clean); a folder of one file cut short (cut)."
    from timmdata.parquet.parquet_files import write_sample_parquet
    jpegs = sorted((clean / 'train').rglob('*.JPEG'))
    rows = [(f.read_bytes(), ['a', 'b'].index(f.parent.name)) for f in jpegs] * 4  # 4 images, 16 rows
    folders = [tmp_path_factory.mktemp(n) for n in ('pq_bad', 'pq_clean', 'pq_cut')]
    write_sample_parquet(folders[1], rows[:16], ['a', 'b'], files=4, row_group_size=3)
    rows[9] = (rows[9][0][:700], rows[9][1])
    parts = write_sample_parquet(folders[0], rows[:16], ['a', 'b'], files=4, row_group_size=3)
    Path(parts[3]).write_bytes(Path(parts[3]).read_bytes()[:-200])
    (cut,) = write_sample_parquet(folders[2], rows[:4], ['a', 'b'], files=1)
    Path(cut).write_bytes(Path(cut).read_bytes()[:-50])
    return folders


def case(runs, key):
    "A case run by DRIVER (`main(argv)` as the console script calls it), as a CompletedProcess."
    status, out, err = per_command(runs)[key]
    return subprocess.CompletedProcess(key, status, out, err)


@pytest.mark.slow
def test_info(runs):
    r = case(runs, 'info/plain')
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for key in ('timmdata:', 'python:', 'torch:', 'torchvision:', 'C extension:', 'JPEG decoder:', 'TorchCodec:', 'device:', 'CPUs:'):
        assert any(l.startswith(key) for l in lines), f'no {key!r} line in:\n{r.stdout}'
    assert f'CPUs:          {os.cpu_count()} ' in r.stdout, r.stdout


@pytest.mark.slow
def test_info_says_why_the_extension_is_off(runs):
    r = runs['info_off']
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith('C extension:'))
    assert 'TIMMDATA_NATIVE=0' in line, line


def one_line_error(r, says):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert 'Traceback' not in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1, f'expected one line on stderr, got:\n{r.stderr}'
    assert r.stderr.startswith('timmdata') and says in r.stderr, r.stderr


def top(runs, kind):
    "A case run by DRIVER (`main(argv)` as the console script calls it), as a CompletedProcess: one Python for all."
    return case(runs, f'top/{kind}')


# the console script's own exit path (status 2, one line) is the python_m case and the check/shards runs below; the
# other one-line mistakes run in DRIVER's one Python (each command started on its own cost a torch import, seconds)
@pytest.mark.slow
def test_python_m_and_unknown_command(runs): one_line_error(runs['python_m'], "unknown command 'train'")
@pytest.mark.slow
def test_missing_root(runs): one_line_error(top(runs, 'missing_root'), "timmdata demo: dataset root '/nonexistent' does not exist")
@pytest.mark.slow
def test_root_without_images(runs): one_line_error(top(runs, 'no_images'), 'found no images')


@pytest.mark.slow
def test_bad_option_is_a_usage_error(runs):
    r = top(runs, 'bad_option')
    assert r.returncode == 2 and 'Traceback' not in r.stderr, r.stderr
    assert 'error: ' in r.stderr.splitlines()[-1], r.stderr


@pytest.mark.slow
def test_check_lists_damaged_images_and_exits_1(runs):
    r = runs['check_damaged']
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert len(lines) == 3, r.stdout  # one line per bad image, then the summary
    assert lines[0].startswith('train/b/') and 'ImageDecodeError: truncated JPEG (600 bytes)' in lines[0], lines
    assert lines[1].startswith('val/a/zero.jpg: ImageDecodeError: empty file'), lines
    assert lines[2].startswith('checked 7 images') and '2 bad' in lines[2], lines
    assert 'Traceback' not in r.stderr and 'timmdata check' in r.stderr, r.stderr  # the progress bar


@pytest.mark.slow
def test_check_clean_dataset_exits_0(runs):
    r = case(runs, 'check/clean')
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stdout.splitlines() == [r.stdout.splitlines()[-1]] and 'checked 6 images' in r.stdout and 'all decode' in r.stdout, r.stdout
    assert r.stderr == '', r.stderr  # --no-progress: nothing on stderr


@pytest.mark.slow
def test_check_missing_root(runs): one_line_error(top(runs, 'check_missing'), "timmdata check: dataset root '/nonexistent' does not exist")


@pytest.mark.slow
def test_shards_writes_resized_shards_timm_reads(runs):
    r = runs['shards']
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stderr == '', r.stderr  # --no-progress
    dst = Path(r.args[len(CMD) + 2])  # after the command: `timmdata` or `python -m timmdata.tools.cli`
    info = json.loads((dst / '_info.json').read_text())
    assert {s: v['shard_lengths'] for s, v in info['splits'].items()} == {'train': [3, 1], 'validation': [2]}  # timm's names
    assert sorted(p.name for p in dst.iterdir()) == ['_info.json', '_timmdata_dataset_index.json', '_timmdata_shards.json', 'train-000000.tar',
                                                    'train-000001.tar', 'validation-000000.tar']  # no build lock left
    from timmdata.dataset_factory import create_dataset
    assert len(create_dataset('wds/x', root=str(dst))) == 2  # the default split, 'validation'
    with tarfile.open(dst / 'train-000000.tar') as tf:
        assert {min(Image.open(tf.extractfile(m)).size) for m in tf if m.name.endswith('.jpg')} == {48}
    timm_data = pytest.importorskip('timm.data')
    assert len(list(timm_data.create_dataset('wds/x', root=str(dst), split='train'))) == 4



def per_command(runs):
    "command/kind -> (status, stdout, stderr) from the one Python that ran them all."
    r = runs['cases']
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize('cmd', ['demo', 'bench', 'cache', 'check', 'shards', 'profile'])
def test_each_command_missing_root_and_empty_folder_one_line(runs, cmd):
    res = per_command(runs)
    for kind, says in (('missing', "'/nonexistent'"), ('empty', 'no')):
        status, _, err = res[f'{cmd}/{kind}']
        assert status == 2 and len(err.splitlines()) == 1 and 'Traceback' not in err, (cmd, kind, status, err)
        assert err.startswith(f'timmdata {cmd}: ') and says in err, (cmd, kind, err)


@pytest.mark.slow
@pytest.mark.parametrize('cmd', ['demo', 'bench', 'cache', 'check', 'shards', 'profile', 'info'])
def test_each_command_bad_option_is_a_usage_error(runs, cmd):
    status, _, err = per_command(runs)[f'{cmd}/bad_option']
    assert status == 2 and 'Traceback' not in err and err.splitlines()[-1].startswith(f'timmdata {cmd}: error: '), (cmd, err)


@pytest.mark.slow
@pytest.mark.parametrize('cmd', ['check', 'shards'])
def test_misspelt_split_is_one_line_naming_the_splits(runs, cmd):
    "--split tain beside train/ and val/: one line naming the splits there and the closest, nothing read or written"
    status, out, err = per_command(runs)[f'{cmd}/bad_split']
    assert status == 2 and len(err.splitlines()) == 1 and 'Traceback' not in err, (cmd, status, err)
    assert err.startswith(f"timmdata {cmd}: no split 'tain' under ") and "'train', 'val'; did you mean 'train'?" in err, err
    assert not (Path(json.loads(runs['cases'].args[-1])['shards']['bad_split'][2])).exists()


@pytest.mark.slow
def test_cache_bad_workers_stops_before_any_work(runs):
    "--workers -1: argparse's one-line error before the source is scanned or the store's folder made"
    status, _, err = per_command(runs)['cache/bad_workers']
    assert status == 2 and 'Traceback' not in err, err
    assert err.splitlines()[-1].startswith('timmdata cache: error: num_workers (--workers) must be >= 0'), err
    out = Path(json.loads(runs['cases'].args[-1])['cache']['bad_workers'][2])
    assert not out.exists(), f'{out} was made before the argument was checked'


@pytest.mark.slow
@pytest.mark.parametrize('cmd', ['demo', 'bench', 'shards', 'profile'])
def test_damaged_image_is_one_line_naming_file_and_remedies(runs, cmd):
    status, _, err = per_command(runs)[f'{cmd}/damaged']
    assert status == 2 and len(err.splitlines()) == 1 and 'Traceback' not in err, (cmd, status, err)
    assert 'train/b/' in err and '--bad-sample skip' in err and '`timmdata check ' in err and "bad_sample='skip'" not in err, err


@pytest.mark.slow
def test_damaged_image_through_dataloader_workers(runs):
    status, _, err = per_command(runs)['demo/damaged']  # 2 workers: torch re-raises the worker's error, its traceback inside
    assert status == 2 and 'could not be read or decoded: truncated JPEG (600 bytes)' in err and 'Original Traceback' not in err, err


@pytest.mark.slow
def test_damaged_images_listed_by_check_and_left_out_by_cache(runs):
    res = per_command(runs)
    jpg_name = runs['damaged_name']
    status, out, err = res['check/damaged']
    assert status == 1 and 'truncated JPEG' in out and 'empty file' in out, (status, out, err)
    status, out, err = res['cache/damaged']
    assert status == 0 and '1 bad source images left out, listed in' in out, (status, out, err)
    status, out, err = res['cache/damaged_raise']  # the same store, up to date: only the verdict differs
    assert status == 2 and err.splitlines()[-1].startswith('timmdata cache: 1 source image(s) could not be decoded, the first '), err
    assert f"the first b/{jpg_name} in " in err and '--bad-sample skip' in err and '`timmdata check ' in err, err


@pytest.mark.slow
def test_debug_shows_the_traceback(runs):
    status, _, err = per_command(runs)['debug/flag']
    assert status == 'raised' and 'Traceback' in err and 'FileNotFoundError' in err, err
    status, _, err = per_command(runs)['debug/env']  # TIMMDATA_DEBUG=1
    assert status == 'raised' and 'Traceback' in err and "'/nonexistent' does not exist" in err, err


@pytest.mark.slow
def test_profile_says_when_it_measured_fewer_batches_than_asked(runs):
    "--batches 10 over an epoch of 4 batches: the warm-up and 3 measured, said on the first line, with why"
    status, out, err = per_command(runs)['short/profile']
    assert status == 0, (status, out, err)
    first = out.splitlines()[0]
    assert first.startswith('measured 3 batches, not the 10 asked: one epoch of ') and 'holds 4 batches (batch size 1)' in first, out
    assert 'the first is the warm-up' in first and '--batch-size' in first, first


# every option of every command, read from the parsers themselves (argparse's objects, not the help's text)


def option_help(parser, action) -> str:
    "An option's help as `--help` prints it (its %(default)s filled in, the formatter's default added)."
    return parser._get_formatter()._expand_help(action)


@pytest.mark.parametrize('cmd', sorted(COMMANDS))
def test_every_option_has_help_and_says_its_default_once(cmd):
    p = command_parser(cmd)
    assert p.prog == f'timmdata {cmd}' and p.formatter_class is HelpFormatter, (cmd, p.prog, p.formatter_class)
    for a in p._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        name = '/'.join(a.option_strings) or a.dest
        assert a.help and a.help.strip(), f'timmdata {cmd} {name}: no help'
        text = option_help(p, a)
        said = text.lower().count('default')
        assert said <= 1, f'timmdata {cmd} {name}: its default said {said} times: {text!r}'
        if a.option_strings and a.default is not None and a.default is not False:
            assert said == 1, f'timmdata {cmd} {name}: its default ({a.default!r}) not said: {text!r}'
        assert '(default: None)' not in text and '(default: False)' not in text, text


@pytest.mark.slow
def test_help_as_the_shell_prints_it(runs):
    "`timmdata demo --help` through main: --root's default said once, in words; no default for a flag"
    status, out, err = per_command(runs)['help/demo']
    assert status == 0 and err == '', (status, err)
    text = ' '.join(out.split())
    assert text.count('(default: the generated sample dataset)') == 1 and text.count('default') == 5, text  # 5 options, the flag none
    assert 'images per batch (default: 64)' in text and '(default: None)' not in text and '(default: False)' not in text, text
    status, out, _ = per_command(runs)['help/profile']
    text = ' '.join(out.split())
    assert status == 0 and text.count('(0: load in this process; default: one per CPU this process may use, here ') == 1, text
    assert text.count('default:') == 6 and '(default: 2)' not in text.split('--workers WORKERS')[-1].split('--worker-mode')[0], text


HELP_ALONE = """
import contextlib, io, sys
from timmdata.tools.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try: main([sys.argv[1], '--help'])
    except SystemExit as e: status = e.code
print(status, 'torch' in sys.modules, out.getvalue().split()[:2])
"""


# slow: nbs/tools/47_cli.ipynb's hidden cell (`make test`) checks every command's --help in one fresh Python, torch looked
# for after each; this runs a Python per command, which names the command alone
@pytest.mark.slow
@pytest.mark.parametrize('cmd', sorted(COMMANDS))
def test_command_help_imports_no_torch(cmd):
    "`timmdata COMMAND --help` builds the parser from its parser function (a module without torch), never the command's module."
    r = subprocess.run([sys.executable, '-c', HELP_ALONE, cmd], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.split() == ['0', 'False', "['usage:',", "'timmdata']"], (r.stdout, r.stderr[-2000:])


@pytest.mark.slow
def test_index_help_speaks_of_shards_and_parquet(runs):
    status, out, _ = per_command(runs)['help/index']
    text = ' '.join(out.split())
    assert status == 0 and 'Tar shards: ' in text and 'Parquet files (a folder without tar shards)' in text, text
    line = next(l for l in usage().splitlines() if l.split()[0] == 'index')
    assert 'tar shards' in line and 'Parquet' in line, line


def setup_kwargs() -> dict:
    "What setup.py hands to setuptools.setup, read by running setup.py with setup() caught (nothing built)."
    import setuptools
    got, real, cwd = {}, setuptools.setup, os.getcwd()
    setuptools.setup = lambda **kw: got.update(kw)
    try:
        os.chdir(ROOT)
        exec(compile((ROOT / 'setup.py').read_text(encoding='utf-8'), str(ROOT / 'setup.py'), 'exec'), {'__name__': '__main__'})
    finally:
        setuptools.setup = real
        os.chdir(cwd)
    return got


def test_all_extra_holds_every_optional_feature():
    "pip install 'timmdata[all]' installs every optional feature: each extra but dev (the tools to develop timmdata)"
    extras = setup_kwargs()['extras_require']
    features = {k: v for k, v in extras.items() if k not in ('all', 'dev')}
    assert {'wds', 'hf', 'remote', 'codec', 'nvimgcodec', 'parquet', 'lightning', 'accelerate', 'tensorboard', 'prometheus'} <= set(features)
    for k, reqs in features.items():
        assert reqs and set(reqs) <= set(extras['all']), f'[all] leaves out [{k}]: {sorted(set(reqs) - set(extras["all"]))}'
    assert set(extras['all']) == {r for reqs in features.values() for r in reqs}, 'holds only the features'


@pytest.mark.slow
def test_check_names_each_damaged_parquet_row_and_file(runs):
    "A folder of Parquet files in the Hub's layout: the damaged row named by its file and row, the file cut short by its name, status 1; a clean one passes."
    status, out, err = per_command(runs)['check/parquet_bad']
    lines = out.splitlines()
    assert status == 1 and len(lines) == 3, (status, out, err)
    assert lines[0].startswith('data/train-00002-of-00004.parquet row 1: ImageDecodeError: truncated JPEG (700 bytes)'), lines
    assert lines[1].startswith('data/train-00003-of-00004.parquet: ParquetError: ') and 'does not end with PAR1' in lines[1], lines
    assert lines[2].startswith('checked 12 images in 4 Parquet files') and lines[2].endswith('1 bad row (1 undecodable, 0 decode with warnings); 1 damaged file'), lines
    status, out, err = per_command(runs)['check/parquet_clean']
    assert status == 0 and out.splitlines()[-1].startswith('checked 16 images in 4 Parquet files') and out.strip().endswith('all decode'), (status, out, err)


@pytest.mark.slow
def test_index_says_what_exact_reads_are_and_names_check(runs):
    "`timmdata index` on Parquet files: its last line says in words how each image will be read; a damaged file is one line that names `timmdata check`, which lists it."
    status, out, err = per_command(runs)['index/parquet']
    assert status == 0 and out.splitlines()[-1] == '16 rows, 16 exact reads: each image is read by itself, one read of its own bytes (an exact read)', (out, err)
    status, out, err = per_command(runs)['index/parquet_cut']
    assert status == 2 and len(err.splitlines()) == 1 and 'does not end with PAR1' in err and '`timmdata check ' in err, (status, err)


@pytest.mark.slow
def test_advice_said_in_the_shell_is_the_commands(runs):
    "Every option a command's error names is an option of that command, and no Python keyword advice (`pass name=`) reaches a shell: said as the option, or left out."
    from timmdata.tools.cli import command_options
    seen, cases = 0, json.loads(runs['cases'].args[-1])
    for key, (status, out, err) in per_command(runs).items():
        group, kind = key.split('/')
        cmd = cases[group][kind][0]  # the command the case ran (the group 'top' runs demo and check)
        if cmd not in COMMANDS or status not in (1, 2) or not err.strip():
            continue
        last = re.sub(r'unrecognized arguments: [^;]*', '', err.strip().splitlines()[-1])  # the user's words, not advice
        opts = command_options(cmd)
        named = set(re.findall(r'(?<![\w-])--[a-z][a-z0-9-]*', last))
        assert named <= opts, f'timmdata {cmd} names {sorted(named - opts)}, which it does not have: {last}'
        assert not re.search(r'\bpass [a-z_]+=', last), f'timmdata {cmd} advises a Python keyword: {last}'
        seen += 1
    assert seen >= 20, seen  # the damaged, missing, empty and misspelt cases of every command
    status, _, err = per_command(runs)['check/no_images']
    assert status == 2 and 'found no images' in err and 'extensions=' not in err, err
    status, _, err = per_command(runs)['tune/damaged']
    assert status == 2 and '--bad-sample skip' in err and len(err.splitlines()) == 1, err


@pytest.mark.slow
@pytest.mark.parametrize('cmd', ['cache', 'check', 'bench', 'shards', 'index', 'demo'])
def test_no_progress_everywhere(cmd):
    "Every command that shows progress takes --no-progress (a script passes it to each alike)."
    from _helpers import run_cli
    r = run_cli(cmd, '--help')
    assert r.returncode == 0 and '--no-progress' in r.stdout, (cmd, r.stdout, r.stderr)


@pytest.mark.slow
def test_index_of_a_folder_that_does_not_exist(tmp_path):
    from _helpers import run_cli
    r = run_cli('index', str(tmp_path / 'nothere'))
    assert r.returncode == 2 and r.stderr.splitlines() == [f"timmdata index: folder '{tmp_path / 'nothere'}' does not exist"], r.stderr


@pytest.mark.slow
def test_cache_without_progress(tmp_path):
    "`timmdata cache SRC DST --no-progress`: the store built, no progress bar on stderr."
    from _helpers import run_cli
    from timmdata.tools.sample_data import make_sample_dataset
    src = make_sample_dataset(tmp_path / 'src', n_train=2, n_val=1, classes=['a', 'b'], size=(32, 32), num_workers=0)
    r = run_cli('cache', str(src), str(tmp_path / 'store'), '--no-progress', '--workers', '1')
    assert r.returncode == 0 and 'cached' in r.stdout and r.stderr == '', r.stderr
