"""This folder's runs read together: thread / process per round for this tree's contenders (and the try's), pooled.

    python bench/results/thread_streams_2026-11-28e/pool.py"""
import json, statistics as st
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEY = '{}|stream|none|{}'
pooled = []
for name in ('one_pread', 'pread_cached_5rounds', 'pread_cached_12rounds', 'switch_interval', 'images1920'):
    runs = json.loads((HERE / f'{name}.json').read_text())
    ips = {k: [r['ips'] for r in v] for k, v in runs.items()}
    t, p = ips[KEY.format('gil', 'thread')], ips[KEY.format('gil', 'process')]
    assert len(t) == len(p) > 0, name
    ratios = [a / b for a, b in zip(t, p)]
    pooled += ratios if name != 'switch_interval' else []  # the try's interpreter differs there: this tree's runs only
    line = f'{name:22} rounds {len(t):2}  this tree t/p median of rounds {st.median(ratios):.3f}'
    if KEY.format('gil@/tmp/exp', 'thread') in ips:
        et = ips[KEY.format('gil@/tmp/exp', 'thread')]
        assert len(et) == len(t), name
        line += f'  the try\'s threads / this tree\'s, median {st.median(a / b for a, b in zip(et, t)):.3f}'
    cores = {m: st.median(r['cpu_ms'] for r in runs[KEY.format('gil', m)]) * st.median(ips[KEY.format('gil', m)]) / 1e3
             for m in ('thread', 'process')}
    print(line + f'  cores busy: threads {cores["thread"]:.2f}, processes {cores["process"]:.2f}')
q = st.quantiles(pooled, n=4)
print(f'this tree, {len(pooled)} rounds: median {st.median(pooled):.3f}, mean {st.mean(pooled):.3f}, quartiles {q[0]:.2f}-{q[2]:.2f}')
