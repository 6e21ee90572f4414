"""Hostile datasets, part two (issue 39): numbers and names a dataset states. `_info.json`'s counts checked where they are
read (named errors), nothing sized by a count before the data confirms it (memory bounded), names escaped before a
terminal; and a fuzzer over `_info.json` (300 cases here, 3,000 with TIMMDATA_SLOW=1).

The attacks that made the old code allocate without bound run in a child process under an address-space limit (1 GiB
over what it holds after its imports), so the old code fails them with a `MemoryError` instead of filling the machine;
the fuzzer runs its cases in such a child too (2 GiB), each under a 20 s alarm, with HOME pointed into the test's folder."""

import copy, io, json, os, random, shutil, signal, subprocess, sys, tarfile, textwrap, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
ESC = b'\x1b'


def run_py(code: str, timeout: float = 120, limit_gb: float = 1.0) -> subprocess.CompletedProcess:
    "Run `code` in a fresh Python (this tree first on its path) after `LIMIT()`: the address space capped at what it holds plus `limit_gb`."
    return subprocess.run(
        [sys.executable, '-c', _prelude(limit_gb) + textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tiny_tar(path: Path, labels) -> None:
    "A shard of len(labels) samples: a few bytes of 'jpg' and the label as .cls."
    with tarfile.open(path, 'w') as tf:
        for i, y in enumerate(labels):
            for ext, data in (('jpg', b'\xff\xd8 not decoded'), ('cls', str(y).encode())):
                ti = tarfile.TarInfo(f'{i:04d}.{ext}')
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))


def tiny_shards(root: Path, labels=(0, 1), **split) -> Path:
    "One shard of these labels and an `_info.json` whose train split has these fields (defaults: the true counts)."
    root.mkdir(parents=True, exist_ok=True)
    tiny_tar(root / 'train-000000.tar', labels)
    info = {
        'splits': {
            'train': {
                'name': 'train',
                'num_samples': len(labels),
                'filenames': ['train-000000.tar'],
                'shard_lengths': [len(labels)],
                **split,
            }
        }
    }
    (root / '_info.json').write_text(json.dumps(info))
    return root


@pytest.fixture(scope='module')
def shard_set(tmp_path_factory):
    "A real shard set made by the project's generator: 2 classes, 3 train images each in shards of 2, 1 val each."
    from timmdata.tools.sample_data import make_sample_dataset
    from timmdata.tools.shards import write_shards

    base = tmp_path_factory.mktemp('hostile_info')
    src = make_sample_dataset(base / 'src', n_train=3, n_val=1, classes=['a', 'b'], size=(32, 24), num_workers=0)
    write_shards(src, base / 'shards', shard_size=2, progress=False)
    return base / 'shards'


# ---- attack: num_samples -5 ----
def test_negative_num_samples_is_a_named_error(shard_set, tmp_path):
    from timmdata.sources.wds import WdsSource
    from timmdata.core.untrusted import InfoError
    from timmdata.streams.streaming import IterableImageDataset

    ds = tmp_path / 'ds'
    shutil.copytree(shard_set, ds)
    info = json.loads((ds / '_info.json').read_text())
    info['splits']['train']['num_samples'] = -5
    (ds / '_info.json').write_text(json.dumps(info))
    for make in (
        lambda: WdsSource(ds, 'train'),
        lambda: IterableImageDataset(ds, 'wds/x', split='train', is_training=True, batch_size=2),
        lambda: IterableImageDataset(ds, 'wds/x', split='train', is_training=True, batch_size=2, order='shards'),
    ):
        with pytest.raises(InfoError) as e:
            make()
        assert str(ds / '_info.json') in str(e.value) and "num_samples is -5, not a count" in str(e.value)


