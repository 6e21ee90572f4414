"""The GIL's share of a loader's wall time, from a py-spy profile taken with --gil (only the thread holding the GIL is
sampled) of one contender of bench/bench_thread_streams.py:

    py-spy record --gil --threads -r 250 --nonblocking -f raw -o PROFILE.txt -- \\
        .venv/bin/python bench/bench_thread_streams.py --one DATA SOURCE thread STEP --epochs 8 > RUN.json
    python bench/results/threads_2026-11-26/gil_share.py PROFILE.txt RUN.json

Counted: the samples of the loader threads (named timmdata-*), and of the training thread while it is in the loop
(create_loader to the last batch: the lines of `one` between FIRST and LAST, found in the bench's source), over
250 samples/s x the loop's wall time (loop_s in RUN.json). Printed: the share per thread group and the functions that
held the GIL most (the innermost frame)."""
import collections, json, re, sys
from pathlib import Path

RATE = 250
src = (Path(__file__).resolve().parents[2] / 'bench_thread_streams.py').read_text().splitlines()
FIRST = next(i for i, l in enumerate(src, 1) if l.strip().startswith('ld = create_loader('))
LAST = next(i for i, l in enumerate(src, 1) if l.strip().startswith('steady_s, loop_s ='))
prof, run = sys.argv[1], json.loads(Path(sys.argv[2]).read_text().strip().splitlines()[-1])
by_who, by_fn = collections.Counter(), collections.Counter()
for line in open(prof):
    stack, _, n = line.rstrip().rpartition(' ')
    if not n.isdigit():
        continue
    frames = stack.split(';')
    name = frames[0].split(': ', 1)[1] if ': ' in frames[0] else frames[0]
    if name.startswith('timmdata'):
        who = 'loader threads'
    else:
        lines = [int(m) for m in re.findall(r'one \(bench_thread_streams\.py:(\d+)\)', stack)]
        if not lines or not FIRST <= lines[0] < LAST:
            continue  # the training thread outside the loop (imports, the data set's construction)
        who = 'training thread'
    leaf = frames[-1]
    m = re.match(r'(.*?) \((?:.*/)?([^/:]*)', leaf)
    by_who[who] += int(n)
    by_fn[(who, f'{m.group(1)} ({m.group(2)})' if m else leaf)] += int(n)
ticks = RATE * run['loop_s']
print(
    f'{run["ips"]:.0f} img/s; the GIL held {sum(by_who.values()) / ticks:.0%} of the loop\'s wall time '
    f'({run["loop_s"]:.2f} s): ' + ', '.join(f'{k} {v / ticks:.0%}' for k, v in by_who.most_common())
)
for (who, fn), v in by_fn.most_common(6):
    print(f'  {who:15s} {fn:60s} {v / ticks:6.1%}')
