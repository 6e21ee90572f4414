#!/usr/bin/env python
"""Runs one of timm's scripts (train.py, validate.py) as its users run it, its data loading from timm or from timmdata,
and reports what the training steps measured in their steady state (tools/gpu_run.sh train calls it).

    python tools/timm_script.py --data timmdata --report r.json --profile DIR path/to/train.py DATA --model resnet50 ...
    python tools/timm_script.py --summary r_timm.json r_timmdata.json ...

--data timm: timm's own `timm.data`. timmdata: `timm.data` is timmdata, through the import hook of
tools/run_timm_data_tests.py (the one-import change). timmdata-device: the same with `create_loader(...,
decode_device='cuda')`, the one argument a user adds to decode on the GPU. same-batch: train.py's own ceiling, no
loading at all: its training loader hands out the first batch timmdata's loader made, already on the device, as many
times an epoch as that loader has batches (evaluation reads its real loader): what train.py's loop reaches when the
data is never waited for, its own per-step work (logging, the scaler's and the loss's waits) included.

The measured span is the last epoch (train.py's `--epochs`) after its first `--skip-steps` steps; run train.py with
`--log-interval 1` so that each step has its line (`Train: E [i/N] ... Time: s, R/s (avg s, avg R/s) ... Data: d (avg)`).
The report (JSON) gives, over the span:
- img_s: the span's images over its time, from train.py's own lines (a step's time counts its wait for data);
  img_s_median: the median of the steps' rates (it hides a loader's stalls: beside img_s, not instead of it);
- data_wait_s: the median of the steps' `Data` seconds (train.py's wait for the loader), data_wait_share: their sum
  over the sum of the steps' times;
- gpu_busy: NVML's utilisation (`torch.cuda.utilization`), sampled every 50 ms, its mean in percent;
- cpu: cores used, from /proc (user + system time over the span's wall time): the training process (and its main
  thread, and each of its named Python threads), its child processes (the loader's workers), the sum, and nproc;
- loader_stats (timmdata): the training loader's `stats()` (`LoaderStats`: seconds per stage, summed over the workers,
  and the consumer's wait) over the span, and its table;
- profile (with --profile DIR and py-spy on PATH): `py-spy dump` and `py-spy record --format speedscope` of the
  training process, taken as the span starts (skipped, said so, where py-spy is missing or cannot attach); with
  --profile-gil, `py-spy record --gil --threads --format raw` instead: the thread holding the GIL, at each sample.
--switch-interval S runs the script with `sys.setswitchinterval(S)`: how long a thread may keep the GIL that another
is waiting for (Python's default 5 ms).
The script's code is timm's, run unchanged (`runpy`); nothing of it is kept here."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import runpy
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

TRAIN = re.compile(
    r'Train: (\d+) \[\s*(\d+)/\s*(\d+).*?Time: ([\d.]+)s,\s*([\d.]+)/s\s*\(([\d.]+)s,\s*([\d.]+)/s\).*?Data: ([\d.]+) \(([\d.]+)\)'
)
CLK = os.sysconf('SC_CLK_TCK')


def parse(msg: str):
    "(epoch, step rate, step data share, average rate, average data share) of a `Train:` line, or None."
    m = TRAIN.search(msg)
    if not m:
        return None
    t, at = float(m[4]), float(m[6])
    return int(m[1]), float(m[5]), float(m[8]) / t if t else 0.0, float(m[7]), float(m[9]) / at if at else 0.0


def parse_step(msg: str):
    "(epoch, step, steps in the epoch, step seconds, step rate, step data seconds) of a `Train:` line, or None."
    m = TRAIN.search(msg)
    if not m:
        return None
    return int(m[1]), int(m[2]), int(m[3]), float(m[4]), float(m[5]), float(m[8])


def throughput(rows: list) -> dict:
    """The running averages (rows: time, then `parse`'s tuple): the last epoch's images/s and data share on its last
    line (every step counted, the epoch's start included), and the median of the step rates after epoch 0."""
    after = [r for r in rows if r[1] >= 1] or rows  # the first epoch warms up (cudnn, workers)
    last = [r for r in after if r[1] == after[-1][1]] if after else []
    return {
        'images_per_s': last[-1][4] if last else None,
        'data_wait_share': last[-1][5] if last else None,
        'step_rate_median': statistics.median(r[2] for r in after) if after else None,
    }


def measured(rows: list, last_epoch: int | None = None, skip: int = 10) -> list:
    "The rows of the measured span: the last epoch's (or `last_epoch`'s) steps from the `skip`-th (0-based) on."
    if not rows:
        return []
    last = rows[-1][1] if last_epoch is None else last_epoch
    return [r for r in rows if r[1] == last and r[2] >= skip]


def steady(span: list) -> dict:
    "The figures of the span's rows (time, then `parse_step`'s tuple)."
    if not span:
        return {'img_s': None, 'data_wait_s': None, 'data_wait_share': None, 'steps_measured': 0}
    t = sum(r[4] for r in span)
    return {  # img_s: the span's images over its time; the median step's rate hides a loader's stalls (a 1 s wait
        # every 4 steps leaves the median at the model's rate), so it is only beside it
        'img_s': sum(r[4] * r[5] for r in span) / t if t else None,
        'img_s_median': statistics.median(r[5] for r in span),
        'data_wait_s': statistics.median(r[6] for r in span),
        'data_wait_share': sum(r[6] for r in span) / t if t else None,
        'step_s_median': statistics.median(r[4] for r in span),
        'steps_measured': len(span),
        'epoch': span[0][1],
    }


# ---------- CPU time per process and thread, from /proc ----------


def _ticks(stat_path: Path):
    "(name, user + system seconds) from a /proc stat file, or None when it is gone."
    try:
        s = stat_path.read_text()
    except OSError:
        return None
    name, rest = s[s.index('(') + 1 : s.rindex(')')], s[s.rindex(')') + 2 :].split()
    return name, (int(rest[11]) + int(rest[12])) / CLK


def _descendants(pid: int) -> list:
    "The process ids under `pid` (children, their children, ...)."
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f'/proc/{p}/task').glob('*'):
            try:
                kids = [int(k) for k in (task / 'children').read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def cpu_snapshot() -> dict:
    "CPU seconds so far: this process's threads by native id, and each descendant process (the loader's workers)."
    me = os.getpid()
    threads = {}
    for task in Path(f'/proc/{me}/task').glob('*'):
        r = _ticks(task / 'stat')
        if r:
            threads[int(task.name)] = r[1]
    kids = {}
    for k in set(_descendants(me)):
        r = _ticks(Path(f'/proc/{k}/stat'))
        if r:
            kids[k] = r
    return {'t': time.time(), 'threads': threads, 'kids': kids}


def cpu_use(a: dict, b: dict, names: dict) -> dict:
    "Cores used between snapshots `a` and `b`: the main process (by thread), its descendants, the sum, and nproc."
    wall = b['t'] - a['t']
    if wall <= 0:
        return {}
    me = os.getpid()
    th = {tid: s - a['threads'].get(tid, 0.0) for tid, s in b['threads'].items()}
    kids = {k: s - (a['kids'][k][1] if k in a['kids'] else 0.0) for k, (_, s) in b['kids'].items()}
    by_name = {}
    for tid, s in th.items():
        n = 'MainThread' if tid == me else names.get(tid, 'native (not a Python thread)')
        by_name[n] = by_name.get(n, 0.0) + s / wall
    main, workers = sum(th.values()) / wall, sum(kids.values()) / wall
    return {
        'wall_s': wall,
        'main_process_cores': main,
        'main_thread_cores': th.get(me, 0.0) / wall,
        'main_threads_cores': dict(sorted(by_name.items(), key=lambda kv: -kv[1])),
        'children': len(kids),
        'children_cores': workers,
        'children_cores_max_one': max(kids.values(), default=0.0) / wall,
        'total_cores': main + workers,
        'nproc': os.cpu_count(),
        'usable_cpus': len(os.sched_getaffinity(0)),
    }


# ---------- the run: train.py's lines, the samplers, the profile ----------


class Measure(logging.Handler):
    """Keeps the rows of train.py's `Train:` lines, marks the measured span's start and end as they arrive, and samples
    (in a thread of its own, so train.py's thread does no extra work) the GPU's utilisation every 50 ms and the CPU
    times and the loader's counts every 0.25 s."""

    def __init__(self, last_epoch: int, skip: int, profile: Path | None, data: str):
        super().__init__()
        self.rows, self.legacy, self.last_epoch, self.skip, self.profile, self.data = (
            [],
            [],
            last_epoch,
            skip,
            profile,
            data,
        )
        self.start = self.end = None
        self.gpu, self.snaps, self.loaders, self.notes, self.names = [], [], [], [], {}
        self.stop, self.started, self.pyspy = threading.Event(), threading.Event(), None
        self.gil = False  # the profile: only the GIL's holder sampled (--profile-gil)
        self.thread = threading.Thread(target=self._sample, name='timm_script sampler', daemon=True)

    def emit(self, record):
        msg = record.getMessage()
        r = parse_step(msg)
        if not r:
            return
        now = time.time()
        self.rows.append((now, *r))
        self.legacy.append((now, *parse(msg)))
        epoch, step = r[0], r[1]
        if epoch == self.last_epoch and step >= self.skip - 1:
            if self.start is None:  # the end of step skip-1: the measured steps begin
                self.start = now
                self.started.set()
            self.end = now

    def train_loader(self):
        "The training loader train.py made (timmdata's), or None."
        return next((ld for training, ld in self.loaders if training), None)

    def _loader_snapshot(self):
        ld = self.train_loader()
        if ld is None:  # timm's loader (nothing counted), or not made yet
            return None
        from timmdata.core.stages import CountsTime

        return ld.stats().snapshot() if isinstance(ld, CountsTime) else None

    def _sample(self):
        import torch

        gpu = torch.cuda.is_available()
        if gpu:
            try:
                torch.cuda.utilization()
            except Exception as e:  # noqa: BLE001 (no pynvml, or NVML refuses: its errors are plain Exceptions)
                self.notes.append(f'no GPU utilisation: {type(e).__name__}: {e}')
                gpu = False
        tick = 0
        while not self.stop.wait(0.05):
            if gpu:
                self.gpu.append((time.time(), torch.cuda.utilization()))
            if tick % 5 == 0:
                self.names.update((t.native_id, t.name) for t in threading.enumerate() if t.native_id)
                self.snaps.append((cpu_snapshot(), self._loader_snapshot()))
                del self.snaps[:-400]  # the last 100 s: the span is the last epoch
            if self.started.is_set() and self.profile is not None:
                self.started.clear()
                self.pyspy = threading.Thread(target=self._pyspy, name='timm_script py-spy', daemon=True)
                self.pyspy.start()
            tick += 1

    def _pyspy(self):
        "py-spy's dump and record of this process, as the span starts; a note where it cannot."
        exe = shutil.which('py-spy')
        if exe is None:
            self.notes.append('py-spy: not on PATH, no profile taken')
            return
        self.profile.mkdir(parents=True, exist_ok=True)
        pid = str(os.getpid())
        prior = [r for r in self.rows if r[1] == self.last_epoch - 1]  # the epoch before: its step time and length
        step_s = statistics.median(r[4] for r in prior) if prior else 0.1
        steps_left = (prior[-1][3] if prior else 100) - self.skip
        seconds = int(max(2, min(8, step_s * steps_left)))  # the rest of the epoch: validation is not profiled
        base = self.profile / f'pyspy_{self.data}'
        record = [exe, 'record', '--pid', pid, '--nonblocking', '--rate', '200', '--duration', str(seconds)]
        if self.gil:  # only the samples of the thread holding the GIL, each thread apart (raw: tools/pyspy_top.py)
            record += ['--gil', '--threads', '--format', 'raw', '--output', str(base.with_suffix('.gil.txt'))]
        else:
            record += ['--format', 'speedscope', '--output', str(base.with_suffix('.speedscope.json'))]
        for cmd, out in (
            ([exe, 'dump', '--pid', pid, '--nonblocking'], base.with_suffix('.dump.txt')),
            (record, base.with_suffix('.record.log')),
        ):
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 20, check=False)
                out.write_text(p.stdout + p.stderr)
                self.notes.append(f'py-spy {cmd[1]}: exit {p.returncode}, {out.name}')
            except (OSError, subprocess.TimeoutExpired) as e:
                self.notes.append(f'py-spy {cmd[1]}: {type(e).__name__}: {e}')

    def report(self) -> dict:
        "The span's figures (see the module's docstring)."
        span = measured(self.rows, self.last_epoch, self.skip)
        if not span:  # the last epoch never came (cut short): the last epoch there is
            span = measured(self.rows, None, self.skip)
        out = steady(span)
        t0, t1 = (self.start, self.end) if self.start and self.end and self.end > self.start else (None, None)
        util = [u for t, u in self.gpu if t0 is not None and t0 <= t <= t1]
        out['gpu_busy'] = statistics.mean(util) if util else None
        out['gpu_samples'] = len(util)
        out['span_s'] = None if t0 is None else t1 - t0
        inside = [s for s in self.snaps if t0 is not None and t0 <= s[0]['t'] <= t1]
        out['cpu'] = out['loader_stats'] = None
        if len(inside) >= 2:
            (a, la), (b, lb) = inside[0], inside[-1]
            out['cpu'] = cpu_use(a, b, self.names)
            if la is not None and lb is not None:
                st = lb.since(la)
                n = max(st.images, 1)
                out['loader_stats'] = {
                    'images': st.images,
                    'batches': st.batches,
                    'wall_s': st.wall,
                    'seconds': st.t,
                    'ms_per_image': {k: v / n * 1e3 for k, v in st.t.items()},
                    'table': st.table(),
                }
        ld = self.train_loader()
        if ld is not None:
            from timmdata.core.stages import CountsTime
            from timmdata.engine.gpu_decode import DeviceDecodeStep
            from timmdata.engine.prefetch import PrefetchLoader

            if isinstance(ld, CountsTime):
                out['loader_stats_whole_run'] = ld.stats().table()
            if isinstance(ld, PrefetchLoader) and isinstance(ld.step, DeviceDecodeStep):
                out['device_decode'] = {'samples': ld.step.samples, 'cpu_fallbacks': ld.step.cpu_fallbacks}
        out['steps'] = [{'step': r[2], 'rate': r[5], 'step_s': r[4], 'data_s': r[6]} for r in span]
        out['notes'] = self.notes
        return out

    def legacy_report(self, steady: dict) -> dict:
        "The running-average figures of earlier reports (`throughput`), the GPU's beside them from the measured span."
        busy = steady.get('gpu_busy')
        return {
            **throughput(self.legacy),
            'gpu_util_mean': busy,
            'gpu_idle_fraction': None if busy is None else 1 - busy / 100,
        }


class SameBatch:
    "A training loader's first batch (on the device), handed out `len(loader)` times an epoch; the rest is the loader's."

    def __init__(self, loader):
        self._loader, self._batch = loader, None

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self):
        if self._batch is None:
            it = iter(self._loader)
            self._batch = next(it)
            del it  # its workers stop (or, persistent, wait): nothing is loaded after this
        for _ in range(len(self._loader)):
            yield self._batch

    def __getattr__(self, name: str):
        return getattr(self.__dict__['_loader'], name)


