"""Issue 44: timmdata's node-aware global order beside Mosaic streaming's canonical nodes, at the same configuration.

    python bench/bench_mosaic_compare.py --mosaic-site /tmp/mosaic-venv/lib/python3.11/site-packages [--out FILE]

Mosaic streaming (`pip install mosaicml-streaming` into a venv of its own, e.g. `python -m venv /tmp/mosaic-venv &&
/tmp/mosaic-venv/bin/pip install --no-deps mosaicml-streaming`; never the project's venv) is imported from that venv's
site-packages, only its sample-order code (`streaming.base.partition.get_partitions` and `streaming.base.shuffle.
get_shuffle`, numpy only: the package's `__init__`, which needs torch and transformers, is not run). For each
configuration both libraries' orders of one epoch are computed, no bytes: Mosaic's as its `generate_work` makes it
(`relaxed` partitions, `py1e` shuffle, its default block of max(4M / canonical nodes, 2^18) samples), timmdata's by
`timmdata.tools.simulate` (its own `GlobalOrder` and worker split). Figures: the shards each node reads in the epoch
(with a node cache that holds a shard while its node needs it: its downloads) and the dataset's egress multiple; the
shuffle measure of `25_streaming` (mean distance between consecutive samples, in the listed order, of the global
sequence and of rank 0's own sequence, as a fraction of a full permutation's n/3) and the distinct shards in a rank's
batch; and whether a rescale to other nodes is accepted.
"""
from __future__ import annotations
import argparse, sys, time, types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def load_mosaic(site: str):
    "Mosaic's partition and shuffle functions from `site`, without running the package's `__init__`."
    root = Path(site) / 'streaming'
    for name, path in (('streaming', root), ('streaming.base', root / 'base')):
        m = types.ModuleType(name)
        m.__path__ = [str(path)]
        sys.modules[name] = m
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle
    return get_partitions, get_shuffle


def _quality(ids: np.ndarray, n: int) -> float:
    "Mean |difference| of consecutive sample ids (listed order), as a fraction of a full permutation's n/3."
    return float(np.abs(np.diff(ids)).mean() / (n / 3)) if len(ids) > 1 else 0.0


