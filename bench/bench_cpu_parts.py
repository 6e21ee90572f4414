"""Issue 60: where timmdata's CPU goes per image, on the generated and the photographic set, in one run.

Two measurements per data set:

1. **The whole loader, by part.** For each pipeline (train, eval) a child process builds timmdata's loader exactly as
   `bench_peers.py` does (create_dataset + create_loader defaults, 2 workers, batch 64, device cpu), runs a warm-up
   epoch, then `--epochs` timed epochs under `perf record` (cpu-clock sampling of the child and its workers, switched on
   only for the timed epochs through perf's control FIFO). The samples are grouped by where they fall (libjpeg-turbo,
   timmdata's resize and normalise kernels, Python's interpreter and its garbage collector, torch, PIL, memory copies,
   the kernel) and turned into CPU ms per image with the process tree's CPU time over the same epochs.
2. **Inside the JPEG decoder.** `bench/jpeg_parts.c` (built here with `cc -O2 -ljpeg`) decodes every JPEG of the set
   whole, asking libjpeg-turbo to stop at each step: entropy (Huffman) decoding only, + IDCT, + fancy upsampling,
   + colour conversion (= the full decode), and the full decode with the scaled IDCT at 1/2. Best of 3 per file, mean
   per image. (The distribution's libjpeg has no symbols, so perf alone cannot split the decoder.)

    python bench/bench_cpu_parts.py                      # both sets, train and eval (~4 min on 2 cores)
    python bench/bench_cpu_parts.py --sets photos --pipelines train

Needs `perf` (Debian: `apt-get install linux-perf`) and a C compiler with libjpeg's header (`make jpeg-headers`); without
perf, part 1 is skipped with the reason. Figures are CPU time, so a busy machine changes them less than it changes img/s.
"""
import argparse, collections, json, os, re, subprocess, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_peers import build, make_set, tree_cpu, reaped_cpu  # noqa: E402  (the peers bench's loader, sets and CPU accounting)

# (where a sample falls) -> part; the first rule that matches wins. dso and symbol as perf reports them.
PARTS = [
    ('JPEG decode (libjpeg-turbo)', lambda d, s: 'libjpeg' in d or 'libturbojpeg' in d),
    ('resize (timmdata C)', lambda d, s: '_native' in d and (s.startswith('rs_') or 'resample' in s or 'resize' in s)),
    ('other timmdata C (decode glue, normalise)', lambda d, s: '_native' in d),
    ('PIL', lambda d, s: '_imaging' in d or 'libpng' in d or 'libz' in d),
    ('Python garbage collector', lambda d, s: 'python' in d and (s.startswith(('gc_', 'visit_', 'subtract_refs', 'update_refs',
                                                                                 'move_unreachable', 'deduce_unreachable')))),
    ('Python interpreter', lambda d, s: 'python' in d),
    ('torch', lambda d, s: 'torch' in d or 'libc10' in d or 'libgomp' in d or 'mkl' in d),
    ('memory copies (libc)', lambda d, s: 'libc' in d and ('memcpy' in s or 'memmove' in s or 'memset' in s)),
    ('malloc/free (libc)', lambda d, s: 'libc' in d and ('malloc' in s or 'free' in s or 'int_' in s)),
    ('kernel (reads, page faults, pipes, scheduling)', lambda d, s: 'kernel' in d),
]


def part_of(dso: str, sym: str) -> str:
    for name, rule in PARTS:
        if rule(dso, sym): return name
    return 'other'


def child(a):
    "Runs in the child: builds the loader, warm-up epoch, then enables perf for the timed epochs; prints RESULT json."
    import torch  # noqa: F401
    a.batch_size = 64
    ld = build('timmdata', a, a.pipeline == 'train')()  # exactly the peers benchmark's timmdata loader
    import psutil
    me = psutil.Process()
    for _ in ld: pass  # warm-up: workers start, page cache fills
    ctl = open(a.ctl, 'w') if a.ctl else None
    if ctl: ctl.write('enable\n'); ctl.flush()
    before, r0, n, t0 = tree_cpu(me), reaped_cpu(), 0, time.perf_counter()
    for e in range(a.epochs):
        if hasattr(ld, 'set_epoch'): ld.set_epoch(e + 1)
        for x, y in ld: n += len(y)
    after, r1 = tree_cpu(me), reaped_cpu()
    if ctl: ctl.write('disable\n'); ctl.flush()
    cpu = sum(v - before.get(p, 0.0) for p, v in after.items()) + (r1 - r0)
    print('RESULT ' + json.dumps(dict(images=n, cpu_ms=1e3 * cpu / max(n, 1), wall_s=time.perf_counter() - t0)), flush=True)


def profile(a, data: Path, pipe: str, tmp: Path):
    "Part 1 for one pipeline: (CPU ms/img, {part: share}) or (CPU ms/img, reason perf was not used)."
    cmd = [sys.executable, __file__, '--child', '--pipeline', pipe, '--data', str(data), '--workers', str(a.workers),
           '--epochs', str(a.epochs)]
    perf = subprocess.run(['which', 'perf'], capture_output=True, text=True).stdout.strip()
    if not perf:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        return _result(p), 'perf not found (apt-get install linux-perf): no breakdown'
    ctl = tmp / f'ctl_{data.parent.name}_{pipe}'
    os.mkfifo(ctl)
    out = tmp / f'{data.parent.name}_{pipe}.data'
    # -D -1: start disabled; the child enables it after its warm-up epoch. The fifo is opened by perf for reading
    # and by the child for writing.
    p = subprocess.run([perf, 'record', '-q', '-e', 'cpu-clock', '-F', str(a.freq), '-D', '-1', f'--control=fifo:{ctl}',
                        '-o', str(out), '--'] + cmd + ['--ctl', str(ctl)], capture_output=True, text=True, timeout=1800)
    res = _result(p)
    rep = subprocess.run([perf, 'report', '-i', str(out), '--no-children', '--sort', 'dso,sym', '--stdio', '-q',
                          '--percent-limit', '0', '-F', 'overhead,dso,sym', '-t', '\t'],
                         capture_output=True, text=True, timeout=600)
    shares = collections.Counter()
    for line in rep.stdout.splitlines():
        f = [x.strip() for x in line.split('\t')]
        if len(f) < 3 or not f[0].endswith('%'): continue
        sym = re.sub(r'^\[[.k]\]\s*', '', f[2])
        shares[part_of(f[1], sym)] += float(f[0][:-1]) / 100
    total = sum(shares.values()) or 1
    return res, {k: v / total for k, v in shares.items()}


