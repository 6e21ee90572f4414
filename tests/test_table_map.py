"""Issue 44: with a node cache, a dataset index's table is parsed by one process of the node and mapped by the others
(`dataset_index.IndexTable`): processes started together, each counting its parses and maps, all see the same table."""
import multiprocessing as mp, sys, warnings
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'bench'))
from bench_startup_requests import CountingServer, write_tiny_shards  # the bench's server and shards: one definition

from timmdata.index.dataset_index import DATASET_INDEX_FILE, _read_table, parse_table, write_dataset_index

PROCESSES = 6


def _a_process(url: str, cache_dir: str, go) -> tuple:
    "A node's process: the index with the node cache; (its parses and maps, names, sizes, counts, a few shards' spans)."
    from timmdata.index import dataset_index
    from timmdata.net.shard_cache import ShardCache

    go.wait()  # all at once: one parses, the others wait on its lock or map what it wrote
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no copy refused
        ix = dataset_index.read_dataset_index(url, cache=ShardCache(cache_dir), key='k')
    t = ix.table
    names = [t.name(i) for i in range(len(t))]
    spans = [ix.spans(i).tolist() for i in (0, len(t) // 2, len(t) - 1)]
    return dict(dataset_index.TABLE_READS), t.mapped, names, t.sizes.tolist(), t.counts.tolist(), spans


def test_one_parse_per_node(tmp_path):
    root = tmp_path / 'd'
    write_tiny_shards(root, 300)
    write_dataset_index(root, progress=False)
    with open(root / DATASET_INDEX_FILE, 'rb') as f:
        names, sizes, counts, *_ = parse_table(_read_table(f, "x"))  # what a process without a cache parses
    srv = CountingServer(root)
    ctx = mp.get_context('spawn')
    try:
        with ctx.Manager() as m:
            go = m.Barrier(PROCESSES)
            with ctx.Pool(PROCESSES) as pool:
                got = pool.starmap(_a_process, [(srv.url, str(tmp_path / 'cache'), go)] * PROCESSES)
        table_gets = srv.snapshot().get('GET', 0)
    finally:
        srv.close()
    reads = [g[0] for g in got]
    assert len(got) == PROCESSES
    assert sum(r['parsed'] for r in reads) == 1, reads  # one parse on the node
    assert sorted(r['mapped'] for r in reads) == [1] * PROCESSES, reads  # every process maps the copy (the parser too)
    assert all(g[1] for g in got)
    assert table_gets == 1  # the table fetched once
    for _, _, n, s, c, sp in got:
        assert len(n) == len(names) == 300 and n == names
        assert s == sizes.tolist() and c == counts.tolist()
        assert sp == got[0][5] and len(sp) == 3 and all(len(x) == 2 for x in sp)
    assert (tmp_path / 'cache').is_dir() and len(list((tmp_path / 'cache').glob('*.table.arrays'))) == 1
