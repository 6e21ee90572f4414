"""Errors a user can cause, as a script meets them: each run as a script in a new process, its stderr counted. The
message says the cause on one line, no chained traceback of the library's reads and none of its frames follow it
(`TIMMDATA_DEBUG=1` prints them all); a web server that is down is said at once, not after retries; a URL where a
folder is expected names the readers that take one; a script that starts forkserver or spawn workers from its top
level without `if __name__ == '__main__':` is told so before any worker starts, and leaves no process behind. The fast
cases run in this process, the lines counted as Python prints an error it was not caught (`lines_seen`): a damaged
JPEG met in a worker or a loader thread (its message, with the fix, the last line: none of the loader's hand-over
between threads), a bad `auto_augment` string, and every CLI command's mistakes (one line, a non-zero exit)."""
import contextlib, io, os, subprocess, sys, textwrap, traceback

import pytest
from _helpers import free_port, remote_test_datasets


def run_script(tmp_path, code: str, debug: bool = False, env: dict = None, name: str = 'train.py'):
    "Run `code` as script `name` in a new process in `tmp_path`: (exit status, stderr lines)."
    script = tmp_path / name
    script.write_text(textwrap.dedent(code))
    env = {**(env or os.environ)}
    env.pop('TIMMDATA_DEBUG', None)
    if debug:
        env['TIMMDATA_DEBUG'] = '1'
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stderr.splitlines()


def one_error_line(lines: list) -> str:
    """The error's line of a short traceback: the frames shown are the script's own and the one public function's it
    called (no chained traceback, no frames of the library's internals); returns the last line."""
    text = '\n'.join(lines)
    assert 'direct cause' not in text and 'During handling' not in text, text
    frames = [ln for ln in lines if ln.startswith('  File "')]
    assert len(frames) <= 2 and len(lines) <= 8, text  # the script's line, the public function's one
    return lines[-1]


@pytest.mark.slow
def test_web_server_down(tmp_path):
    "A server that is not running: one line naming the URL and that no server answers, said at the first try."
    port = free_port()
    code = f"""
    import time
    from timmdata import create_dataset
    t = time.monotonic()
    try:
        create_dataset('wds/pets', root='http://127.0.0.1:{port}/shards', split='train')
    finally:
        print(f'{{time.monotonic() - t:.1f}}', file=open('took', 'w'))
    """
    rc, err = run_script(tmp_path, code)
    last = one_error_line(err)
    assert rc == 1 and f'http://127.0.0.1:{port}/shards/_info.json' in last and 'no server answers' in last, last
    # not retried: the retries' waits (0.25 + 1 + 4 s) would add 5 s; a single refused connection takes milliseconds
    assert float((tmp_path / 'took').read_text()) < 5.0
    rc, err = run_script(tmp_path, code, debug=True)  # the whole chain, for debugging
    assert 'ConnectionRefusedError' in '\n'.join(err) and 'direct cause' in '\n'.join(err)


@pytest.mark.slow
def test_url_where_a_folder_is_expected(tmp_path):
    "create_dataset('') and mix_datasets with a URL: one line naming the readers that take a URL."
    for call in ("create_dataset('', root='http://127.0.0.1:9/shards')",
                 "mix_datasets([make_sample_dataset('data', n_train=2, n_val=0, classes=['a'], size=(32, 32), num_workers=0), 'http://127.0.0.1:9/shards'])"):
        rc, err = run_script(tmp_path, f'from timmdata import create_dataset, make_sample_dataset, mix_datasets\n{call}\n')
        last = one_error_line(err)
        assert rc == 1 and "create_dataset('wds/NAME', root='http://127.0.0.1:9/shards')" in last and "'parquet/NAME'" in last, last


@pytest.mark.slow
def test_missing_folder(tmp_path):
    rc, err = run_script(tmp_path, "from timmdata import create_dataset\ncreate_dataset('', root='nothere')\n")
    assert one_error_line(err) == "FileNotFoundError: dataset root 'nothere' does not exist"


@pytest.fixture(scope='module')
def s3(tmp_path_factory):
    "A local S3 server holding the remote-read tests' shards as `shards/`."
    pytest.importorskip('obstore')
    pytest.importorskip('moto')
    pytest.importorskip('pyarrow')
    from timmdata.net.local_s3 import LocalS3
    root = remote_test_datasets(tmp_path_factory.mktemp('s3lines'), 12, plain=False)
    with LocalS3() as store:
        store.upload(root / 'shards', 'shards')
        store.uploaded = root / 'shards'
        yield store


