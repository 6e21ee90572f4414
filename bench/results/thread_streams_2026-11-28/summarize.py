"""Medians of ab_trees.sh's lines: per source and tree, threads / processes for steady img/s and the first batch
(the median of the rounds' ratios), and each contender's medians. python summarize.py ab_trees_runs.txt"""
import statistics, sys
from collections import defaultdict
rows = defaultdict(dict)  # (round, source, tree) -> mode -> (ips, cpu, first, device)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 8:
        rows[(int(p[0]), p[1], p[2])][p[3]] = tuple(map(float, p[4:]))
med = statistics.median
for src in ('map', 'stream'):
    for tree in ('old', 'new'):
        rs = [v for (r, s, t), v in sorted(rows.items()) if s == src and t == tree and len(v) == 2]
        if not rs:
            continue
        ips = med(v['thread'][0] / v['process'][0] for v in rs)
        first = med(v['thread'][2] / v['process'][2] for v in rs)
        each = {m: [med(v[m][i] for v in rs) for i in range(4)] for m in ('thread', 'process')}
        print(f'{src:6s} {tree}: {len(rs)} rounds; threads/processes img/s {ips:.3f}x, first batch {first:.2f}x; '
              + '; '.join(f'{m} {e[0]:.0f} img/s, {e[1]:.3f} ms CPU/img, first {e[2]:.0f} ms, device {e[3]:.1f} ms'
                          for m, e in each.items()))
