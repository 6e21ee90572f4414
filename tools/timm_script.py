#!/usr/bin/env python
"""Runs one of timm's scripts (train.py, validate.py) as its users run it, its data loading from timm or from timmdata,
and reports what the training steps measured (issue 45's end-to-end run; tools/gpu_run.sh train calls it).

    python tools/timm_script.py --data timmdata --report r.json path/to/train.py DATA --model resnet50 --amp ...
    python tools/timm_script.py --summary r_timm.json r_timmdata.json ...

--data timm: timm's own `timm.data`. timmdata: `timm.data` is timmdata, through the import hook of
tools/run_timm_data_tests.py (the one-import change). timmdata-device: the same with `create_loader(...,
decode_device='cuda')`, the one argument a user adds to decode on the GPU.

The report (JSON): from train.py's own log lines (`Train: E [i/N] ... Time: s, R/s (avg s, avg R/s) ... Data: d (avg)`),
the last epoch's throughput (images/s: the epoch's running average on its last line, every step counted, data waits
included) and the share of its steps spent waiting for data (average Data / average Time); the median of the single
steps' logged rates beside them (step_rate_median: a step's rate, waits between logged steps left out); the
GPU's mean utilisation from NVML (`torch.cuda.utilization`, sampled every 50 ms) over the same span, from the first log
line after epoch 0 to the last, and its complement, the GPU's idle fraction. The script's code is timm's, run
unchanged (`runpy`); nothing of it is kept here."""

import argparse
import json
import logging
import re
import runpy
import statistics
import sys
import threading
import time
from pathlib import Path

TRAIN = re.compile(
    r'Train: (\d+) \[\s*(\d+)/\s*(\d+).*?Time: ([\d.]+)s,\s*([\d.]+)/s\s*\(([\d.]+)s,\s*([\d.]+)/s\).*?Data: ([\d.]+) \(([\d.]+)\)'
)


def parse(msg: str):
    "(epoch, step rate, step data share, average rate, average data share) of a `Train:` line, or None."
    m = TRAIN.search(msg)
    if not m:
        return None
    t, at = float(m[4]), float(m[6])
    return int(m[1]), float(m[5]), float(m[8]) / t if t else 0.0, float(m[7]), float(m[9]) / at if at else 0.0


def throughput(rows: list) -> dict:
    "The measured figures from the rows (time, epoch, step rate, step data share, average rate, average data share)."
    after = [r for r in rows if r[1] >= 1] or rows  # the first epoch warms up (cudnn, workers)
    last = [r for r in after if r[1] == after[-1][1]] if after else []
    return {
        'images_per_s': last[-1][4] if last else None,
        'data_wait_share': last[-1][5] if last else None,
        'step_rate_median': statistics.median(r[2] for r in after) if after else None,
    }


class _Lines(logging.Handler):
    "Keeps (time, epoch, rate, data share) of every `Train:` line train.py logs."

    def __init__(self):
        super().__init__()
        self.rows = []

    def emit(self, record):
        r = parse(record.getMessage())
        if r:
            self.rows.append((time.time(), *r))


def _sample_gpu(samples, stop):
    "(time, utilisation %) every 50 ms until `stop` is set; nothing where NVML or CUDA is missing."
    import torch

    if not torch.cuda.is_available():
        return
    try:
        torch.cuda.utilization()
    except Exception:  # noqa: BLE001 (no pynvml, or NVML refuses: its errors are plain Exceptions)
        return
    while not stop.wait(0.05):
        samples.append((time.time(), torch.cuda.utilization()))