@pytest.mark.slow
def test_s3_without_credentials(tmp_path, s3):
    "No credentials in the environment: the bucket's answer on one line, the URL once."
    env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_') or k.startswith('AWS_ENDPOINT_URL')}
    env.update(AWS_EC2_METADATA_DISABLED='true', AWS_CONFIG_FILE=str(tmp_path / 'none'), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / 'none'))
    rc, err = run_script(tmp_path, f"from timmdata import create_dataset\ncreate_dataset('wds/x', root={s3.url('shards')!r}, split='train')\n", env=env)
    last = one_error_line(err)
    assert rc == 1 and last.count(s3.url('shards')) == 1, last


GUARDLESS = """
import sys
from timmdata import LocalS3, create_dataset, create_loader
with LocalS3() as s3:  # started again by every worker that imports this script
    s3.upload(sys.argv[1], 'shards')
    ds = create_dataset('wds/x', root=s3.url('shards'), split='train', is_training=True, batch_size=4)
    print('server', s3._proc.pid, flush=True)
    loader = create_loader(ds, (3, 16, 16), batch_size=4, is_training=True, num_workers={workers}, device='cpu')
    print('batches', sum(1 for _ in loader))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_workers_without_the_main_guard(tmp_path, s3):
    "A bucket read with workers from a script's top level: one line naming the guard and the fix, no worker started, the script's server stopped; with num_workers=0 it needs no guard."
    shards = str(s3_root(s3))
    script = tmp_path / 'train.py'
    script.write_text(GUARDLESS.format(workers=2))
    r = subprocess.run([sys.executable, str(script), shards], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={k: v for k, v in os.environ.items() if k != 'TIMMDATA_DEBUG'})
    err = r.stderr.splitlines()
    last = one_error_line(err)
    assert r.returncode == 1 and "__name__ == '__main__'" in last and 'train.py' in last and 'num_workers=0' in last, last
    assert 'MainGuardError' in last and 'forkserver' in last, last
    assert r.stdout.count('server') == 1, r.stdout  # the script ran once: no worker imported it
    assert not _alive(int(r.stdout.split()[1])), 'the script\'s S3 server was left running'
    script.write_text(GUARDLESS.format(workers=0))
    r = subprocess.run([sys.executable, str(script), shards], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and 'batches 3' in r.stdout, r.stderr


@pytest.mark.slow
def test_workers_under_the_main_guard(tmp_path, s3):
    "The same script under `if __name__ == '__main__':`: its workers start and read every batch."
    body = textwrap.indent(GUARDLESS.format(workers=2).split('\n', 2)[2], '    ')
    script = tmp_path / 'train.py'
    script.write_text(f"import sys\nfrom timmdata import LocalS3, create_dataset, create_loader\nif __name__ == '__main__':\n{body}")
    r = subprocess.run([sys.executable, str(script), str(s3_root(s3))], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and 'batches 3' in r.stdout, r.stderr


def s3_root(s3):
    "The local folder of shards the fixture uploaded."
    return s3.uploaded


def lines_seen(fn) -> tuple:
    "(the error `fn()` raised, the lines Python prints for it uncaught from `fn`'s frame down: `fn`'s line stands for a script's)."
    try:
        fn()
    except Exception as e:
        return e, ''.join(traceback.format_exception(type(e), e, e.__traceback__.tb_next)).splitlines()  # not this frame
    raise AssertionError(f'{fn} raised nothing')


@pytest.fixture(scope='module')
def damaged(tmp_path_factory):
    "Four images in two classes, the first cut short: what `create_loader` meets first."
    from timmdata.tools.sample_data import make_sample_dataset
    root = make_sample_dataset(tmp_path_factory.mktemp('dmg') / 'data', n_train=2, n_val=0, classes=['a', 'b'],
                               size=(32, 32), num_workers=0)
    f = root / 'train' / 'a' / 'a_00000.JPEG'
    f.write_bytes(f.read_bytes()[:60])
    return root / 'train'


@pytest.mark.parametrize('mode,workers', [('process', 1), ('thread', 1)])
def test_damaged_jpeg_in_a_worker(damaged, monkeypatch, mode, workers):
    """The error of its own kind (an `ImageDecodeError` is an `OSError`), under the caller's frame and the loader's one
    line: the fix its last line. It was 24 lines, the loader's hand-over between threads (six frames) above the
    message and a note below it; `TIMMDATA_DEBUG=1` shows them all."""
    from timmdata import create_dataset, create_loader
    from timmdata.pixels.decode import ImageDecodeError
    monkeypatch.delenv('TIMMDATA_DEBUG', raising=False)
    loader = create_loader(create_dataset('', root=str(damaged)), (3, 32, 32), batch_size=2, num_workers=workers,
                           worker_mode=mode, device='cpu')
    e, lines = lines_seen(lambda: list(loader))
    assert isinstance(e, ImageDecodeError) and isinstance(e, OSError), lines
    last = one_error_line(lines)
    assert last.startswith('timmdata.pixels.decode.ImageDecodeError: sample 0 (') and 'a_00000.JPEG' in last, lines
    assert last.endswith("fix or remove the file, or pass bad_sample='skip' to skip such samples"), lines
    monkeypatch.setenv('TIMMDATA_DEBUG', '1')
    e, lines = lines_seen(lambda: list(loader))
    text = '\n'.join(lines)
    assert isinstance(e, ImageDecodeError) and 'feeder.py' in text and '_on_bad' in text, text  # every frame


@pytest.mark.parametrize('via', ['create_transform', 'create_loader'])
def test_bad_auto_augment(damaged, monkeypatch, via):
    "The message that lists the valid keys, under the caller's frame and the public function's one line (was 16 and 26 lines)."
    from timmdata import create_dataset, create_loader, create_transform
    monkeypatch.delenv('TIMMDATA_DEBUG', raising=False)
    ds = create_dataset('', root=str(damaged))
    calls = {'create_transform': lambda: create_transform(224, is_training=True, auto_augment='rand-x9'),
             'create_loader': lambda: create_loader(ds, (3, 32, 32), batch_size=2, is_training=True, auto_augment='rand-x9',
                                                    num_workers=0, device='cpu')}
    _, lines = lines_seen(calls[via])
    last = one_error_line(lines)
    assert last == ("ValueError: auto_augment 'rand-x9': unknown section 'x9' for rand; expected a key followed by "
                    'a number, keys: m, n, p, mstd, mmax, inc'), lines


def test_every_command_one_line(damaged, tmp_path, monkeypatch):
    """Each command with a missing folder, a file where a folder is expected, or a bad option value: one line on
    stderr, a non-zero exit. Run in this process as the console script runs them (`main`)."""
    from timmdata.tools.cli import COMMANDS, main
    monkeypatch.delenv('TIMMDATA_DEBUG', raising=False)
    src, afile, gone = str(damaged), str(tmp_path / 'notes.txt'), str(tmp_path / 'nothere')
    (tmp_path / 'notes.txt').write_text('not a folder')
    cases = [
        (['cache', src, src], 1, 'must not be the source'),  # was a 16-line traceback
        (['cache', src, afile], 2, 'File exists'),  # the store's folder is a file: was a traceback
        (['cache', gone, str(tmp_path / 'store')], 2, 'does not exist'),
        (['cache', src, str(tmp_path / 'store'), '--quality', '500'], 2, 'quality must be in 1..100'),
        (['check', afile], 2, 'is a file'),
        (['check', src, '--workers', '-3'], 2, "got '-3'"),
        (['demo', '--root', gone], 2, 'does not exist'),
        (['demo', '--root', src, '--batch-size', '0'], 2, "got '0'"),
        (['bench', '--root', gone], 2, 'is not a folder'),
        (['bench', '--root', src, '--pipelines', 'foo'], 2, "got 'foo'"),
        (['shards', afile, str(tmp_path / 'sh')], 2, 'is a file'),
        (['shards', src, str(tmp_path / 'sh'), '--shard-size', '0'], 2, 'shard_size must be'),
        (['index', gone], 2, 'does not exist'),
        (['index', afile], 2, "got '"),
        (['simulate', '--ranks', '0'], 2, '--ranks must be >= 1'),  # was 14 lines: the usage above it
        (['top', '--dir', afile, '--once'], 2, 'is a file'),  # was exit status 0: watched as an empty folder
        (['top', '--interval', '-1', '--once'], 2, '--interval must be'),
        (['profile', gone], 2, 'does not exist'),
        (['profile', src, '--batches', '0'], 2, "got '0'"),
        (['tune', afile], 2, 'is a file'),
        (['tune', src, '--window', '0'], 2, "got '0'"),
        (['info', '--json', 'extra'], 2, 'unrecognized arguments: extra'),
    ]
    assert {argv[0] for argv, *_ in cases} == set(COMMANDS), 'a command without a case'
    for argv, status, says in cases:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                got = main(argv)
            except SystemExit as e:
                got = e.code
        lines = err.getvalue().splitlines()
        assert (got, len(lines)) == (status, 1), (argv, got, err.getvalue())
        assert lines[0].startswith(f'timmdata {argv[0]}: ') and says in lines[0], (argv, lines)
