"""The cost of `stats()` (always on): the bookkeeping a loader does per image, against the CPU time an image takes.

    python bench/bench_stats.py [--root data/sample/train] [--batches 10]

Times, in a loop, exactly the calls the loaders add per sample (two clock reads, `LoaderStats.add_sample`, the baton's
native-time read) and per batch (the clock reads and adds of the thread loader, the prefetcher and the consumer's side,
spread over the batch's images), then runs a thread-mode training loader for a few batches and reads its CPU seconds
per image. Prints both and the share (the issue's bound: at most 1%). A loop measures the cost on an idle core far more
precisely than two epochs with and without the counters could on a shared machine."""
import argparse, resource, time
from timmdata.threads import BATON, LoaderStats

def per_image_cost(batch_size=64, n=20000) -> float:
    "Seconds of stats bookkeeping per image."
    st, pc = LoaderStats(), time.perf_counter
    t0 = time.perf_counter()
    for _ in range(n):  # per sample
        a = pc(); st.add_sample(pc() - a, BATON.native_time())
    per_sample = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n // 10):  # per batch: thread loader, prefetcher's device step, consumer side
        a = pc(); b = pc(); st.add_batch(wait=b - a, collate=pc() - b)
        c = pc(); st.add('device', pc() - c)
        d = pc(); e = pc(); st.add('consumer_wait', e - d); st.delivered(batch_size); st.wall += e - d
        st.add('consumer', pc() - e)
    per_batch = (time.perf_counter() - t0) / (n // 10)
    return per_sample + per_batch / batch_size

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root'); p.add_argument('--batches', type=int, default=10)
    a = p.parse_args(argv)
    import timmdata
    from timmdata.bench import bench_root
    cost = min(per_image_cost() for _ in range(3))
    ld = timmdata.create_loader(timmdata.ImageDataset(str(bench_root(a.root))), 224, 64, is_training=True, num_workers=2,
                                device='cpu', worker_mode='thread')
    it = iter(ld); next(it)
    r0, n = resource.getrusage(resource.RUSAGE_SELF), 0
    for _, (x, _) in zip(range(a.batches), it): n += len(x)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / n
    print(f'stats bookkeeping {cost * 1e6:.2f} us per image; a thread-mode training image costs {cpu * 1e3:.2f} ms of CPU: '
          f'{cost / cpu:.3%} of it')

if __name__ == '__main__': main()
