"""Where loader threads and worker processes wait for the GIL over a stream: a scheduler trace of the steady epochs,
each thread's off-CPU time split into waits inside CPython's `take_gil` and the rest, and the cores left idle.

    python bench/gil_waits.py [--modes thread,process] [--step none] [--epochs 12] [--window 4] [--images 640]
        [--data DIR] [--keep DIR]

For each mode, one run of `bench/bench_thread_streams.py --one DATA stream MODE STEP --epochs N` (its loader: 2 workers,
batch 64, 224 px, `device='cpu'`, the stream of --images generated photos in shards, made here unless --data names a
folder that script wrote) under `perf record -a -e sched:sched_switch --call-graph dwarf`, then `perf script`. Counted
over the last --window seconds of the run, before its last 0.3 s (the steady epochs: the run's start and imports
fall outside): a switch out of a thread of the Python processes (the training process, its threads and its worker
processes) whose stack holds `take_gil` is a GIL wait, its length the time until that thread runs again; the cores'
idle time is the time the idle task ran. Needs `perf` with tracepoint access (root, or `kernel.perf_event_paranoid`
at most 1) and a CPython with symbols (pyenv's builds have them). The DWARF unwinding makes `perf script` slow: about
6 to 8 minutes a mode on 2 cores; the trace itself slows the run, so compare the modes with each other, not with
`bench_thread_streams.py`'s figures. --keep DIR keeps each mode's trace text (MODE.txt) for another look with
`python bench/gil_waits.py --read DIR/MODE.txt --window 4`."""

import argparse, collections, re, shutil, subprocess, sys, tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAD = re.compile(r'^\s*(\S.*?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)$')
SWITCH = re.compile(r'prev_pid=(\d+).*prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)')


def events(path: Path) -> list:
    "The trace's sched_switch events: (time, cpu, the fields after the event's name, the stack's symbols)."
    out, cur = [], None
    with open(path, errors='replace') as fh:
        for line in fh:
            if not line.startswith('\t') and line.strip():
                m, cur = HEAD.match(line), None
                if m and m.group(6) == 'sched:sched_switch':
                    cur = (float(m.group(5)), int(m.group(4)), m.group(7), [])
                    out.append(cur)
            elif cur is not None and line.strip():
                parts = line.split(None, 1)
                cur[3].append(parts[1].strip() if len(parts) > 1 else '?')
    return out


def waits(path: Path, window: float) -> dict:
    "GIL waits (seconds, count), the other off-CPU time by state, and the cores idle, over the trace's steady window."
    evs = events(path)
    py = {int(SWITCH.search(r).group(1)) for _, _, r, _ in evs if re.search(r'prev_comm=(python|pt_)', r)}
    if not py:
        raise SystemExit(f'{path}: no switch of a Python thread in the trace (was it recorded with -a?)')
    last = max(t for t, _, r, _ in evs if int(SWITCH.search(r).group(1)) in py)
    t0, t1 = last - 0.3 - window, last - 0.3
    out, idle_from, idle = {}, {}, 0.0
    gil, n, other = 0.0, 0, collections.Counter()
    for t, cpu, r, stack in evs:
        m = SWITCH.search(r)
        prev, state, nxt = int(m.group(1)), m.group(2), int(m.group(4))
        if cpu in idle_from:  # the idle task ran on this cpu until now
            a, b = max(idle_from.pop(cpu), t0), min(t, t1)
            idle += max(0.0, b - a)
        if nxt == 0:
            idle_from[cpu] = t
        if prev in py:
            out[prev] = (t, state, any('take_gil' in s for s in stack))
        if nxt in py and nxt in out:
            ts, st, in_gil = out.pop(nxt)
            if t0 <= ts <= t1:
                if in_gil:
                    gil, n = gil + t - ts, n + 1
                else:
                    other[st] += t - ts
    return {'gil_s': gil, 'gil_waits': n, 'other_s': dict(other), 'idle_cores': idle / window}


def record(data: Path, mode: str, step: str, epochs: int, keep: Path) -> Path:
    "One traced run of the contender; its `perf script` text."
    trace, text = keep / f'{mode}.data', keep / f'{mode}.txt'
    one = [sys.executable, str(REPO / 'bench' / 'bench_thread_streams.py'), '--one', str(data), 'stream', mode, step]
    rec = subprocess.run(
        ['perf', 'record', '-q', '-a', '-e', 'sched:sched_switch', '--call-graph', 'dwarf,16384', '-o', str(trace), '--',
         *one, '--epochs', str(epochs)], stdout=subprocess.DEVNULL,
    )  # fmt: skip
    if rec.returncode:
        raise SystemExit(
            f'gil_waits: perf record failed (exit {rec.returncode}); it needs root or kernel.perf_event_paranoid <= 1 '
            f'for the sched:sched_switch tracepoint'
        )
    with open(text, 'w') as fh:
        fields = 'comm,pid,tid,cpu,time,event,trace,ip,sym'
        subprocess.run(['perf', 'script', '-i', str(trace), '-F', fields], check=True, stdout=fh, stderr=subprocess.DEVNULL)
    trace.unlink()
    return text


def show(mode: str, w: dict, window: float):
    other = ', '.join(f'{k} {v:.3f} s' for k, v in sorted(w['other_s'].items()))
    print(f'{mode:8}: GIL waits {w["gil_s"]:.3f} s ({w["gil_waits"]} waits) in the {window:.0f} s; other '
          f'off-CPU time by state: {other}; cores idle {w["idle_cores"]:.2f}')


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--modes', default='thread,process')
    p.add_argument('--step', default='none', help="the model step: none, sleep:MS, cpu (as bench_thread_streams.py)")
    p.add_argument('--epochs', type=int, default=12, help='epochs of the traced run (the first a warm-up)')
    p.add_argument('--window', type=float, default=4.0, help='seconds counted, at the end of the run')
    p.add_argument('--images', type=int, default=640)
    p.add_argument('--data', type=Path, help='a folder bench_thread_streams.py wrote (else one is made)')
    p.add_argument('--keep', type=Path, help="a folder for the traces' text (else a scratch folder, removed)")
    p.add_argument('--read', type=Path, help="only read a kept trace text (MODE.txt) and print its figures")
    a = p.parse_args()
    if a.read:
        if not a.read.is_file():
            raise SystemExit(f'gil_waits: no trace text at {a.read} (--read takes a MODE.txt that --keep wrote)')
        return show(a.read.stem, waits(a.read, a.window), a.window)
    if shutil.which('perf') is None:
        raise SystemExit('gil_waits: needs perf (Debian/Ubuntu: apt-get install linux-perf, or linux-tools-$(uname -r))')
    sys.path.insert(0, str(REPO / 'bench'))
    from bench_thread_streams import make_data

    data = a.data or make_data(argparse.Namespace(images=a.images, no_index=False))
    with tempfile.TemporaryDirectory(prefix='gil_waits_') as tmp:
        keep = a.keep or Path(tmp)
        keep.mkdir(parents=True, exist_ok=True)
        print(f'stream of {a.images} photos, 2 workers, batch 64, step {a.step}; the last {a.window:.0f} s of '
              f'{a.epochs} epochs (before the last 0.3 s), each mode traced in its own run')
        for mode in a.modes.split(','):
            show(mode, waits(record(data, mode, a.step, a.epochs, keep), a.window), a.window)


if __name__ == '__main__':
    main()
