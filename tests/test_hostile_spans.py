"""Hostile datasets, part three (issue 62): the by-position reader, the dataset index and its node-cache files. A FIFO
named like a shard, an index or a cached spans file is refused at once (it hung the reader for ever); a span longer
than `MAX_MEMBER_BYTES` is refused by the index; a full cache disk falls back to reading directly; a mapped table copy
others can write is read, not mapped. Each test plays one attack; the ones that could hang run in a child with a time
bound."""
import json, os, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
from timmdata.tools.sample_data import make_sample_dataset
from timmdata.tools.shards import write_shards
from timmdata.index import dataset_index as dx


@pytest.fixture(scope='module')
def made(tmp_path_factory):
    "4 shards of 5 samples (as the review's), with their dataset index."
    tmp = tmp_path_factory.mktemp('hostile_spans')
    src = make_sample_dataset(tmp / 'src', n_train=5, n_val=1, classes=['a', 'b', 'c', 'd'], size=(24, 20))
    write_shards(src, tmp / 'shards', shard_size=5, progress=False)
    return tmp / 'shards'


@pytest.fixture
def ds(made, tmp_path):
    "A fresh copy of the shards and their index."
    d = tmp_path / 'ds'
    d.mkdir()
    for f in made.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    return d


def _in_child(code: str, timeout: float = 20) -> str:
    "`code` run by a child Python on this tree: a hang is a failed test after `timeout` seconds, not a hung suite."
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(Path(dx.__file__).parents[2]), os.environ.get('PYTHONPATH', '')])}
    try:
        out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f'no answer within {timeout} s: a FIFO was waited on')
    return out.stdout + out.stderr


def _train_shards(d: Path) -> list:
    return json.loads((d / '_info.json').read_text())['splits']['train']['filenames']


_GLOBAL_EPOCH = """
from timmdata.streams.streaming import IterableImageDataset
ds = IterableImageDataset({root!r}, reader='wds/h', split='train', is_training=True, batch_size=2, order='global')
try:
    n = sum(1 for _ in ds)
    print('read', n)
except OSError as e:
    print(type(e).__name__, e)
"""


@pytest.mark.slow
def test_a_fifo_shard_does_not_hang_the_global_order(ds):
    "A FIFO named like a shard: one epoch in the global order (the by-position reader) raises at once, naming it."
    name = _train_shards(ds)[1]
    (ds / name).unlink()
    os.mkfifo(ds / name)
    out = _in_child(_GLOBAL_EPOCH.format(root=str(ds)))
    assert 'not a regular file' in out and name in out, out


def test_a_fifo_dataset_index_does_not_hang_the_spans_read(ds):
    "The dataset index replaced by a FIFO after its table was read: the spans read raises, never waits."
    out = _in_child(
        'import os\n'
        'from timmdata.index import dataset_index as dx\n'
        f'idx = dx.read_dataset_index({str(ds)!r})\n'
        f'p = {str(ds / dx.DATASET_INDEX_FILE)!r}\n'
        'os.unlink(p); os.mkfifo(p)\n'
        'try:\n'
        '    idx.layout(0); print("no error")\n'
        'except OSError as e:\n'
        '    print(type(e).__name__, e)\n'
    )
    assert 'not a regular file' in out and dx.DATASET_INDEX_FILE in out, out


def test_a_fifo_spans_copy_in_the_cache_is_fetched_around(ds, tmp_path):
    "A FIFO planted at a node cache's spans file: ignored (the spans read from the index), never waited on."
    stem = tmp_path / 'cache' / 'idx'
    stem.parent.mkdir()
    os.mkfifo(f'{stem}.0.spans')
    out = _in_child(
        'from timmdata.index import dataset_index as dx\n'
        f'idx = dx.read_dataset_index({str(ds)!r})\n'
        f'idx = dx.DatasetIndex(idx.url, idx.table, node_stem={str(stem)!r})\n'
        'print("spans", len(idx.layout(0)))\n'
    )
    assert 'spans 5' in out, out


