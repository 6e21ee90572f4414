"""First writes to fresh memory: 64 MB written into a new mapping, 8 times, with and without MADV_HUGEPAGE (transparent
huge pages are "madvise" on this VM; AnonHugePages in /proc/meminfo stayed 0, so both rows are 4 KB pages).

    python bench/results/thread_streams_2026-11-27c/fresh_writes.py"""
import mmap, time, sys, ctypes
import numpy as np
N = 64 << 20  # 64 MB per trial
def trial(huge):
    m = mmap.mmap(-1, N + (2 << 20))
    a = np.frombuffer(m, np.uint8)
    off = (-a.ctypes.data) % (2 << 20)  # 2 MB aligned
    if huge:
        m.madvise(mmap.MADV_HUGEPAGE, off, N)
    b = a[off:off + N]
    t0 = time.perf_counter(); b.fill(1); t = time.perf_counter() - t0
    del a, b; m.close()
    return t
res = {0: [], 1: []}
for i in range(8):
    for h in (0, 1):
        res[h].append(trial(h))
for h in (0, 1):
    print('huge' if h else '4K  ', ' '.join(f'{1e3*x:.0f}' for x in res[h]), 'ms per 64 MB')
