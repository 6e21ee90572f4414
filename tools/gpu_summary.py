#!/usr/bin/env python
"""summary.json of a GPU kit run (tools/gpu_all.sh), from what its steps wrote into the results folder: any step
missing or cut short gives nulls, so a partial run still has its summary.

    python tools/gpu_summary.py out/gpu/gpu_2026-11-26_h200 --out out/gpu/gpu_2026-11-26_h200/summary.json

    {"device_name", "cpu_count",
     "loader":          {"train": {"timm", "cpu", "device", "device_matmul", "store", "decode_limit"}, "eval": {...}},
                                                                   images/s, the loaders alone and the decoder alone
     "cpu_ms_per_img":  {"train": {...}, "eval": {...}},                                  CPU ms per image, the same runs
     "resize":          {"train": {loader: how it resized}, "eval": {...}}      Triton's kernels, or the products and why
     "train_py":        {"model_alone": images/s, "model_alone_nosync": images/s,
                         "timm" | "timmdata" | "timmdata_device" | "same_batch": FIGURE,
                         "cores4":  {"model_alone": images/s, "timm" | "timmdata" | "timmdata_device"
                                     | "timmdata_device_matmul" (its resize in matrix products, not Triton's): FIGURE},
                         "randaug": {"timm" | "timmdata" | "timmdata_device" | "timmdata_device_matmul": FIGURE}},
     "data", "steps", "tests"}
    FIGURE: {"img_s", "x_model_alone", "epoch_img_s", "gpu_busy", "data_wait", "data_wait_share", "main_cores", "main_thread_cores",
             "worker_cores", "total_cores", "cpus", "exit"}

loader (bench/bench_gpu.py): timm = timm's loader, cpu = timmdata's workers, device = timmdata with
decode_device='cuda', device_matmul = the same with its resize in matrix products (not Triton's kernels), store = timmdata's decode-once store. train_py (tools/timm_script.py, timm's train.py): img_s,
the last epoch's images over its time after its first 10 steps (img_s_median, the median step's rate, beside it in each
report: it hides a loader's stalls); epoch_img_s, the whole last epoch's images over its time (train.py's own running
average: the epoch's start, its workers' first batches, included). A loader's workers may have made the rest of a short
epoch before the span starts (16 workers with 2 batches each ahead: 32 batches, a 30-step epoch's whole), so where the
epoch is short img_s is the model's rate more than the loader's: epoch_img_s beside it bounds it from below; gpu_busy, NVML's utilisation in percent over the same
span; data_wait, the median seconds a step waited for its batch (train.py's `Data`), data_wait_share their sum over
the steps' time; cores, CPU seconds per second of the training process and of its workers (/proc). model_alone
(bench/model_alone.py): the training step alone on a batch already on the device (loss.item() each step, as
train.py; _nosync without it). same_batch: train.py itself handed one batch already on the device every step (its
own ceiling: `tools/timm_script.py --data same-batch`). cores4: train.py and its workers confined to 4 cores
(`taskset -c 0-3`, `-j 4`), its model_alone the step alone in a process confined the same way; randaug: every core,
timm's RandAugment recipe (`--aa rand-m9-mstd0.5-inc1 --reprob 0.25 --mixup 0.2 --cutmix 1.0`). x_model_alone: img_s
over the model alone of the same cores; cpus: the cores the run could use (its affinity). decode_limit
(bench_gpu.py): the device's JPEG decoder alone on the same files. Plain Python: no torch import, a second or less."""

import argparse
import json
import os
import re
from pathlib import Path

KEYS = {'timm': 'timm', 'cpu': 'timmdata_cpu', 'device': 'timmdata_device', 'device_matmul': 'timmdata_device_matmul',
        'store': 'timmdata_store', 'decode_limit': 'decode_limit'}
LOADERS = {'timm': 'timm', 'timmdata': 'timmdata', 'timmdata_device': 'timmdata-device',
           'timmdata_device_matmul': 'timmdata-device-matmul', 'same_batch': 'same-batch'}
VARIANTS = {'cores4': ('timm', 'timmdata', 'timmdata_device', 'timmdata_device_matmul'),
            'randaug': ('timm', 'timmdata', 'timmdata_device', 'timmdata_device_matmul')}