# ---- attack: shard_lengths ["4"] ----
def test_string_shard_length_is_a_named_error(shard_set, tmp_path):
    from timmdata.sources.wds import WdsSource
    from timmdata.core.untrusted import InfoError
    from timmdata.index.shard_index import ShardReader

    ds = tmp_path / 'ds'
    shutil.copytree(shard_set, ds)
    info = json.loads((ds / '_info.json').read_text())
    info['splits']['train']['shard_lengths'][0] = str(info['splits']['train']['shard_lengths'][0])
    (ds / '_info.json').write_text(json.dumps(info))
    for make in (lambda: WdsSource(ds, 'train'), lambda: ShardReader(ds, 'train')):
        with pytest.raises(InfoError, match=r"shard_lengths\[0\] is the string '2', not a count"):
            make()
    info['splits']['train']['shard_lengths'][0] = 2.0  # a float is not a count either
    (ds / '_info.json').write_text(json.dumps(info))
    with pytest.raises(InfoError, match=r'shard_lengths\[0\] is 2.0, not a count'):
        WdsSource(ds, 'train')


def test_shard_lengths_against_shard_bytes_and_num_samples(tmp_path):
    from timmdata.sources.wds import WdsSource
    from timmdata.core.untrusted import InfoError

    ds = tiny_shards(tmp_path / 'ds', shard_lengths=[100], num_samples=100, shard_bytes=[10240])
    with pytest.raises(
        InfoError,
        match=r'shard_lengths\[0\] is 100 but shard_bytes\[0\] is 10,240: a shard of that size holds at most 10',
    ):
        WdsSource(ds, 'train')
    ds = tiny_shards(tmp_path / 'ds2', num_samples=7)
    with pytest.raises(InfoError, match='num_samples is 7 but its shard_lengths add up to 2'):
        WdsSource(ds, 'train')


# ---- attack: huge shard_lengths / num_samples, the true num_samples passed ----
def test_huge_shard_lengths_cost_no_memory_in_the_global_order(tmp_path):
    ds = tiny_shards(tmp_path / 'ds', shard_lengths=[10**11], num_samples=10**11)
    r = run_py(f'''
        import tracemalloc
        from timmdata.sources.shard_io import ShardError
        from timmdata.sources.wds import WdsSource
        from timmdata.streams.global_order import read_in_order
        src = WdsSource({str(ds)!r}, 'train', num_samples=2)  # the caller knows the true count
        LIMIT()
        tracemalloc.start()
        try:
            list(read_in_order(src, range(2), 42, 0))
            print('NO ERROR')
        except ShardError as e:
            print('NAMED', e)
        print('PEAK', tracemalloc.get_traced_memory()[1])
    ''')
    assert r.returncode == 0, r.stderr[-3000:]
    assert 'NAMED' in r.stdout and 'train-000000.tar holds 2 samples' in r.stdout and '100000000000' in r.stdout, (
        r.stdout
    )
    assert int(r.stdout.split('PEAK ')[1]) < 256 << 20, r.stdout  # (load_info reads with a 64 MiB buffer)


# ---- attack: a huge label / num_classes on a two-sample dataset ----
def test_huge_label_and_num_classes_on_two_samples(tmp_path):
    big = tiny_shards(tmp_path / 'label', labels=(3, 10**12))
    nc = tiny_shards(tmp_path / 'nc', labels=(0, 1))
    info = json.loads((nc / '_info.json').read_text())
    (nc / '_info.json').write_text(json.dumps({**info, 'num_classes': 10**9}))
    r = run_py(f'''
        import tracemalloc
        from timmdata.index.shard_index import ShardReader
        LIMIT()
        tracemalloc.start()
        r = ShardReader({str(big)!r}, 'train')
        print('CLASSES', sorted(r.class_to_idx.values()))
        print('PEAK', tracemalloc.get_traced_memory()[1])
        try:
            ShardReader({str(nc)!r}, 'train')
            print('NO ERROR')
        except ValueError as e:
            print('NAMED', type(e).__name__, e)
    ''')
    assert r.returncode == 0, r.stderr[-3000:]
    assert f'CLASSES [3, {10**12}]' in r.stdout, r.stdout
    assert int(r.stdout.split('PEAK ')[1].split()[0]) < 256 << 20, r.stdout  # (load_info reads with a 64 MiB buffer)
    assert 'NAMED InfoError' in r.stdout and 'num_classes is 1,000,000,000, not a count' in r.stdout, r.stdout