def _last_epoch(args: list) -> int:
    "train.py's last epoch from its arguments (`--epochs N`: epochs 0 to N-1; timm's default 300)."
    for i, a in enumerate(args):
        if a == '--epochs' and i + 1 < len(args):
            return int(args[i + 1]) - 1
        if a.startswith('--epochs='):
            return int(a.split('=', 1)[1]) - 1
    return 299


def run(
    data: str,
    report: Path,
    script: Path,
    args: list,
    skip: int = 10,
    profile: Path | None = None,
    gil: bool = False,
    switch: float | None = None,
) -> int:
    if data not in ('timm', 'timmdata', 'timmdata-device', 'same-batch'):
        sys.exit(f'timm_script: --data {data!r}: one of timm, timmdata, timmdata-device, same-batch')
    m = Measure(_last_epoch(args), skip, profile, data)
    m.gil = gil
    if switch is not None:  # how long a thread may hold the GIL while another waits for it (Python's default 5 ms)
        sys.setswitchinterval(switch)
    if data != 'timm':
        sys.path.insert(0, str(Path(__file__).parent))
        from run_timm_data_tests import install_shim

        install_shim()
        import torch

        import timmdata

        make = timmdata.create_loader
        if data == 'timmdata-device':
            where = 'cuda' if torch.cuda.is_available() else 'cpu'  # 'cpu': a rehearsal of the same path
            make = functools.partial(make, decode_device=where)

        @functools.wraps(timmdata.create_loader)
        def create_loader(dataset, *a, **kw):
            ld = make(dataset, *a, **kw)
            training = bool(kw.get('is_training', a[2] if len(a) > 2 else False))
            if data == 'same-batch' and training:
                ld = SameBatch(ld)
            m.loaders.append((training, ld))
            return ld

        timmdata.create_loader = create_loader  # train.py's `from timm.data import create_loader` finds this one
    logging.getLogger().addHandler(m)
    m.thread.start()
    # `timeout` sends SIGTERM: the report is still written (the finally below), the loader's workers end with us
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
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
        m.stop.set()
        m.thread.join(2)
        if m.pyspy is not None:  # its record outlives a short last epoch by a few seconds: its note and file wanted
            m.pyspy.join(20)
        st = m.report()
        out = {'data': data, 'script': script.name, 'args': args, 'exit': code, 'seconds': time.time() - t0,
               'log_lines': len(m.rows), 'skip_steps': skip, 'switch_interval': sys.getswitchinterval(),
               **m.legacy_report(st), 'steady': st}  # fmt: skip
        if report:
            report.parent.mkdir(parents=True, exist_ok=True)
            report.write_text(json.dumps(out, indent=1))
    return code