def _write_index(root: Path, shards: list):
    "A dataset index written by hand: `shards` is [(name, size, ends, blocks)], each line's digest right."
    import base64, hashlib

    table, blobs = ['{"format":"timmdata dataset index","version":2}'], []
    for name, size, ends, blocks in shards:
        raw = np.asarray(ends, '<i8').tobytes() + np.asarray(blocks, '<i4').reshape(-1, 2).tobytes()
        blob = base64.b64encode(raw).decode('ascii')
        table.append(json.dumps([name, size, len(ends), hashlib.sha256(blob.encode()).hexdigest()[:16]], separators=(',', ':')))
        blobs.append(blob)
    text = '\n'.join(table) + '\n'
    (root / dx.DATASET_INDEX_FILE).write_text(
        text + '{"sha256":"%s"}\n' % hashlib.sha256(text.encode()).hexdigest() + '\n'.join(blobs) + '\n'
    )


def test_a_span_longer_than_the_bound_is_refused(tmp_path):
    "An index whose one span covers a whole (sparse) shard past `MAX_SPAN_BYTES`: refused by `layout`, never read whole (a 64 MiB shard was read for a 636-byte image)."
    size = dx.MAX_SPAN_BYTES + (1 << 20)
    with open(tmp_path / 'big-000000.tar', 'wb') as f:
        f.truncate(size)  # sparse: no disk used
    _write_index(tmp_path, [('big-000000.tar', size, [size - size % 512], [[0, 1]])])
    dx._READ.clear()
    idx = dx.read_dataset_index(str(tmp_path))
    with pytest.raises(dx.DatasetIndexError, match='at most'):
        idx.layout(0)
    dx._READ.clear()


def test_a_non_ascii_shard_name_round_trips(tmp_path):
    "`timmdata index` wrote `é` as a JSON escape its own parser refused (and the error said to run it again)."
    src = make_sample_dataset(tmp_path / 'src', n_train=2, n_val=1, classes=['a'], size=(16, 16))
    write_shards(src, tmp_path / 'ds', shard_size=4, progress=False)
    d = tmp_path / 'ds'
    info = json.loads((d / '_info.json').read_text())
    old = info['splits']['train']['filenames'][0]
    new = 'été-' + old
    (d / old).rename(d / new)
    info['splits']['train']['filenames'][0] = new
    (d / '_info.json').write_text(json.dumps(info))
    dx.write_dataset_index(str(d), progress=False)
    assert '\\u00e9' in (d / dx.DATASET_INDEX_FILE).read_text()[:2000]
    dx._READ.clear()
    idx = dx.read_dataset_index(str(d))
    row = int(idx.table.rows_of([new])[0])
    assert row >= 0 and len(idx.layout(row)) == 2
    dx._READ.clear()


def _table_copy(ds: Path, cache: Path):
    "The node cache's parsed copy of `ds`'s dataset index table, made as a node's first process makes it."
    from types import SimpleNamespace

    url = str(ds / dx.DATASET_INDEX_FILE)
    with open(url, 'rb') as f:
        data = dx._read_table(f, url)
    cache.mkdir()
    dx.node_table(url, SimpleNamespace(dir=str(cache), lock_wait=10), 'k', lambda: data)
    return next(p for p in cache.iterdir() if p.name.endswith('.table.arrays'))


def test_a_table_copy_others_can_write_is_read_not_mapped(ds, tmp_path):
    "A mapped copy truncated under a reader killed it with SIGBUS: a copy others can write is read into memory instead."
    copy = _table_copy(ds, tmp_path / 'cache')
    os.chmod(copy, 0o666)
    out = _in_child(
        'import os\n'
        'from timmdata.index.index_table import map_table_copy\n'
        f't = map_table_copy({str(copy)!r})\n'
        f'os.truncate({str(copy)!r}, 64)\n'
        'print("mapped", t.mapped, "rows", len(t.sizes), int(t.sizes.sum()) > 0)\n'
    )
    assert 'mapped False rows 5 True' in out, out
    os.chmod(copy, 0o644)


def test_a_full_cache_disk_falls_back_to_reading_the_index(ds, tmp_path, monkeypatch):
    "A full cache folder made every spans read fail (the write of the spans copy was unguarded)."
    idx = dx.read_dataset_index(str(ds))
    idx = dx.DatasetIndex(idx.url, idx.table, node_stem=str(tmp_path / 'idx'))

    def full(*a, **k):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(dx, 'atomic_write', full)
    dx._UNKEPT.clear()
    with pytest.warns(UserWarning, match='could not keep spans'):
        assert [len(idx.layout(i)) for i in range(4)] == [5, 5, 5, 5]
    dx._READ.clear()


