"""First writes to a fresh 38.5 MB float buffer (a batch of 64 at 3x224x224): one thread writing all of it against two
threads writing a half each at once, fresh memory each time, 4 rounds.

    python bench/results/thread_streams_2026-11-28g/fault_halves.py"""
import threading, time
import torch

n = 64 * 3 * 224 * 224
for _ in range(4):
    x = torch.empty(n, dtype=torch.float32)
    t = time.perf_counter()
    x.fill_(1)
    one = 1e3 * (time.perf_counter() - t)
    del x
    x = torch.empty(n, dtype=torch.float32)
    th = threading.Thread(target=lambda: x[n // 2 :].fill_(1))
    t = time.perf_counter()
    th.start()
    x[: n // 2].fill_(1)
    th.join()
    two = 1e3 * (time.perf_counter() - t)
    del x
    print(f'one thread {one:.1f} ms; two threads at once {two:.1f} ms')
