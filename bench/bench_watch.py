"""The cost of `LoaderWatch` (issue 61: under 1% of throughput) and of its exchange between ranks.

    python bench/bench_watch.py [--root data/sample/train] [--epochs 6] [--every 10] [--ranks 4]

1. One run with and without: the same training loader (the generated sample data, 224 px training crops, batches of
   64, 2 worker processes, on the CPU), epochs alternating watched (TensorBoard, Prometheus on a free port, and the
   file `timmdata top` reads, every `--every` batches: 5 times the default's writes) and not watched, so that the machine's drift hits both alike;
   prints each one's median images/s and the ratio. On a shared machine the ratio's noise (a few %) is larger than the
   watch's cost; the loop below measures the cost itself.
2. The cost itself, in a loop: the CPU time of the per-batch hook (a counter) and of a write (`tick`: a window of the
   counts, /proc read for the processes, the three sinks), spread over `every` batches of 64 images, against the CPU
   seconds a training image takes in the loader of part 1: the share of the loader's work the watch adds.
3. The exchange on `--ranks` gloo ranks of this machine (forked processes): seconds per all_gather of the 8 figures,
   and what `timmdata.tools.simulate.exchange_cost` gives for 1,024 ranks (nbs/tools/55_simulate.ipynb)."""
import argparse, os, socket, statistics, sys, tempfile, time
import multiprocessing as mp
import torch
import torch.distributed as dist
import timmdata
from timmdata.watch.loader_watch import EXCHANGED, LoaderWatch, child_pids, proc_counts
from timmdata.tools.simulate import exchange_cost
from timmdata.tools.bench import bench_root


def cpu_seconds() -> float:
    "CPU seconds of this process and the processes it started (its loader's workers: running, so rusage has them not)."
    return sum(c['cpu'] for p in [os.getpid(), *child_pids()] if (c := proc_counts(p)) is not None)


def epoch(loader) -> tuple:
    "(images/s, images, CPU seconds of this process and its workers) of one pass."
    c0, t0, n = cpu_seconds(), time.perf_counter(), 0
    for x, _ in loader:
        n += len(x)
    dt = time.perf_counter() - t0
    return n / dt, n, cpu_seconds() - c0


def with_and_without(root, epochs: int, every: int, tmp: str) -> dict:
    ld = timmdata.create_loader(timmdata.ImageDataset(str(root)), 224, 64, is_training=True, num_workers=2,
                                worker_mode='process', device='cpu', persistent_workers=True, seed=0)
    epoch(ld)  # warm: workers started, files in the page cache
    w = LoaderWatch(ld, every=every, tensorboard=os.path.join(tmp, 'tb'), prometheus=0, folder=os.path.join(tmp, 'watch'))
    hooks = ld.stats().hooks
    rates, cpu_img = {'plain': [], 'watched': []}, []
    for e in range(epochs):
        for kind in (('plain', 'watched') if e % 2 == 0 else ('watched', 'plain')):
            if kind == 'watched':
                hooks.append(w)  # one watch for the run, its hook on for the watched epochs only
            r, n, cpu = epoch(ld)
            if kind == 'watched':
                hooks.remove(w)
            else:
                cpu_img.append(cpu / n)
            rates[kind].append(r)
    ticks = w._n // every
    w.close()
    med = {k: statistics.median(v) for k, v in rates.items()}
    return dict(med, ratio=med['watched'] / med['plain'], cpu_per_image=statistics.median(cpu_img), images=n, ticks=ticks)


def loop_cost(root, every: int, tmp: str, n: int = 200) -> dict:
    "CPU seconds of the per-batch hook and of one write with all three sinks, timed in a loop."
    ld = timmdata.create_loader(timmdata.ImageDataset(str(root)), 224, 64, is_training=True, num_workers=0, device='cpu')
    for _ in zip(range(2), ld):
        pass  # counts to read
    w = LoaderWatch(ld, every=10**9, tensorboard=os.path.join(tmp, 'tb2'), prometheus=0, folder=os.path.join(tmp, 'watch'))
    st = ld.stats()
    t0 = time.process_time()
    for _ in range(100_000):
        w(st)  # the hook between writes: a counter
    hook = (time.process_time() - t0) / 100_000
    t0 = time.process_time()
    for _ in range(n):
        w.tick()
    tick = (time.process_time() - t0) / n
    w.close()
    return dict(hook=hook, tick=tick, per_image=(hook + tick / every) / 64)


def _rank(rank, world, port, q, n):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world)
    v, out = torch.zeros(len(EXCHANGED), dtype=torch.float64), [torch.empty(len(EXCHANGED), dtype=torch.float64) for _ in range(world)]
    for _ in range(20):
        dist.all_gather(out, v)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        dist.all_gather(out, v)
    if rank == 0:
        q.put((time.perf_counter() - t0) / n)
    dist.destroy_process_group()


def gloo_exchange(ranks: int, n: int = 500) -> float:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    ctx = mp.get_context('fork')
    q = ctx.Queue()
    ps = [ctx.Process(target=_rank, args=(r, ranks, port, q, n)) for r in range(ranks)]
    for p in ps:
        p.start()
    t = q.get(timeout=300)
    for p in ps:
        p.join()
    return t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root')
    p.add_argument('--epochs', type=int, default=6, help='pairs of epochs (one watched, one not)')
    p.add_argument('--every', type=int, default=10, help='batches between two writes (LoaderWatch\'s default: 50)')
    p.add_argument('--ranks', type=int, default=4, help='gloo ranks for the exchange (0: skip)')
    a = p.parse_args(argv)
    root = bench_root(a.root)
    with tempfile.TemporaryDirectory() as tmp:
        r = with_and_without(root, a.epochs, a.every, tmp)
        print(f'one run, {a.epochs} epochs each ({r["images"]} images, batches of 64, 2 workers, CPU): not watched '
              f'{r["plain"]:.1f} images/s, watched every {a.every} batches (TensorBoard + Prometheus + top; {r["ticks"]} '
              f'writes) {r["watched"]:.1f} images/s: ratio {r["ratio"]:.3f} (medians)')
        c = loop_cost(root, a.every, tmp)
        print(f'in a loop: the hook {c["hook"] * 1e6:.2f} us per batch, a write {c["tick"] * 1e3:.2f} ms (3 sinks); '
              f'{c["per_image"] * 1e6:.2f} us per image at every={a.every}, against {r["cpu_per_image"] * 1e3:.2f} ms '
              f'of CPU per training image: {c["per_image"] / r["cpu_per_image"]:.3%} of the loader\'s work')
    if a.ranks > 1:
        t = gloo_exchange(a.ranks)
        print(f'exchange on {a.ranks} gloo ranks of this machine: {t * 1e6:.0f} us per all_gather of {len(EXCHANGED)} '
              f'figures; {t / a.every * 1e6:.1f} us per step at every={a.every}')
        for lat in (10e-6, 100e-6):
            m = exchange_cost(1024, a.every, latency_s=lat)
            print(f'simulated, 1,024 ranks, {lat * 1e6:.0f} us a hop: ring {m["ring_s"] * 1e3:.2f} ms per exchange '
                  f'+ the rule {m["rule_s"] * 1e3:.3f} ms ({m["ring_per_step_s"] * 1e3:.3f} ms per step at every={a.every}), '
                  f'log-depth {m["tree_s"] * 1e3:.3f} ms ({m["tree_per_step_s"] * 1e6:.1f} us per step)')

if __name__ == '__main__':
    main()