def mosaic_order(get_partitions, get_shuffle, lengths, nodes, rpn, workers, batch, ncn, seed=42, epoch=0):
    "Mosaic's epoch: sample ids of shape (nodes, ranks per node, workers, batches per worker, batch) (-1: padding)."
    n = int(lengths.sum())
    big = get_partitions('relaxed', n, ncn, nodes, rpn, workers, batch, 0, None)
    block = max(4_000_000 // ncn, 1 << 18)
    shuffle = get_shuffle('py1e', lengths.astype(np.int64), ncn, seed, epoch, block)
    return np.where(big != -1, shuffle[np.maximum(big, 0)], -1), block


def mosaic_figures(ids: np.ndarray, lengths: np.ndarray) -> dict:
    n, starts = int(lengths.sum()), np.concatenate([[0], np.cumsum(lengths)])
    nodes, rpn, W, B, bs = ids.shape
    shard = lambda x: np.searchsorted(starts, x, side='right') - 1
    per_node = [len(np.unique(shard(ids[k][ids[k] >= 0]))) for k in range(nodes)]
    # the training step t takes batch t // W of worker t % W of every rank: the global sequence, step by step
    steps = [ids[:, :, t % W, t // W, :].reshape(-1) for t in range(W * B)]
    glob = np.concatenate(steps)
    glob = glob[glob >= 0]
    r0 = np.concatenate([ids[0, 0, t % W, t // W, :] for t in range(W * B)])
    r0 = r0[r0 >= 0]
    k = len(r0) // bs * bs
    spb = float(np.mean([len(np.unique(shard(b))) for b in r0[:k].reshape(-1, bs)]))
    return dict(
        shards_per_node_mean=float(np.mean(per_node)),
        egress=float(np.sum(per_node) / len(lengths)),
        quality_global=_quality(glob[: 1 << 20], n),
        quality_rank0=_quality(r0, n),
        shards_per_rank_batch=spb,
    )


def timmdata_figures(lengths, nodes, rpn, workers, batch, partitions) -> dict:
    from timmdata.streams.global_order import GlobalOrder, epoch_length, worker_positions
    from timmdata.tools.simulate import _reads_per_shard, shuffle_quality
    order = GlobalOrder(lengths, 42, 0, 0, 8, partitions)
    ranks = nodes * rpn
    rp = _reads_per_shard(order, batch, ranks, rpn)
    end = epoch_length(order.total, batch * ranks)
    r0 = np.fromiter(worker_positions(0, end, batch, 0, ranks, 0, 1, order.total, partitions), np.int64)
    r0 = r0[r0 < order.total]
    q0 = shuffle_quality(order, batch, positions=r0)
    return dict(
        shards_per_node_mean=rp['egress_x_dataset'] * len(lengths) / nodes,
        egress=rp['egress_x_dataset'],
        quality_global=shuffle_quality(order, batch)['of_full'],
        quality_rank0=q0['of_full'],
        shards_per_rank_batch=q0['shards_per_batch'],
    )


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--mosaic-site', required=True, help="site-packages of a venv with mosaicml-streaming")
    ap.add_argument('--shards', type=int, default=10_000)
    ap.add_argument('--per-shard', type=int, default=1_000)
    ap.add_argument('--nodes', type=int, default=16)
    ap.add_argument('--ranks-per-node', type=int, default=8)
    ap.add_argument('--workers', type=int, default=8)
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--rescale-nodes', type=int, nargs='+', default=[12, 8])
    ap.add_argument('--out', default=None)
    a = ap.parse_args(argv)
    from timmdata.tools.simulate import synthetic_lengths
    get_partitions, get_shuffle = load_mosaic(a.mosaic_site)
    lengths = synthetic_lengths(a.shards, a.shards * a.per_shard)
    n, lines = int(lengths.sum()), []
    say = lambda s='': (print(s, flush=True), lines.append(s))
    say(f'{a.nodes} nodes x {a.ranks_per_node} ranks x {a.workers} workers, batch {a.batch_size} per rank, {a.shards:,} shards, '
        f'{n:,} samples (about {a.per_shard:,} a shard); canonical partitions = nodes; epoch 0, seed 42')
    t0 = time.perf_counter()
    ids, block = mosaic_order(get_partitions, get_shuffle, lengths, a.nodes, a.ranks_per_node, a.workers,
                              a.batch_size, a.nodes)
    mo = mosaic_figures(ids, lengths)
    t1 = time.perf_counter()
    td = timmdata_figures(lengths, a.nodes, a.ranks_per_node, a.workers, a.batch_size, a.nodes)
    t2 = time.perf_counter()
    say(f'Mosaic streaming: relaxed partitions, py1e shuffle, block {block:,} samples ({t1 - t0:.1f} s); '
        f'timmdata: blocks of 8 shards, node-aware global order ({t2 - t1:.1f} s)')
    say()
    say(f"{'figure':58s} {'Mosaic':>10s} {'timmdata':>10s}")
    for k, what in (('shards_per_node_mean', 'shards a node reads an epoch (its downloads), mean'),
                    ('egress', "the dataset's egress multiple (node downloads / shards)"),
                    ('quality_global', 'shuffle: global sequence, of a full permutation'),
                    ('quality_rank0', "shuffle: rank 0's own sequence, of a full permutation"),
                    ('shards_per_rank_batch', "distinct shards in a rank's batch")):
        say(f'{what:58s} {mo[k]:>10,.2f} {td[k]:>10,.2f}')
    say()
    shuffle = get_shuffle('py1e', lengths.astype(np.int64), a.nodes, 42, 0, block)
    for k in a.rescale_nodes:  # a whole epoch on k nodes, the canonical partitions of the start kept
        try:
            big = get_partitions('relaxed', n, a.nodes, k, a.ranks_per_node, a.workers, a.batch_size, 0, a.nodes)
            m = f"accepted, egress {mosaic_figures(np.where(big != -1, shuffle[np.maximum(big, 0)], -1), lengths)['egress']:.2f}x"
        except ValueError as e:
            m = f'refused ({str(e)[:90]}...)'
        from timmdata.streams.global_order import GlobalOrder
        from timmdata.tools.simulate import _reads_per_shard
        eg = _reads_per_shard(GlobalOrder(lengths, 42, 0, 0, 8, a.nodes), a.batch_size, k * a.ranks_per_node,
                              a.ranks_per_node)['egress_x_dataset']
        say(f'an epoch on {k} nodes, {a.nodes} canonical partitions kept (a rescale): Mosaic {m}; timmdata accepted, '
            f'egress {eg:.2f}x')
    if a.out:
        Path(a.out).write_text('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
