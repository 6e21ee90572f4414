"""The cost of `stats()` (always on): the bookkeeping a loader does per image, against the CPU time an image takes.

    python bench/bench_stats.py [--root data/sample/train] [--batches 10]

Times, in a loop, exactly the calls the loaders add per sample (the stage clock's start and stop, the three stage marks
a crop-aware sample passes: read, decode in `decode_sample`, decode in the crop; then the thread loader's
`LoaderStats.add_sample`, or a worker process's additions to its row of the shared array) and per batch (the clock
reads and adds of the collate, the prefetcher and the consumer's side, spread over the batch's images), then runs a
training loader for a few batches and reads its CPU seconds per image. Prints both and the share (the issue's bound:
at most 1%). A loop measures the cost on an idle core far more precisely than two epochs with and without the
counters could on a shared machine."""
import argparse, resource, time
import torch
from timmdata.engine.threads import LoaderStats
from timmdata.core.stages import COLUMNS, WorkerRows
from timmdata.core.stages import DECODE, READ, stage_clock

def per_image_cost(batch_size=64, n=20000, process=False) -> float:
    "Seconds of stats bookkeeping per image (`process`: as a worker process does it, else as a loader thread)."
    rows = torch.zeros(1, len(COLUMNS), dtype=torch.float64); wr = WorkerRows(rows)
    st, pc, c = LoaderStats(rows if process else None), time.perf_counter, stage_clock
    t0 = time.process_time()  # CPU time: the machine's load does not count
    for _ in range(n):  # per sample
        c.start()
        with c(READ): pass
        with c(DECODE): pass
        with c(DECODE): pass
        r = c.stop()
        if process: row = wr.row(); row[0] += r[0]; row[1] += r[1]; row[2] += r[2]; row[4] += 1
        else: st.add_sample(r)
    per_sample = (time.process_time() - t0) / n
    t0 = time.process_time()
    for _ in range(n // 10):  # per batch: collate, prefetcher's device step, consumer side
        a = pc(); b = pc()
        if process: row = wr.row(); row[3] += pc() - b; row[5] += 1; st.add('wait_workers', b - a)
        else: st.add_batch(wait=b - a, collate=pc() - b)
        c0 = pc(); st.add('device', pc() - c0)
        d = pc(); e = pc(); st.add('consumer_wait', e - d); st.delivered(batch_size); st.wall += e - d
        st.add('consumer', pc() - e)
    per_batch = (time.process_time() - t0) / (n // 10)
    return per_sample + per_batch / batch_size

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root'); p.add_argument('--batches', type=int, default=10)
    a = p.parse_args(argv)
    import timmdata
    from timmdata.tools.bench import bench_root
    ld = timmdata.create_loader(timmdata.ImageDataset(str(bench_root(a.root))), 224, 64, is_training=True, num_workers=2,
                                device='cpu', worker_mode='thread')
    it = iter(ld); next(it)
    r0, n = resource.getrusage(resource.RUSAGE_SELF), 0
    for _, (x, _) in zip(range(a.batches), it): n += len(x)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / n
    for mode in ('thread', 'process'):
        cost = min(per_image_cost(process=mode == 'process') for _ in range(3))
        print(f'{mode} mode: stats bookkeeping {cost * 1e6:.2f} us per image; a training image costs {cpu * 1e3:.2f} ms of '
              f'CPU: {cost / cpu:.3%} of it')

if __name__ == '__main__': main()