def _result(p) -> dict:
    got = [l for l in p.stdout.splitlines() if l.startswith('RESULT ')]
    if not got: raise RuntimeError('the child failed: ' + (p.stderr.strip().splitlines() or ['?'])[-1][:300])
    return json.loads(got[0][7:])


def decoder_parts(data: Path, tmp: Path, reps: int = 3) -> dict:
    "Part 2: mean ms per JPEG for each step (see the module's docstring), over the set's JPEG files."
    exe = tmp / 'jpeg_parts'
    b = subprocess.run(['cc', '-O2', '-o', str(exe), str(HERE / 'jpeg_parts.c'), '-ljpeg'], capture_output=True, text=True)
    if b.returncode: return {'error': 'cc failed: ' + (b.stderr.strip().splitlines() or ['?'])[-1][:200]}
    files = sorted(str(p) for p in data.rglob('*') if p.is_file())
    rows = []
    for i in range(0, len(files), 200):
        out = subprocess.run([str(exe), str(reps)] + files[i:i + 200], capture_output=True, text=True, timeout=600).stdout
        rows += [l.split('\t')[1:] for l in out.splitlines() if '\tskip' not in l]
    rows = [[float(x) for x in r] for r in rows if len(r) == 5 and all(float(x) >= 0 for x in r)]
    if not rows: return {'error': 'no JPEG decoded'}
    m = [1e3 * sum(r[k] for r in rows) / len(rows) for k in range(5)]
    return dict(files=len(rows), entropy=m[0], idct=m[1] - m[0], fancy_upsampling=m[2] - m[1], colour=m[3] - m[2],
                full=m[3], half_scale=m[4])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--sets', default='generated,photos', help='comma-separated: generated, photos')
    ap.add_argument('--pipelines', default='train,eval')
    ap.add_argument('--images', type=int, default=1500)
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--epochs', type=int, default=2, help='timed epochs after one warm-up epoch')
    ap.add_argument('--freq', type=int, default=999, help="perf's samples per second per CPU")
    ap.add_argument('--out', default=None, help='write the table and a .json here')
    ap.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    ap.add_argument('--pipeline', default='train', help=argparse.SUPPRESS)
    ap.add_argument('--data', default=None, help=argparse.SUPPRESS)
    ap.add_argument('--ctl', default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child: return child(a)
    sets = [s for s in a.sets.split(',') if s]
    if any(s not in ('generated', 'photos') for s in sets): ap.error(f'--sets: choose from generated, photos; got {a.sets!r}')
    results, lines = {}, []
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for s in sets:
            data = make_set(s, a.images)
            dec = decoder_parts(data, tmp)
            results[s] = dict(decoder=dec)
            for pipe in [p for p in a.pipelines.split(',') if p]:
                res, shares = profile(a, data, pipe, tmp)
                results[s][pipe] = dict(res, shares=shares)
                print(f'{s} {pipe}: {res["cpu_ms"]:.2f} CPU ms/img', flush=True)
    parts = [n for n, _ in PARTS] + ['other']
    cols = [(s, p) for s in results for p in results[s] if p != 'decoder']
    lines.append('| part | ' + ' | '.join(f'{s} {p}' for s, p in cols) + ' |')
    lines.append('|---|' + '---|' * len(cols))
    for part in parts:
        cells = []
        for s, p in cols:
            r = results[s][p]
            sh = r['shares'].get(part, 0.0) if isinstance(r['shares'], dict) else None
            cells.append('' if sh is None else f'{sh * r["cpu_ms"]:.3f} ({100 * sh:.0f}%)')
        lines.append(f'| {part} | ' + ' | '.join(cells) + ' |')
    lines.append('| **all (CPU ms/img, process tree)** | ' + ' | '.join(f'**{results[s][p]["cpu_ms"]:.3f}**' for s, p in cols) + ' |')
    lines.append('')
    lines.append('inside the decoder, a whole-image decode (ms/img, mean over the set\'s JPEGs, best of 3):')
    lines.append('| set | files | entropy | IDCT | fancy upsampling | colour | full decode | full at 1/2 (scaled IDCT) |')
    lines.append('|---|---|---|---|---|---|---|---|')
    for s in results:
        d = results[s]['decoder']
        if 'error' in d: lines.append(f'| {s} | {d["error"]} |'); continue
        lines.append(f'| {s} | {d["files"]} | {d["entropy"]:.3f} | {d["idct"]:.3f} | {d["fancy_upsampling"]:.3f} | '
                     f'{d["colour"]:.3f} | {d["full"]:.3f} | {d["half_scale"]:.3f} |')
    text = '\n'.join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(f'bench_cpu_parts.py {" ".join(argv or sys.argv[1:])}, {time.strftime("%H:%M UTC", time.gmtime())}, '
                               f'{os.cpu_count()} cores (shared)\n\n' + text + '\n')
        Path(a.out).with_suffix('.json').write_text(json.dumps(results, indent=1))


if __name__ == '__main__':
    main()
