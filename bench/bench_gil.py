"""Does the native JPEG decoder release the GIL? Two threads decoding crops in parallel against one, in one run.

    python bench/bench_gil.py [--root data/sample/train] [--old /path/to/old/_native.so] [--rounds 3] [--n 200]

Each thread decodes the same list of JPEG crops (a random 60% box of each image, as a RandomResizedCrop draws) with
`_native.decode_crop`. With one thread the rate is the single-core decode rate; with two threads it is about twice
that when the decode runs without the GIL (on a machine with at least 2 free cores), and about the same as one thread
when it holds the GIL. The machine may be busy with other work: the "cores busy" column (this process's CPU seconds
per wall second while the two threads run) shows the release whatever the load: it cannot pass 1.0 while the GIL
serialises the decodes. And a load-independent check: while one thread decodes a 4000x4000 JPEG, the main thread runs
a Python loop and records its longest pause; holding the GIL, the decode stops it for a whole decode (ratio ~1);
released, it pauses only for the interpreter's switch interval and the OS scheduler (ratio well below 1). `--old` loads a second build of the extension (e.g. a copy of the .so made before the GIL
release) and measures it in the same run, alternating round by round. Prints the medians over the rounds of img/s
and the ratio two threads / one thread per build. Numbers on a shared machine are noisy: compare builds run side by
side here, not across runs."""
import argparse, importlib.util, random, statistics, threading, time
from pathlib import Path

def load_build(path):
    "The extension module at `path` (another copy of timmdata/_native*.so), loaded beside the installed one."
    spec = importlib.util.spec_from_file_location('_native', path)  # PyInit__native: the module's own name
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod

def crops(native, files, seed=0):
    "(bytes, top, left, height, width) per file: the JPEG and a box covering 60% of its area."
    rng, out = random.Random(seed), []
    for f in files:
        data = Path(f).read_bytes()
        h, w = native.header(data)[:2]
        ch, cw = int(h * 0.77), int(w * 0.77)
        out.append((data, rng.randrange(h - ch + 1), rng.randrange(w - cw + 1), ch, cw))
    return out

def rate(native, work, threads):
    "(images/s, cores busy: this process's CPU seconds per second) of `threads` threads each decoding all of `work`."
    def run():
        for data, t, l, h, w in work: native.decode_crop(data, t, l, h, w)
    ts = [threading.Thread(target=run) for _ in range(threads)]
    t0, c0 = time.perf_counter(), time.process_time()
    for t in ts: t.start()
    for t in ts: t.join()
    dt = time.perf_counter() - t0
    return threads * len(work) / dt, (time.process_time() - c0) / dt

def longest_stall(native, data, h, w, repeats=3):
    "(seconds of one whole decode of `data`, the longest the main thread waited for the GIL while another thread decoded it)."
    t0 = time.perf_counter(); native.decode_crop(data, 0, 0, h, w); one = time.perf_counter() - t0
    done, worst = threading.Event(), 0.0
    def run():
        for _ in range(repeats): native.decode_crop(data, 0, 0, h, w)
        done.set()
    t = threading.Thread(target=run); t.start()
    last = time.perf_counter()
    while not done.is_set():  # a Python loop: it runs only while this thread holds the GIL
        now = time.perf_counter(); worst = max(worst, now - last); last = now
    t.join()
    return one, worst

def big_jpeg(size=4000):
    "A size x size JPEG of smooth noise (a decode of tens of milliseconds), made here."
    import io, numpy as np
    from PIL import Image
    a = np.random.default_rng(0).integers(0, 256, (size // 16, size // 16, 3), dtype=np.uint8)
    b = io.BytesIO(); Image.fromarray(a).resize((size, size), Image.BILINEAR).save(b, 'JPEG', quality=90)
    return b.getvalue()

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root', help='image folder (default: the sample dataset, made when missing)')
    p.add_argument('--old', help='path of another build of the extension to compare (e.g. before the GIL release)')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--n', type=int, default=200, help='images per thread per round')
    a = p.parse_args(argv)
    from timmdata.pixels import decode
    from timmdata.tools.bench import bench_root
    if decode.native is None: raise SystemExit(f'the native decoder is not active ({decode.NATIVE_STATUS})')
    files = sorted(str(f) for f in Path(bench_root(a.root)).rglob('*') if f.suffix.lower() in ('.jpg', '.jpeg'))[:a.n]
    builds = {'new (this build)': decode.native}
    if a.old: builds['old (' + Path(a.old).name + ')'] = load_build(a.old)
    work = crops(decode.native, files)
    res = {k: {1: [], 2: []} for k in builds}
    for k, nat in builds.items(): rate(nat, work[:20], 2)  # warm-up: page in the files and the code
    for _ in range(a.rounds):
        for k, nat in builds.items():
            for th in (1, 2): res[k][th].append(rate(nat, work, th))
    import os
    print(f'{len(work)} JPEG crops per thread, {a.rounds} rounds, {os.cpu_count()} CPUs (medians; a shared machine is noisy)')
    for k, r in res.items():
        one, two = statistics.median(x[0] for x in r[1]), statistics.median(x[0] for x in r[2])
        busy = statistics.median(x[1] for x in r[2])
        print(f'{k:24s} 1 thread {one:6.0f} img/s   2 threads {two:6.0f} img/s   ratio {two / one:.2f}x   '
              f'cores busy with 2 threads {busy:.2f}')
    big = big_jpeg()
    for k, nat in builds.items():
        one, worst = longest_stall(nat, big, 4000, 4000)
        print(f'{k:24s} one 4000x4000 decode {one * 1e3:5.0f} ms; the main thread, running Python beside the decoding '
              f'thread, waited at most {worst * 1e3:5.0f} ms for the GIL ({worst / one:.2f} of a decode)')

if __name__ == '__main__': main()
