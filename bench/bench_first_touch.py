"""A loader's first batch on a fresh process: what its first writes to fresh memory cost, in one thread and in two at
once, and what numpy's first `np.unique` call costs (it imports numpy.ma); the two start-up costs the first batch
avoids or splits (`timmdata.engine.prefetch._rows_at_once`, `timmdata.streams.global_order.distinct`).

    python bench/bench_first_touch.py [--mb 38.5] [--rounds 8] [--out FILE]

Each round, alternating: a fresh buffer of --mb MB (torch.empty: 64 float images of 3x224x224 by default) written
once through, one 4-byte write a 4 KB page (so the time is the page faults'), by one thread, then another by two
threads at once, a half each; then the same buffer written again (reused memory). Medians and the two-thread / one
ratio. Then, in --rounds fresh processes each, the first call of np.unique and of `distinct` on a small array."""
import argparse, statistics, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
import torch
from _common import Report, paired

PROBE = (
    'import time, numpy as np\n'
    'from timmdata.streams.global_order import distinct\n'
    'a = np.array([3, 1, 3], np.int64)\n'
    't = time.perf_counter(); {call}(a); print((time.perf_counter() - t) * 1e3)'
)


def touch(x: torch.Tensor):
    x[:: 1024].fill_(0)  # one float a 4 KB page


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--mb', type=float, default=64 * 3 * 224 * 224 * 4 / 1e6)
    p.add_argument('--rounds', type=int, default=8)
    p.add_argument('--out', help='write the lines printed here, after the command')
    a = p.parse_args()
    n, rep = int(a.mb * 1e6 / 4), Report()
    one, two, again = [], [], []
    with ThreadPoolExecutor(1) as ex:
        for _ in range(a.rounds):
            x = torch.empty(n)
            t = time.perf_counter()
            touch(x)
            one.append(time.perf_counter() - t)
            t = time.perf_counter()
            touch(x)
            again.append(time.perf_counter() - t)
            del x
            y = torch.empty(n)
            t = time.perf_counter()
            half = ex.submit(touch, y[n // 2 :])
            touch(y[: n // 2])
            half.result()
            two.append(time.perf_counter() - t)
            del y
    ms = lambda v: f'{statistics.median(v) * 1e3:.1f} ms'
    rep.say(f'first writes to a fresh {a.mb:.1f} MB buffer, {a.rounds} rounds, medians:')
    rep.say(f'  one thread {ms(one)}, two threads at once {ms(two)} ({paired(two, one):.2f}x), reused {ms(again)}')
    for call in ('np.unique', 'distinct'):
        got = [
            float(subprocess.run([sys.executable, '-c', PROBE.format(call=call)], capture_output=True, text=True,
                                 check=True).stdout)
            for _ in range(a.rounds)
        ]  # fmt: skip
        rep.say(f'first call of {call} in a fresh process: {statistics.median(got):.2f} ms (median of {a.rounds})')
    rep.write(a.out)


if __name__ == '__main__':
    main()