# ---- attack: escape sequences in names, through the command line ----
def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'timmdata.tools.cli', *args], cwd=ROOT, capture_output=True, timeout=300)


@pytest.mark.slow
def test_cli_error_naming_an_info_entry_is_escaped(tmp_path):
    ds = tiny_shards(tmp_path / 'ds')
    info = json.loads((ds / '_info.json').read_text())
    sp = info['splits']['train']
    sp['filenames'].append('gone\x1b]0;owned\x07\x1b[2J.tar')
    sp['shard_lengths'].append(1)
    sp['num_samples'] = 3
    (ds / '_info.json').write_text(json.dumps(info))
    r = cli('check', str(ds), '--split', 'train', '--workers', '0', '--no-progress')
    assert r.returncode == 2, r.stderr[-3000:]
    assert ESC not in r.stdout + r.stderr and b'\x07' not in r.stderr, r.stderr
    assert b'gone\\x1b]0;owned\\x07\\x1b[2J.tar' in r.stderr, r.stderr
    sp['num_samples'] = '\x1b[2J'  # an InfoError holding the value
    (ds / '_info.json').write_text(json.dumps(info))
    r = cli('check', str(ds), '--split', 'train', '--workers', '0', '--no-progress')
    assert r.returncode == 2 and ESC not in r.stdout + r.stderr and b"the string '\\x1b[2J'" in r.stderr, r.stderr


def test_check_verbose_lists_escaped_names(tmp_path, capsysbinary):
    "The console script's `main` in this process (a fresh Python per run paid seconds of imports; the script's own exit path is tests/test_cli.py's): the bytes it writes."
    from timmdata.tools.cli import main
    from timmdata.tools.sample_data import make_sample_dataset

    root = make_sample_dataset(tmp_path / 'data', n_train=1, n_val=1, classes=['a'], size=(32, 24), num_workers=0)
    (root / 'train' / 'a' / 'x\x1b]0;owned\x07\x1b[2J.txt').write_text('not an image')
    status = main(['check', str(root), '--workers', '0', '--no-progress', '--verbose'])
    out, err = capsysbinary.readouterr()
    assert status in (0, None), err[-3000:]
    assert ESC not in out + err and b'\x07' not in out, out
    assert b'x\\x1b]0;owned\\x07\\x1b[2J.txt: left out' in out, out


# ---- the fuzzer over _info.json ----
HOSTILE = [
    -5,
    -1,
    0,
    1,
    2,
    3,
    7,
    2**31,
    2**63,
    10**12,
    10**30,
    10**300,
    '4',
    '2',
    '\u0663',
    '\u00b2',
    '',
    4.0,
    2.5,
    1e308,
    float('nan'),
    float('inf'),
    float('-inf'),
    True,
    False,
    None,
    [],
    {},
    [2],
    {'a': 1},
    '\x1b[2J\x1b]0;x\x07',
    '../x.tar',
    '/etc/passwd',
    'pipe:touch PWNED',
    'http://127.0.0.1:9/x.tar',
    'a' * 10_000,
    '__DEEP__',
    list(range(1000)),
    [10**12] * 3,
    ['2'] * 3,
    [None] * 3,
    [-1] * 3,
]
SPLIT_KEYS = ['num_samples', 'shard_lengths', 'filenames', 'shard_bytes', 'name', 'shard_sha256']
TOP_KEYS = ['num_classes', 'splits', 'class_to_idx', 'classes', 'name']


def pick(rng: random.Random):
    "A hostile value, a copy of its own (a mutation never edits HOSTILE, nor puts a list inside itself)."
    return copy.deepcopy(rng.choice(HOSTILE))


