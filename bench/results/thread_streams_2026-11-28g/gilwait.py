"""GIL waits in a sched_switch trace with DWARF stacks: the off-CPU time of the Python processes' threads that switched
out inside take_gil, over the last WINDOW seconds before the last event (the steady epochs), and the cores' idle there."""
import re, sys, collections
fn, window = sys.argv[1], float(sys.argv[2])
hdr = re.compile(r'^\s*(\S.*?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)$')
ev, cur = [], None
for line in open(fn):
    if not line.startswith('\t') and line.strip():
        m = hdr.match(line)
        cur = None
        if m:
            comm, pid, tid, cpu, t, name, rest = m.groups()
            cur = dict(comm=comm, pid=int(pid), tid=int(tid), cpu=int(cpu), t=float(t), rest=rest, stack=[])
            ev.append(cur)
    elif cur is not None and line.strip():
        p = line.split(None, 1)
        cur['stack'].append(p[1].strip() if len(p) > 1 else '?')
py = {e['tid'] for e in ev if 'prev_comm=python' in e['rest'] or 'prev_comm=pt_' in e['rest']}
tend = max(e['t'] for e in ev if e['tid'] in py)
t0, t1 = tend - window - 0.3, tend - 0.3
out, gil, other, n = {}, 0.0, collections.Counter(), 0
idle, start = collections.Counter(), {}
for e in ev:
    m = re.search(r'prev_pid=(\d+).*prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)', e['rest'])
    if not m:
        continue
    pp, st, np_ = int(m.group(1)), m.group(2), int(m.group(4))
    c, t = e['cpu'], e['t']
    if c in start:
        a, b = max(start.pop(c), t0), min(t, t1)
        if b > a:
            idle[c] += b - a
    if np_ == 0:
        start[c] = t
    if pp in py:
        out[pp] = (t, st, any('take_gil' in s for s in e['stack']))
    if np_ in py and np_ in out:
        ts, st, g = out.pop(np_)
        if t0 <= ts <= t1:
            if g:
                gil += t - ts; n += 1
            else:
                other[st] += t - ts
print(f'{fn}: {window:.0f} s window; GIL waits {gil:.3f} s ({n}), other off-CPU by state',
      {k: round(v, 3) for k, v in other.items()}, f'; cores idle {sum(idle.values()) / window:.3f}')