def summary(reports: list) -> str:
    "The running-average table of earlier reports (images/s on the last epoch's last line)."
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


def steady_summary(reports: list) -> str:
    "The steady-state table: the measured span's figures (`steady` in each report)."
    rs = [json.loads(Path(p).read_text()) for p in reports]
    st = {r['data']: r.get('steady') or {} for r in rs}
    base = (st.get('timm') or {}).get('img_s')

    def cell(v, fmt):
        return '' if v is None else format(v, fmt)

    rows = [
        f"{'loader':<16} {'exit':>4} {'images/s':>9} {'x timm':>7} {'data s/step':>11} {'data wait':>9} "
        f"{'GPU busy %':>10} {'main cores':>10} {'worker cores':>12}"
    ]
    for r in rs:
        s = st[r['data']]
        ips, cpu = s.get('img_s'), s.get('cpu') or {}
        rows.append(
            f"{r['data']:<16} {r['exit']:>4} {cell(ips, ',.0f'):>9} {cell(ips / base if ips and base else None, '.2f'):>7} "
            f"{cell(s.get('data_wait_s'), '.4f'):>11} {cell(s.get('data_wait_share'), '.1%'):>9} "
            f"{cell(s.get('gpu_busy'), '.0f'):>10} {cell(cpu.get('main_process_cores'), '.2f'):>10} "
            f"{cell(cpu.get('children_cores'), '.2f'):>12}"
        )
    rows.append(
        "images/s: the last epoch's images over its time after its first steps (train.py's lines); data: its wait for "
        'the loader; GPU busy: NVML over the same span; cores: CPU seconds per second from /proc'
    )
    return '\n'.join(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--data', default='timmdata', help='timm, timmdata, timmdata-device or same-batch')
    ap.add_argument('--report', type=Path, help='write the measurements here (JSON)')
    ap.add_argument('--skip-steps', type=int, default=10, help="the last epoch's steps left out of the span (warm-up)")
    ap.add_argument(
        '--profile', type=Path, help="py-spy's dump and record of the training process go here (if on PATH)"
    )
    ap.add_argument('--profile-gil', action='store_true', help="--profile samples only the GIL's holder, by thread")
    ap.add_argument('--switch-interval', type=float, help="sys.setswitchinterval(S) before the script (default 0.005)")
    ap.add_argument('--summary', nargs='+', help='print a table of these reports instead of running anything')
    ap.add_argument('--relog', type=Path, help="recompute --report's figures from train.py's saved log (its output)")
    ap.add_argument('script', nargs='?', type=Path, help="timm's train.py or validate.py")
    ap.add_argument('args', nargs=argparse.REMAINDER, help='its arguments, as its users give them')
    a = ap.parse_args(argv)
    if a.summary:
        steady_ok = all('steady' in json.loads(Path(p).read_text()) for p in a.summary)
        print(steady_summary(a.summary) if steady_ok else summary(a.summary))
        return 0
    if a.relog:
        lines = a.relog.read_text().splitlines()
        rows = [(0.0, *r) for r in map(parse, lines) if r]
        rep = json.loads(a.report.read_text())
        rep.update(throughput(rows), log_lines=len(rows))
        if 'steady' in rep:  # the span's step figures again (the GPU's and the CPU's came from the run: kept)
            steps = [(0.0, *r) for r in map(parse_step, lines) if r]
            span = measured(steps, _last_epoch(rep.get('args', [])), a.skip_steps) or measured(
                steps, None, a.skip_steps
            )
            rep['steady'].update(steady(span))
        a.report.write_text(json.dumps(rep, indent=1))
        return 0
    if a.script is None or not a.script.is_file():
        ap.error(f"script {a.script}: not a file (bash tools/gpu_kit.sh puts timm's train.py in .whl/timm_scripts/)")
    return run(a.data, a.report, a.script, a.args, a.skip_steps, a.profile, a.profile_gil, a.switch_interval)


if __name__ == '__main__':
    sys.exit(main())