def mutate(info: dict, rng: random.Random) -> str:
    "The JSON text of `info` after 1-3 hostile mutations (types, counts, lengths, missing keys, nesting, raw text)."
    info = copy.deepcopy(info)
    for _ in range(rng.randint(1, 3)):
        sp = info.get('splits', {}).get('train') if isinstance(info.get('splits'), dict) else None
        kind = rng.random()
        if kind < 0.45 and isinstance(sp, dict):  # a split field, or one entry of a list field
            key = rng.choice(SPLIT_KEYS)
            if isinstance(sp.get(key), list) and sp[key] and rng.random() < 0.6:
                sp[key][rng.randrange(len(sp[key]))] = pick(rng)
            else:
                sp[key] = pick(rng)
        elif kind < 0.6 and isinstance(sp, dict):  # mismatched lengths
            key = rng.choice(['shard_lengths', 'filenames', 'shard_bytes'])
            v = list(sp[key]) if isinstance(sp.get(key), list) else []
            if v and rng.random() < 0.5:
                v.pop(rng.randrange(len(v)))
            else:
                v.append(rng.choice([2, 10**12, 'x.tar', 1 << 20]))
            sp[key] = v
        elif kind < 0.7 and isinstance(sp, dict):  # consistent but huge or plausible-looking lies
            n = len(sp['filenames']) if isinstance(sp.get('filenames'), list) else 2
            lens = [rng.choice([0, 1, 2, 3, 10**6, 10**11, 2**40]) for _ in range(n)]
            sp['shard_lengths'], sp['num_samples'] = lens, sum(lens)
            if rng.random() < 0.5:
                sp['shard_bytes'] = [rng.choice([0, 1024, 4096, 10**9]) for _ in range(n)]
        elif kind < 0.8:  # missing keys
            if isinstance(sp, dict) and sp and rng.random() < 0.7:
                sp.pop(rng.choice(list(sp)))
            elif info:
                info.pop(rng.choice(list(info)))
        elif kind < 0.9:  # a top-level field
            info[rng.choice(TOP_KEYS)] = pick(rng)
        elif isinstance(sp, dict):  # a whole split replaced
            info['splits']['train'] = pick(rng)
    text = json.dumps(info)  # NaN and Infinity as Python writes them (json.loads reads them back)
    text = text.replace('"__DEEP__"', '[' * (d := rng.choice([30, 900, 5000, 200_000])) + ']' * d)
    r = rng.random()
    if r < 0.03:
        text = text[: rng.randrange(len(text) + 1)]  # cut
    elif r < 0.05:
        text = '\ufeff' + text  # a byte-order mark
    return text


