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
from timmdata.streams import dataset_index as dx


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
        'from timmdata.streams import dataset_index as dx\n'
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
        'from timmdata.streams import dataset_index as dx\n'
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