def run(data: str, report: Path, script: Path, args: list) -> int:
    if data not in ('timm', 'timmdata', 'timmdata-device'):
        sys.exit(f'timm_script: --data {data!r}: one of timm, timmdata, timmdata-device')
    if data != 'timm':
        sys.path.insert(0, str(Path(__file__).parent))
        from run_timm_data_tests import install_shim

        install_shim()
        if data == 'timmdata-device':
            import functools

            import torch

            import timmdata

            where = 'cuda' if torch.cuda.is_available() else 'cpu'  # 'cpu': a rehearsal of the same path
            timmdata.create_loader = functools.partial(timmdata.create_loader, decode_device=where)
    lines, samples, stop = _Lines(), [], threading.Event()
    logging.getLogger().addHandler(lines)
    sampler = threading.Thread(target=_sample_gpu, args=(samples, stop), daemon=True)
    sampler.start()
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))
    code, t0 = 0, time.time()
    try:
        runpy.run_path(str(script), run_name='__main__')
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:
        code = 1
        print(f'timm_script: {script.name} failed: {type(e).__name__}: {e}', file=sys.stderr)
        raise
    finally:
        stop.set()
        sampler.join(1)
        after = [r for r in lines.rows if r[1] >= 1] or lines.rows  # the first epoch warms up (cudnn, workers)
        span = (after[0][0], after[-1][0]) if after else (t0, time.time())
        util = [u for t, u in samples if span[0] <= t <= span[1]]
        out = {
            'data': data,
            'script': script.name,
            'args': args,
            'exit': code,
            'seconds': time.time() - t0,
            'log_lines': len(lines.rows),
            **throughput(lines.rows),
            'gpu_util_mean': statistics.mean(util) if util else None,
            'gpu_samples': len(util),
        }
        out['gpu_idle_fraction'] = None if not util else 1 - out['gpu_util_mean'] / 100
        if report:
            report.parent.mkdir(parents=True, exist_ok=True)
            report.write_text(json.dumps(out, indent=1))
    return code


def summary(reports: list) -> str:
    rs = [json.loads(Path(p).read_text()) for p in reports]
    base = next((r['images_per_s'] for r in rs if r['data'] == 'timm' and r['images_per_s']), None)

    def cell(v, fmt):
        return '' if v is None else format(v, fmt)

    rows = [
        f"{'loader':<16} {'exit':>4} {'images/s':>9} {'x timm':>7} {'data wait':>9} {'GPU busy %':>10} {'GPU idle':>8}"
    ]
    for r in rs:
        ips = r['images_per_s']
        rows.append(
            f"{r['data']:<16} {r['exit']:>4} {cell(ips, ',.0f'):>9} {cell(ips / base if ips and base else None, '.2f'):>7} "
            f"{cell(r['data_wait_share'], '.1%'):>9} {cell(r['gpu_util_mean'], '.0f'):>10} "
            f"{cell(r['gpu_idle_fraction'], '.1%'):>8}"
        )
    return '\n'.join(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--data', default='timmdata', help='timm, timmdata or timmdata-device')
    ap.add_argument('--report', type=Path, help='write the measurements here (JSON)')
    ap.add_argument('--summary', nargs='+', help='print a table of these reports instead of running anything')
    ap.add_argument('--relog', type=Path, help="recompute --report's figures from train.py's saved log (its output)")
    ap.add_argument('script', nargs='?', type=Path, help="timm's train.py or validate.py")
    ap.add_argument('args', nargs=argparse.REMAINDER, help='its arguments, as its users give them')
    a = ap.parse_args(argv)
    if a.summary:
        print(summary(a.summary))
        return 0
    if a.relog:
        rows = [(0.0, *r) for r in map(parse, a.relog.read_text().splitlines()) if r]
        rep = json.loads(a.report.read_text())
        rep.update(throughput(rows), log_lines=len(rows))
        a.report.write_text(json.dumps(rep, indent=1))
        return 0
    if a.script is None or not a.script.is_file():
        ap.error(f'script {a.script}: not a file (bash tools/gpu_kit.sh puts timm\'s train.py in .whl/timm_scripts/)')
    return run(a.data, a.report, a.script, a.args)


if __name__ == '__main__':
    sys.exit(main())