_CAPPED = """
import resource, sys
from timmdata.readers.core import load_class_map
# 1 GiB more than the imports took (a free-threaded build's torch and mimalloc reserve well over 1 GiB of address space):
# /dev/zero read whole ends in MemoryError, not a named error
vm = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize:')).split()[1]) * 1024 + (1 << 30)
resource.setrlimit(resource.RLIMIT_AS, (vm, vm))
try:
    load_class_map('classes.txt', root=sys.argv[1]); print('no error')
except BaseException as e:
    print(type(e).__name__, e)
"""


def test_a_class_map_linked_to_dev_zero_is_refused(tmp_path):
    "`classes.txt` -> /dev/zero in a dataset: refused at once (it was read until MemoryError, 2.9 GB in)."
    os.symlink('/dev/zero', tmp_path / 'classes.txt')
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(Path(dx.__file__).parents[2]), os.environ.get('PYTHONPATH', '')])}
    try:
        out = subprocess.run([sys.executable, '-c', _CAPPED, str(tmp_path)], capture_output=True, text=True, timeout=60,
                             env=env, cwd=str(tmp_path.parent))
    except subprocess.TimeoutExpired:
        pytest.fail('load_class_map read /dev/zero for 60 s')
    assert out.stdout.startswith('UnsafeFileError') and 'classes.txt' in out.stdout, out.stdout + out.stderr


def test_a_class_map_fifo_is_refused(tmp_path):
    os.mkfifo(tmp_path / 'classes.txt')
    out = _in_child(f'from timmdata.readers.core import load_class_map\nload_class_map("classes.txt", root={str(tmp_path)!r})')
    assert 'UnsafeFileError' in out and 'not a regular file' in out, out


def test_an_index_size_above_int64_is_named(tmp_path):
    _write_index(tmp_path, [('a-000000.tar', 10**19 - 1, [512 * 3], [[0, 1]])])
    dx._READ.clear()
    with pytest.raises(dx.DatasetIndexError, match='claims 9,999,999,999,999,999,999 bytes'):
        dx.read_dataset_index(str(tmp_path))
    dx._READ.clear()


@pytest.mark.parametrize('label', ['Infinity', 'NaN', '[1]', '"one"', '1e400'])
def test_a_sidecar_label_that_is_no_integer_is_named(label):
    from timmdata.sources.wds import sample_target
    from timmdata.readers.targets import record_target

    with pytest.raises(ValueError, match='not an integer class index'):
        sample_target({'json': b'{"cls": %s}' % label.encode()}, ('cls',), 'sample x of shard s', True)
    if label != '[1]':  # (a record's list is a multi-label target)
        with pytest.raises(ValueError, match='not a class index'):
            record_target(json.loads('{"label": %s}' % label), 'label', 'sample x')