def _json(p: Path):
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _bench_from_log(log: Path) -> dict:
    "bench_gpu.py's measured epochs from its log, where its JSON is missing (a run cut short)."
    out = {}
    try:
        text = log.read_text()
    except OSError:
        return out
    for pipe, c, ep, rate, ms in re.findall(
        r'^\s+(\w+) (\w+) epoch (\d+): ([\d,]+) img/s, ([\d.]+) CPU ms/img', text, re.M
    ):
        if ep != '0':
            p = out.setdefault(pipe, {'img_per_s': {}, 'cpu_s_per_img': {}})
            p['img_per_s'][c] = float(rate.replace(',', ''))
            p['cpu_s_per_img'][c] = float(ms) / 1e3
    return out


def _figure(report: Path, model_alone) -> dict:
    "One train.py run's figures from tools/timm_script.py's report (nulls where the run is missing or cut short)."
    r = _json(report)
    s = (r or {}).get('steady') or {}
    cpu = s.get('cpu') or {}
    img_s = s.get('img_s')
    return {
        'img_s': img_s,
        'x_model_alone': img_s / model_alone if img_s and model_alone else None,
        'epoch_img_s': (r or {}).get('images_per_s'),
        'gpu_busy': s.get('gpu_busy'),
        'data_wait': s.get('data_wait_s'),
        'data_wait_share': s.get('data_wait_share'),
        'main_cores': cpu.get('main_process_cores'),
        'main_thread_cores': cpu.get('main_thread_cores'),
        'worker_cores': cpu.get('children_cores'),
        'total_cores': cpu.get('total_cores'),
        'cpus': cpu.get('usable_cpus'),
        'exit': None if r is None else r.get('exit'),
    }


def summarise(w: Path) -> dict:
    bench = _json(w / 'bench_gpu.json') or {}
    pipes = bench.get('pipelines') or {}
    for pipe, p in _bench_from_log(w / 'bench_gpu.log').items():
        pipes.setdefault(pipe, p)  # the log's figures only where the JSON has no such pipeline
    loader, cpu_ms, resize = {}, {}, {}
    for pipe in ('train', 'eval'):
        p = pipes.get(pipe) or {}
        resize[pipe] = p.get('resize') or {}  # the device loaders' resize: Triton's kernels, or the products and why
        loader[pipe] = {k: (p.get('img_per_s') or {}).get(c) for k, c in KEYS.items()}
        cpu_ms[pipe] = {
            k: None if (p.get('cpu_s_per_img') or {}).get(c) is None else p['cpu_s_per_img'][c] * 1e3
            for k, c in KEYS.items()
        }
    model = _json(w / 'model_alone.json') or {}
    train = {'model_alone': model.get('img_s'), 'model_alone_nosync': model.get('img_s_nosync')}
    for key, name in LOADERS.items():
        train[key] = _figure(w / f'train_{name}.json', train['model_alone'])
    cores4 = (_json(w / 'model_alone_cores4.json') or {}).get('img_s')
    train['cores4'] = {'model_alone': cores4}
    train['randaug'] = {}
    for variant, keys in VARIANTS.items():
        alone = cores4 if variant == 'cores4' else train['model_alone']
        for key in keys:
            train[variant][key] = _figure(w / f'train_{variant}_{LOADERS[key]}.json', alone)
    env = (w / 'env.txt').read_text() if (w / 'env.txt').is_file() else ''
    m = re.search(r'^\|\s+\d+\s+(NVIDIA [^|]*?)\s{2,}', env, re.M)
    name = model.get('device_name') or bench.get('device_name') or (m[1].strip() if m else None)
    steps = []
    if (w / 'steps.tsv').is_file():
        for line in (w / 'steps.tsv').read_text().splitlines():
            step, code, secs, cap = (line.split('\t') + [None] * 4)[:4]
            steps.append(
                {'step': step, 'exit': int(code), 'seconds': float(secs), 'cap_s': None if cap is None else int(cap)}
            )
    tests = (w / 'tests_summary.txt').read_text().splitlines() if (w / 'tests_summary.txt').is_file() else None
    return {
        'device_name': name,
        'cpu_count': os.cpu_count(),
        'loader': loader,
        'cpu_ms_per_img': cpu_ms,
        'resize': resize,
        'train_py': train,
        'data': _json(w / 'data.json'),
        'steps': steps,
        'tests': tests,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('results', type=Path, help="the run's results folder (tools/gpu_run.sh's W)")
    ap.add_argument('--out', type=Path, help='write summary.json here (default: print it)')
    a = ap.parse_args(argv)
    s = json.dumps(summarise(a.results), indent=1)
    if a.out:
        a.out.write_text(s + '\n')
    else:
        print(s)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
