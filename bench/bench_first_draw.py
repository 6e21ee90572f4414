"""A sample's flip draw: torch's way (a generator made and seeded from the sample's key, `torch.rand(1)`, `.item()`)
against `Draws.rand` with the C extension (the same float from the key alone), microseconds a draw.

    python bench/bench_first_draw.py [--draws 20000] [--rounds 5] [--out FILE]

Each round times --draws draws of each way in turn, over the keys of --draws samples (`mix_seed(0, 0, i)`), one
thread; the two are checked equal first. Medians over rounds, and the ratio of the two in each round (its median)."""
import argparse, statistics, time
import torch
from _common import Report, paired
from timmdata.config import Draws, mix_seed
from timmdata.pixels.decode import NATIVE


def torch_way(keys: list) -> float:
    t = time.perf_counter()
    for k in keys:
        torch.rand(1, generator=torch.Generator().manual_seed(k)).item()
    return time.perf_counter() - t


def draws_way(keys: list, native) -> float:
    t = time.perf_counter()
    for k in keys:
        Draws(k).rand(native)
    return time.perf_counter() - t


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--draws', type=int, default=20000)
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--out', help='write the lines printed here, after the command')
    a = p.parse_args()
    native, rep = NATIVE.module, Report()
    if native is None:
        raise SystemExit(f'bench_first_draw: the C extension is {NATIVE.status}; nothing to compare')
    keys = [mix_seed(0, 0, i) for i in range(a.draws)]
    first = lambda k: torch.rand(1, generator=torch.Generator().manual_seed(k)).item()
    bad = [k for k in keys[:1000] if Draws(k).rand(native) != first(k)]
    if bad:
        raise SystemExit(f'bench_first_draw: Draws.rand differs from torch for key {bad[0]}')
    theirs, ours = [], []
    for _ in range(a.rounds):
        theirs.append(torch_way(keys))
        ours.append(draws_way(keys, native))
    us = lambda v: f'{statistics.median(v) / a.draws * 1e6:.2f} us'
    rep.say(f'{a.draws} draws a round, {a.rounds} rounds, one thread, medians:')
    rep.say(f'  torch generator + torch.rand(1) + .item() {us(theirs)}; Draws.rand with the extension {us(ours)} '
            f'({paired(ours, theirs):.2f}x)')
    rep.write(a.out)


if __name__ == '__main__':
    main()
