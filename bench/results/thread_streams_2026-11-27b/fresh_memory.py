"""The first writes to fresh memory, then the same again: 400 MB written in a thread (which releases the GIL: the main
thread counts while it runs), twice. On the shared VM the first pass costs 2 to 3 ms a MB, the second a tenth of that.

    python bench/results/thread_streams_2026-11-27b/fresh_memory.py"""
import threading, time
import numpy as np


def write_once() -> float:
    a = np.empty(400_000_000, np.uint8)
    t = threading.Thread(target=a.fill, args=(0,))
    t0 = time.perf_counter()
    t.start()
    t.join()
    return time.perf_counter() - t0


print(f'400 MB written: {write_once():.3f} s the first time, {write_once():.3f} s right after')
