"""The figures of README.txt from the runs of the try: thread / process per round, each tree, and the try's threads /
this tree's, with the cores kept busy (CPU ms an image x images/s, medians).

    python bench/results/thread_streams_2026-11-28f/ratios.py"""
import json, statistics as st
from pathlib import Path

HERE = Path(__file__).resolve().parent
# each run's interpreters: which one ran the try, which this tree (7a308fd)
RUNS = {
    'lend_runs.json': ({'the try': 'gil', 'this tree': 'gil@/tmp/base'}, ('none', 'sleep:30')),
    'lend_first10.json': ({'the try': 'gil@/tmp/exp', 'this tree': 'gil'}, ('none',)),
}
for name, (trees, steps) in RUNS.items():
    runs = json.loads((HERE / name).read_text())
    for step in steps:
        ips = {}
        for tree, py in trees.items():
            t, p = (runs[f'{py}|stream|{step}|{m}'] for m in ('thread', 'process'))
            assert len(t) == len(p) > 0
            ratios = [a['ips'] / b['ips'] for a, b in zip(t, p)]
            busy = [st.median(r['cpu_ms'] * r['ips'] / 1e3 for r in rs) for rs in (t, p)]
            ips[tree] = [r['ips'] for r in t]
            print(f'{name} step {step:8} {tree:9}: thread / process median {st.median(ratios):.3f} (rounds: '
                  f'{" ".join(f"{x:.2f}" for x in ratios)}); cores busy threads {busy[0]:.2f}, processes {busy[1]:.2f}')
        a, b = ips['the try'], ips['this tree']
        assert len(a) == len(b)
        print(f'{name} step {step:8} the try\'s threads / this tree\'s: median {st.median(x / y for x, y in zip(a, b)):.3f}')