def fuzz_cases(root: Path, seed: int, count: int) -> dict:
    "Each case: a mutated `_info.json` over the real shards at `root`, read by every reader of it; the outcomes counted."
    from timmdata.streams.global_order import read_in_order
    from timmdata.index.shard_index import INDEX_FILE, ShardReader
    from timmdata.sources.shard_io import ShardError
    from timmdata.sources.wds import WdsSource
    from timmdata.streams.streaming import IterableImageDataset

    base = json.loads((root / '_info.json').read_text())
    outside = root.parent  # the dataset's folder and this case's home: nothing may appear anywhere else below it
    before = sorted(str(p) for p in outside.rglob('*') if root not in p.parents and p != root)
    rng, out = random.Random(seed), {'ok': 0, 'named': {}, 'bad': [], 'slowest': 0.0}

    def alarm(*_):
        raise TimeoutError('case over its time bound')

    signal.signal(signal.SIGALRM, alarm)
    for case in range(count):
        text = mutate(base, rng)
        (root / '_info.json').write_text(text, encoding='utf-8')
        t0 = time.perf_counter()
        signal.alarm(20)  # a hang ends the case with a TimeoutError: an outcome the test refuses
        try:
            WdsSource(root, 'train-{000000..000001}.tar')  # a pattern: its lengths looked up in _info.json
            src = WdsSource(root, 'train')
            if src.shard_lengths:
                list(read_in_order(src, range(min(4, src.num_samples or 4)), 0, 0, 2))
            r = ShardReader(root, 'train')
            r[0] if len(r) else None, len(r.class_to_idx)  # (an empty split: an empty reader)
            ds = IterableImageDataset(root, 'wds/x', split='train', is_training=True, batch_size=2, num_samples=4)
            next(iter(ds))
            out['ok'] += 1
        except (ValueError, ShardError) as e:
            msg = str(e)
            named = any(w in msg for w in ('_info.json', '.tar', str(root), 'num_samples', 'shard_lengths', 'split'))
            if not named or '\x1b' in msg or '\x07' in msg:
                out['bad'].append((case, text[:300], f'{type(e).__name__}: {msg[:300]}'))
            out['named'][type(e).__name__] = out['named'].get(type(e).__name__, 0) + 1
        except BaseException as e:  # MemoryError, TimeoutError, TypeError, RecursionError...: a finding
            out['bad'].append((case, text[:300], f'{type(e).__name__}: {str(e)[:300]}'))
        finally:
            signal.alarm(0)
        out['slowest'] = max(out['slowest'], time.perf_counter() - t0)
        now = sorted(str(p) for p in outside.rglob('*') if root not in p.parents and p != root)
        made = sorted(set(os.listdir(root)) - set(os.listdir(root.parent / 'pristine')) - {INDEX_FILE})
        if now != before or made or (root / 'PWNED').exists() or Path('PWNED').exists():
            out['bad'].append((case, text[:300], f'wrote {sorted(set(now) ^ set(before))} {made}'))
            break
    return out


def run_fuzzer(shard_set: Path, tmp_path: Path, seed: int, count: int):
    case = tmp_path / 'case'
    shutil.copytree(shard_set, case / 'ds')
    shutil.copytree(shard_set, case / 'pristine')
    (case / 'home').mkdir()
    env = {**os.environ, 'HOME': str(case / 'home'), 'XDG_CACHE_HOME': str(case / 'home' / '.cache')}
    code = f'''
        import json, sys
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        import warnings; warnings.simplefilter('ignore')
        from test_hostile_info import fuzz_cases
        from pathlib import Path
        import timmdata.streams.streaming  # its imports before the limit
        LIMIT()
        print('RESULT', json.dumps(fuzz_cases(Path({str(case / 'ds')!r}), {seed}, {count})))
    '''
    r = subprocess.run(
        [sys.executable, '-c', _prelude(2.0) + textwrap.dedent(code)],
        cwd=case,
        env=env,
        capture_output=True,
        text=True,
        timeout=60 + count * 2,
    )
    assert r.returncode == 0 and 'RESULT ' in r.stdout, (r.stdout[-2000:], r.stderr[-5000:])
    res = json.loads(r.stdout.split('RESULT ', 1)[1])
    assert not res["bad"], res["bad"][:10]
    assert res['ok'] > 0 and sum(res['named'].values()) > count // 3, res  # the mutations reach both outcomes
    assert not any((case / 'home').rglob('*')), list((case / 'home').rglob('*'))  # nothing written to ~/.cache
    return res


def _prelude(limit_gb: float) -> str:
    return textwrap.dedent(f'''
        import resource, sys
        sys.path.insert(0, {str(ROOT)!r})
        def LIMIT():
            size = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize')).split()[1]) * 1024
            cap = size + int({limit_gb} * (1 << 30))
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    ''')


@pytest.mark.slow
def test_fuzz_info_json(shard_set, tmp_path):
    run_fuzzer(shard_set, tmp_path, seed=0, count=300)


@pytest.mark.slow
def test_fuzz_info_json_long(shard_set, tmp_path):
    run_fuzzer(shard_set, tmp_path, seed=1, count=3000)
