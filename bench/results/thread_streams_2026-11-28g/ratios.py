"""Thread / process over a stream from rounds10.json: each round's ratio (the two modes ran next to each other), its
median and a bootstrap 95% interval of that median, the first batch's ratio and the cores kept busy.

    python bench/results/thread_streams_2026-11-28g/ratios.py [FILE.json ...]   (default: rounds10.json cpu_step.json)"""
import json, random, statistics as st, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
runs = {}
for name in sys.argv[1:] or ('rounds10.json', 'cpu_step.json'):
    runs.update(json.loads((HERE / name).read_text()))


def interval(xs: list, n: int = 10000, seed: int = 0) -> tuple:
    "A bootstrap 95% interval of the median of xs (resampled with replacement, a fixed seed)."
    rng = random.Random(seed)
    meds = sorted(st.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


for py in ('gil', 'ft'):
    for step in ('none', 'sleep:30', 'cpu'):
        t, p = (runs.get(f'{py}|stream|{step}|{m}', []) for m in ('thread', 'process'))
        if not t:
            continue
        assert len(t) == len(p), (py, step, len(t), len(p))
        r = [a['ips'] / b['ips'] for a, b in zip(t, p)]
        f = [a['first'] / b['first'] for a, b in zip(t, p)]
        lo, hi = interval(r)
        busy = [st.median(x['cpu_ms'] * x['ips'] / 1e3 for x in rs) for rs in (t, p)]
        cpu = [st.median(x['cpu_ms'] for x in rs) for rs in (t, p)]
        print(f'{py:3} stream {step:8}: img/s thread / process median {st.median(r):.3f} (95% {lo:.3f}-{hi:.3f}, '
              f'{len(r)} rounds, {sum(x >= 1 for x in r)} at or over 1); first batch {st.median(f):.2f}x; '
              f'CPU ms an image {cpu[0]:.2f} / {cpu[1]:.2f}; cores busy {busy[0]:.2f} / {busy[1]:.2f}')