@pytest.mark.parametrize('argv, flag', [
    (['--rescale', '0x0'], '--rescale'),
    (['--rescale=-2x1'], '--rescale'),
    (['--partitions', '0'], '--partitions'),
    (['--partitions', '10000000'], '--partitions'),
    (['--samples', '5'], '--samples'),
    (['--latency-ms', 'nan'], '--latency-ms'),
    (['--latency-ms', '-1'], '--latency-ms'),
    (['--bandwidth', '0'], '--bandwidth'),
    (['--cache-limit', 'lots'], '--cache-limit'),
    (['--node-steps', '0'], '--node-steps'),
])
def test_simulate_numbers_are_checked(argv, flag, capsys):
    "Each was a traceback (or, nan, accepted): now a usage error naming the option, before anything runs."
    from timmdata.tools.simulate import simulate_main

    with pytest.raises(SystemExit) as e:
        simulate_main(['--ranks', '8', '--workers', '2', '--shards', '20', '--samples', '2000', '--batch-size', '4', *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and flag in err and 'Traceback' not in err, err


def test_simulate_fewer_ranks_than_a_node(capsys):
    "A rescale to fewer ranks than a node holds (8 ranks, 8 a node -> 6) was an IndexError."
    from timmdata.tools.simulate import simulate_main

    assert simulate_main(['--ranks', '8', '--workers', '2', '--shards', '20', '--samples', '2000', '--batch-size', '4',
                          '--node-steps', '5']) == 0
    assert 'rescale 8x2 -> 6x1' in capsys.readouterr().out


@pytest.mark.parametrize('argv, flag', [(['--model-step-ms', 'nan'], '--model-step-ms'), (['--seconds', 'inf'], '--seconds'),
                                        (['--model-step-ms', '-3'], '--model-step-ms')])
def test_tune_numbers_are_checked(argv, flag, capsys, tmp_path):
    from timmdata.tools.cli import tune_main

    with pytest.raises(SystemExit) as e:
        tune_main([str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and flag in err and 'finite' in err, err


def test_profile_model_step_nan_is_refused(capsys, tmp_path):
    "`timmdata profile --model-step-ms nan` was accepted (a sleep of nan ms: a ValueError deep in the run)."
    from timmdata.tools.cli import profile_main

    with pytest.raises(SystemExit) as e:
        profile_main([str(tmp_path), '--model-step-ms', 'nan'])
    err = capsys.readouterr().err
    assert e.value.code == 2 and '--model-step-ms' in err and 'finite' in err, err


def _index_lines(root: Path) -> list:
    "(name, size, ends, blocks) of each shard of `root`'s dataset index, decoded."
    import base64

    text = (root / dx.DATASET_INDEX_FILE).read_text().split('\n')
    k = next(i for i, l in enumerate(text) if l.startswith('{"sha256":'))
    out = []
    for row, blob in zip(text[1:k], text[k + 1:]):
        name, size, n, _ = json.loads(row)
        raw = base64.b64decode(blob)
        out.append((name, size, np.frombuffer(raw, '<i8', n).copy(), np.frombuffer(raw, '<i4', 2 * n, 8 * n).reshape(n, 2).copy()))
    return out


def _mutate_spans(lines: list, rng) -> list:
    "The index's lines with one to three changes each digest still matches: an end moved, spans swapped, a header block moved, a size or a count changed."
    lines = [(n, s, e.copy(), b.copy()) for n, s, e, b in lines]
    odd = [-1, 0, 1, 511, 512, 513, 1 << 31, 1 << 40, dx.MAX_SPAN_BYTES + 512, 2**62, 2**63 - 1, -(2**63)]
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        name, size, ends, blocks = lines[i]
        r = rng.random()
        if r < 0.3 and len(ends):
            ends[rng.randrange(len(ends))] = rng.choice(odd + [int(ends[-1]) + 512 * rng.randint(-3, 3)])
        elif r < 0.45 and len(ends) > 1:
            a, b = rng.sample(range(len(ends)), 2)
            ends[a], ends[b] = ends[b], ends[a]
        elif r < 0.65 and len(ends):
            blocks[rng.randrange(len(ends)), rng.randrange(2)] = rng.choice([-2, -1, 0, 1, 2, 5, 1 << 20, 2**31 - 1])
        elif r < 0.8:
            size = rng.choice([0, 1, 512, size - 512, size + 512, dx.MAX_SHARD_BYTES, 10**19 - 1])
        elif r < 0.9 and len(ends):
            ends, blocks = ends[:-1], blocks[:-1]  # a count one short of _info.json's
        else:
            ends = np.full(len(ends), 512 * rng.randint(1, 8), np.int64)  # all equal
        lines[i] = (name, size, ends, blocks)
    return lines


def _fuzz_spans(ds: Path, cases: int, seed: int):
    "Each mutated index is refused by name (`DatasetIndexError`) or gives spans inside their shards, in order, none longer than `MAX_SPAN_BYTES`: nothing else."
    import random

    rng, good, refused = random.Random(seed), _index_lines(ds), 0
    for case in range(cases):
        lines = _mutate_spans(good, rng)
        _write_index(ds, lines)
        dx._READ.clear()
        try:
            idx = dx.read_dataset_index(str(ds))
            for i in range(len(lines)):
                lay = idx.layout(i)
                size = int(idx.sizes[i])
                if len(lay):
                    assert (lay[:, 0] < lay[:, 1]).all() and lay[-1, 1] <= size, (case, lines[i])
                    assert (lay[:, 1] - lay[:, 0]).max() <= dx.MAX_SPAN_BYTES, (case, lines[i])
                    assert ((lay[:, 2:] == -1) | ((lay[:, 2:] >= 0) & (lay[:, 2:] + 512 <= (lay[:, 1] - lay[:, 0])[:, None]))).all()
        except dx.DatasetIndexError:
            refused += 1
    dx._READ.clear()
    assert refused, 'no mutated index was refused'


def test_fuzz_dataset_index_spans(ds):
    _fuzz_spans(ds, 150, 0)


@pytest.mark.slow
def test_fuzz_dataset_index_spans_slow(ds):
    "More cases: `TIMMDATA_SLOW=1 pytest tests/test_hostile_spans.py`."
    _fuzz_spans(ds, 5000, 1)
