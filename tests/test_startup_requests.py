"""Issue 44: the requests a training stream makes before its first batch do not grow with the shards when the dataset
has a dataset index (`timmdata index`): counted with a local HTTP server answering ranged reads, at 250 and 2,000
shards (counts, never times). Without the index, a HEAD per shard (today's behaviour) and a one-line hint."""
import sys, warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'bench'))
from bench_startup_requests import CountingServer, write_tiny_shards  # the bench's server and shards: one definition

from timmdata.dataset_factory import create_dataset
from timmdata.streams.dataset_index import DATASET_INDEX_FILE, write_dataset_index
from timmdata.loader import create_loader

BATCH = 4


def _start_up(srv, index_dir) -> tuple:
    "(requests to build the dataset, requests from then to the first batch of a 2-worker loader), as method counts."
    srv.reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        ds = create_dataset('wds/tiny', root=srv.url, split='train', is_training=True, batch_size=BATCH, index_dir=index_dir)
    built = srv.snapshot()
    srv.reset()
    it = iter(create_loader(ds, (3, 24, 24), BATCH, is_training=True, num_workers=2, device='cpu', persistent_workers=False))
    x, y = next(it)
    first = srv.snapshot()
    del it
    assert ds.order == 'global' and len(y) == BATCH
    return built, first, [str(m.message) for m in w]


@pytest.fixture(scope='module')
def served(tmp_path_factory):
    out = {}
    for n in (250, 2000):
        root = tmp_path_factory.mktemp(f's{n}')
        write_tiny_shards(root, n)
        out[n] = root
    return out


def test_start_up_requests_do_not_grow_with_shards(served, tmp_path):
    counts = {}
    for n, root in served.items():
        write_dataset_index(root, progress=False)
        srv = CountingServer(root)
        try:
            counts[n] = _start_up(srv, str(tmp_path / f'i{n}'))
        finally:
            srv.close()
            (root / DATASET_INDEX_FILE).unlink()
    (b250, f250, _), (b2000, f2000, _) = counts[250], counts[2000]
    assert b250 == b2000 == {'GET': 2}, (b250, b2000)  # _info.json and the dataset index: nothing per shard
    for first in (f250, f2000):  # the workers ask for samples only: a ranged read each, and one for each shard's spans
        # (dataset_index.ShardSpans), of at most what they prefetch: 2 workers x 2 batches ahead + the first, x BATCH
        assert set(first) == {'GET range'} and BATCH <= first['GET range'] <= 2 * (2 * 2 + 1) * BATCH, first


def test_without_index_a_head_per_shard_and_a_hint(served, tmp_path):
    root = served[250]
    srv = CountingServer(root)
    try:
        built, _, msgs = _start_up(srv, str(tmp_path / 'i'))
    finally:
        srv.close()
    assert built.get('HEAD', 0) >= 250  # today's behaviour stays when there is no index
    assert sum('timmdata index' in m and DATASET_INDEX_FILE in m for m in msgs) == 1, msgs
