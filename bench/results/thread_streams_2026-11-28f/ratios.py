"""The figures of README.txt from lend_runs.json: thread / process per round, each tree, and the try's threads / this
tree's, with the cores kept busy (CPU ms an image x images/s, medians).

    python bench/results/thread_streams_2026-11-28f/ratios.py"""
import json, statistics as st
from pathlib import Path

runs = json.loads((Path(__file__).resolve().parent / 'lend_runs.json').read_text())
TREES = {'the try': 'gil', 'this tree': 'gil@/tmp/base'}
for step in ('none', 'sleep:30'):
    ips = {}
    for name, py in TREES.items():
        t, p = (runs[f'{py}|stream|{step}|{m}'] for m in ('thread', 'process'))
        assert len(t) == len(p) > 0
        ratios = [a['ips'] / b['ips'] for a, b in zip(t, p)]
        busy = st.median(r['cpu_ms'] * r['ips'] / 1e3 for r in t), st.median(r['cpu_ms'] * r['ips'] / 1e3 for r in p)
        ips[name] = [r['ips'] for r in t]
        print(f'step {step:8} {name:9}: thread / process median {st.median(ratios):.3f} (rounds: '
              f'{" ".join(f"{x:.2f}" for x in ratios)}); cores busy threads {busy[0]:.2f}, processes {busy[1]:.2f}')
    a, b = ips['the try'], ips['this tree']
    assert len(a) == len(b)
    print(f'step {step:8} the try\'s threads / this tree\'s: median {st.median(x / y for x, y in zip(a, b)):.3f}')
