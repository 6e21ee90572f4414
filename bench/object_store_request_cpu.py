"""What one ranged GET costs this process's CPU, one way at a time, for a profiler to watch: s3rver (`make s3rver`) on
the last CPU with no latency added, this process on the others, 3 KB reads at spread offsets of a 5 MB object, 32 in
flight. WAY: `obstore_threads` (the client's own call from 32 threads), `obstore_loop` (its async API on one event
loop), `range_threads` (timmdata's `object_range` from 32 threads), `get_many` (`object_get_many`, 32 reads a call:
what the readers use). A warm-up pass, then `--ready FILE` gets this process's pid and the timed pass starts 2 s
later (`bench/profile_object_requests.sh` attaches `perf` there); prints the CPU milliseconds a request.

    python bench/object_store_request_cpu.py get_many 12000
"""
import argparse, atexit, os, shutil, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import bench_object_store_cores as B  # pins this process to all CPUs but the last (s3rver's)

from timmdata.core.settings import set_environment
from timmdata.net.object_store import put_object, store_for


WAYS = ('obstore_threads', 'obstore_loop', 'range_threads', 'get_many')  # `request_ways`' four, in its order


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('way', choices=WAYS)
    ap.add_argument('n', type=int, nargs='?', default=6000, help='requests timed')
    ap.add_argument('--size', type=int, default=3000, help='bytes a read')
    ap.add_argument('--ready', default=None, help='a file this process writes its pid to before the timed pass')
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    atexit.register(shutil.rmtree, tmp, True)
    proc, endpoint = B.start_s3rver(tmp / 's3rver', 0.0)
    atexit.register(proc.kill)
    set_environment({'AWS_ACCESS_KEY_ID': 'S3RVER', 'AWS_SECRET_ACCESS_KEY': 'S3RVER', 'AWS_REGION': 'us-east-1',
                     'AWS_ENDPOINT_URL': endpoint})  # fmt: skip
    url, size, flight = f's3://{B.BUCKET}/blob.bin', a.size, 32
    put_object(url, os.urandom(5_000_000))
    starts = B.spread_starts(a.n)  # the benchmark's offsets: one request a read
    store, _ = store_for(url)
    ways = B.request_ways(url, size, store, flight)  # the benchmark's own four ways, by their short names here
    run = ways[dict(zip(WAYS, ways))[a.way]]
    run(starts)  # warm: connections made, code paths run once
    if a.ready:
        Path(a.ready).write_text(str(os.getpid()))
        time.sleep(2)
    c, t = time.process_time(), time.perf_counter()
    if run(starts) != a.n * size:
        raise RuntimeError(f'{a.way}: not every byte read')
    print(f'{a.way}: {a.n} requests, {(time.process_time() - c) / a.n * 1e3:.3f} ms CPU each, '
          f'{a.n / (time.perf_counter() - t):.0f}/s', flush=True)  # fmt: skip


if __name__ == '__main__':
    main()
