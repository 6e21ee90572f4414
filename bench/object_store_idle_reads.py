"""What a persistent loader over an S3 bucket reads while it sits idle between epochs: the requests the S3 server
serves, and the CPU its workers use, in the `--idle` seconds after an epoch ends (before the next is asked for).
A loader that reads during that time competes with whatever runs then (in a benchmark that alternates loaders in one
process: the other loaders' timed epochs). Shards and Parquet files with their index, `--n` generated 500x375 JPEGs,
2 workers, batch 64, the training pipeline at 224; s3rver as bench_object_store_cores.py runs it (`make s3rver`),
20 ms added to each request.

    make s3rver && python bench/object_store_idle_reads.py      # about 30 seconds
    python bench/object_store_idle_reads.py --out bench/results/NAME/idle_reads.txt
"""

import argparse, atexit, os, shutil, sys, tempfile, time, warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_object_store_cores as cores  # noqa: E402  (pins this process to all CPUs but the last, as there)
from _common import proc_cpu  # noqa: E402
from bench_object_store import make_set  # noqa: E402
from timmdata import create_dataset, create_loader  # noqa: E402
from timmdata.core.settings import set_environment  # noqa: E402
from timmdata.tools.bench import time_epoch, worker_pids  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--n', type=int, default=640, help='500x375 images (whole batches of 64)')
    ap.add_argument('--idle', type=float, default=4.0, help='seconds watched after the epoch')
    ap.add_argument('--out', default=None, help='also write the output here, the command on its first line')
    a = ap.parse_args()
    warnings.simplefilter('ignore')
    tmp = Path(tempfile.mkdtemp(prefix='object_store_idle_reads_'))
    atexit.register(shutil.rmtree, tmp, True)
    s = make_set(tmp / 'set', a.n, (500, 375))
    proc, endpoint = cores.start_s3rver(tmp / 's3rver', 0.02)
    set_environment(
        {'AWS_ACCESS_KEY_ID': 'S3RVER', 'AWS_SECRET_ACCESS_KEY': 'S3RVER', 'AWS_REGION': 'us-east-1',
         'AWS_ENDPOINT_URL': endpoint}
    )  # fmt: skip
    lines = [f'{s["n"]} generated 500x375 JPEGs, 2 persistent workers, batch 64; s3rver with 20 ms a request']
    for name, folder in (('wds/x', 'wds'), ('parquet/x', 'pq')):
        ds = create_dataset(name, root=cores.upload(s[folder], folder), split='train', is_training=True, batch_size=64)
        dl = create_loader(
            ds, (3, 224, 224), 64, is_training=True, num_workers=2, persistent_workers=True, device='cpu'
        )
        ds.set_epoch(0)
        n, dt = time_epoch(dl)
        pids = worker_pids(dl)
        q0, c0 = cores.served(endpoint), sum(proc_cpu(p) for p in pids)
        time.sleep(a.idle)
        q1, c1 = cores.served(endpoint), sum(proc_cpu(p) for p in pids)
        lines.append(
            f'   {name:<10} epoch of {n} images in {dt:.2f} s; in the {a.idle:g} s after it: {q1 - q0} requests '
            f'served, {c1 - c0:.2f} CPU s in the workers'
        )
        getattr(dl, 'shutdown', lambda: None)()
    print('\n'.join(lines))
    if a.out:
        os.makedirs(os.path.dirname(a.out) or '.', exist_ok=True)
        cmd = 'python ' + ' '.join(['bench/object_store_idle_reads.py', *sys.argv[1:]])
        Path(a.out).write_text(cmd + '\n\n' + '\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
