"""Benchmark for issue 44: a dataset index's table parsed in every process (before) against parsed once per node and
mapped by the node's other processes (`index.index_table`).

    python bench/bench_table_map.py [--shards 100000] [--repeat 3] [--out bench/results/x.txt]

Writes a synthetic table of `--shards` shards (names, sizes and counts as `timmdata simulate` makes them: 10,000
samples a shard) to a temporary folder, then measures each case in a fresh process (`--repeat` times, the median
kept), with `time.process_time` (CPU), `tracemalloc` (Python and numpy memory held after, and its peak), and
`/proc/self/status` (RssAnon: the process's own pages, what grows per process; RssFile: pages of files, libraries
loaded on the way included) and `/proc/self/smaps` (mapped: the resident pages of the parsed copy's map, the node's page
cache, shared by every process that maps the same file):

- `before`: what every process did before this change (`parse_table`, then `DatasetIndex`'s name-to-row dict);
- `parse`: a process without a node cache now (`parse_table`, then the table's fixed layout in memory);
- `first`: the node's first process with a node cache (fetch, parse, write the parsed copy, map it);
- `map`: every other process of the node (map the copy and check it: its size, checksum, columns);
- `rows`: after `map`, finding the row of every shard by name, in the table's order (what `dataset_spans` does for a
  source's shards; its RssAnon includes the list of names the bench makes).
"""
from __future__ import annotations
import argparse, hashlib, json, os, statistics, subprocess, sys, tempfile, time, tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CASES = ('before', 'parse', 'first', 'map', 'rows')


def write_table(folder: Path, shards: int, per: int = 10_000, sample_bytes: int = 110_000) -> Path:
    "A synthetic dataset index's table (through its checksum line), as `simulate.table_memory` makes it."
    from timmdata.index.dataset_index import DATASET_INDEX_VERSION

    head = '{"format":"timmdata dataset index","version":%d}' % DATASET_INDEX_VERSION
    lines = [head] + [f'["shard-{i:07d}.tar",{per * sample_bytes + 1024},{per},"0123456789abcdef"]' for i in range(shards)]
    text = '\n'.join(lines) + '\n'
    path = folder / 'table.json'
    path.write_bytes((text + '{"sha256":"%s"}\n' % hashlib.sha256(text.encode()).hexdigest()).encode())
    return path


def _status() -> dict:
    with open('/proc/self/status') as f:
        return {k: int(v.split()[0]) * 1024 for k, v in (l.split(':', 1) for l in f) if k in ('RssAnon', 'RssFile')}


def _mapped_rss() -> int:
    "Resident bytes of this process's maps of a parsed table copy (`/proc/self/smaps`): page cache, shared by the node."
    total, ours = 0, False
    with open('/proc/self/smaps') as f:
        for line in f:
            head = line.split()
            if head and '-' in head[0] and not head[0].endswith(':'):
                ours = line.rstrip().endswith('.table.arrays')
            elif ours and head and head[0] == 'Rss:':
                total += int(head[1]) * 1024
    return total


def child(case: str, table: str, node: str) -> dict:
    "One case in this (fresh) process: its figures."
    from types import SimpleNamespace
    from timmdata.index import dataset_index as di
    from timmdata.index.index_table import IndexTable

    cache = SimpleNamespace(dir=node, lock_wait=60.0)
    fetch = lambda: Path(table).read_bytes()  # noqa: E731 (the table's bytes, as a fetch returns them)
    data = fetch() if case in ('before', 'parse') else None
    rows_s = None
    s0 = _status()
    tracemalloc.start()
    t0, w0 = time.process_time(), time.perf_counter()
    if case == 'before':
        t = di.parse_table(data)
        kept = (t, {n: i for i, n in enumerate(t[0])})  # main's DatasetIndex: the parsed lists and a name-to-row dict
    elif case == 'parse':
        kept = IndexTable(IndexTable.layout(di.parse_table(data), hashlib.sha256(data).hexdigest()), 'x')
    else:
        kept = di.node_table('http://h/' + di.DATASET_INDEX_FILE, cache, 'k', fetch)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()  # rows_of timed without it (it slows every allocation)
    if case == 'rows':
        names = [f'shard-{i:07d}.tar' for i in range(len(kept))]
        r0 = time.process_time()
        rows = kept.rows_of(names)
        rows_s = time.process_time() - r0
        assert rows.tolist() == list(range(len(names)))
    s1 = _status()
    return dict(
        case=case,
        cpu_s=cpu,
        wall_s=wall,
        held=held,
        peak=peak,
        rss_anon=s1['RssAnon'] - s0['RssAnon'],
        rss_file=s1['RssFile'] - s0['RssFile'],
        mapped=_mapped_rss(),
        rows_cpu_s=rows_s,
        reads=dict(di.TABLE_READS),
    )


def run(shards: int, repeat: int) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as d:
        table = write_table(Path(d), shards)
        node = Path(d) / 'node'
        node.mkdir()
        for case in CASES:
            got = []
            for _ in range(repeat):
                if case == 'first':
                    for p in node.iterdir():
                        p.unlink()
                cmd = [sys.executable, __file__, '--child', case, '--table', str(table), '--node', str(node)]
                got.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
            med = {k: statistics.median(g[k] for g in got) for k in got[0] if isinstance(got[0][k], (int, float))}
            out[case] = dict(med, reads=got[-1]['reads'])
        out['table_bytes'] = table.stat().st_size
        out['copy_bytes'] = sum(p.stat().st_size for p in node.glob('*.table.arrays'))
    return out


def report(shards: int, r: dict) -> str:
    mb = lambda b: f'{b / 1e6:.1f} MB'  # noqa: E731
    L = [
        f'{shards:,} shards: table {mb(r["table_bytes"])}, parsed copy in the node cache {mb(r["copy_bytes"])}',
        f'{"case":8s} {"CPU":>8s} {"wall":>8s} {"held":>10s} {"peak":>10s} {"RssAnon":>10s} {"RssFile":>10s} {"mapped":>10s}  reads',
    ]
    for case in CASES:
        c = r[case]
        L.append(
            f'{case:8s} {c["cpu_s"]:7.3f}s {c["wall_s"]:7.3f}s {mb(c["held"]):>10s} {mb(c["peak"]):>10s} '
            f'{mb(c["rss_anon"]):>10s} {mb(c["rss_file"]):>10s} {mb(c["mapped"]):>10s}  {c["reads"]}'
        )
    L.append(f'rows of all {shards:,} shards by name (rows_of, after map): {r["rows"]["rows_cpu_s"]:.3f} s CPU')
    return '\n'.join(L)


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--shards', type=int, nargs='+', default=[100_000])
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--out')
    ap.add_argument('--child', choices=CASES)
    ap.add_argument('--table')
    ap.add_argument('--node')
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.table, a.node)))
        sys.exit(0)
    text = '\n'.join(report(n, run(n, a.repeat)) for n in a.shards)
    print(text)
    if a.out:
        Path(a.out).write_text(text + '\n')
