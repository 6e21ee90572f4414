"""py-spy's raw stacks (`py-spy record --format raw --threads`) summed: the samples per thread, then per thread the
functions with the most samples inclusive (anywhere on the stack) and self (the innermost frame). Used on the GPU kit's
`hostprofile` step: where the device-decode loader's host time goes.
    python tools/pyspy_top.py out/gpu/.../hostprofile_train.txt [--top 25] [--thread NAME]"""
import argparse
import collections
import re


def read(path):
    "(thread, frames outermost first, samples) per line of a raw profile."
    for line in open(path, encoding='utf-8', errors='replace'):
        line = line.rstrip('\n')
        if not line:
            continue
        stack, _, n = line.rpartition(' ')
        frames = stack.split(';')
        head = []  # 'process PID:"command"' (with --subprocesses), then 'thread (ID): NAME' (with --threads)
        while frames and re.match(r'(process|thread) ', frames[0]):
            head.append(frames.pop(0))
        yield ' / '.join(head), frames, int(n)


def short(frame: str) -> str:
    "'fn (path/to/file.py:12)' -> 'fn (file.py)': a function's lines summed."
    m = re.match(r'(.*) \((.*?):\d+\)$', frame)
    return f'{m.group(1)} ({m.group(2).rsplit("/", 1)[-1]})' if m else frame


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('path')
    ap.add_argument('--top', type=int, default=20)
    ap.add_argument('--thread', help='only threads whose name contains this')
    a = ap.parse_args()
    per_thread, incl, self_ = collections.Counter(), collections.defaultdict(collections.Counter), collections.defaultdict(collections.Counter)
    for thread, frames, n in read(a.path):
        t = re.sub(r'process \d+:"(.*?)"', lambda m: m.group(1)[-60:], thread)  # pids and thread ids differ between
        t = re.sub(r'thread \(\w+\):?', '', t)  # workers: a name's samples are summed
        if a.thread and a.thread not in t:
            continue
        per_thread[t] += n
        for f in {short(f) for f in frames}:
            incl[t][f] += n
        if frames:
            self_[t][short(frames[-1])] += n
    total = sum(per_thread.values())
    print(f'{a.path}: {total} samples')
    for t, n in per_thread.most_common():
        print(f'\n== {t}: {n} samples ({n / max(total, 1):.0%})')
        if n < total * 0.02:
            continue
        print('  inclusive:')
        for f, k in incl[t].most_common(a.top):
            print(f'    {k / n:6.1%}  {f}')
        print('  self:')
        for f, k in self_[t].most_common(a.top // 2):
            print(f'    {k / n:6.1%}  {f}')


if __name__ == '__main__':
    main()
