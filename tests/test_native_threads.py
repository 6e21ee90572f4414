"""timmdata._native from many threads at once: every function the loader calls (the crop-aware decode, the resamplers
fed from a JPEG or from pixels, one call per batch, the fused batch step) run from 8 threads started together give
exactly what one thread gives, and libjpeg's warnings are all counted. The module declares that it runs without the
GIL (csrc/native.c: Py_mod_gil), so on a free-threaded build (python3.13t/3.14t) these calls truly overlap; under the
GIL they overlap where the extension releases it. Quick (a few seconds): part of the default run."""
import pytest
import random, sys, threading
from concurrent.futures import ThreadPoolExecutor
import numpy as np, pytest

THREADS, ROUNDS = 8, 3


@pytest.fixture(scope='module')
def native():
    from timmdata.pixels import decode
    if decode.native is None: pytest.skip(decode.NATIVE_STATUS)
    return decode.native


@pytest.fixture(scope='module')
def jpegs(sample_root):
    "The sample tree's first 24 JPEGs, and 6 of them damaged (libjpeg warns, or fails, or decodes grey blocks)."
    rng, out = random.Random(0), []
    files = sorted((sample_root / 'train').rglob('*.JPEG'))[:24]
    assert len(files) == 24
    for k, f in enumerate(files):
        d = bytearray(f.read_bytes())
        if k % 4 == 3:
            for _ in range(3):
                i = rng.randrange(len(d) // 2, len(d) - 2); d[i] = rng.randrange(256)
        out.append(bytes(d))
    return out


def _cases(native, jpegs):
    "One call per case, each returning bytes (or the error's text): every entry point the loader uses, varied sizes."
    rng, cases = random.Random(1), []
    for k, d in enumerate(jpegs):
        try: h, w = native.header(d)[:2]
        except ValueError: continue
        top, left = rng.randrange(h // 3), rng.randrange(w // 3)
        ch, cw = rng.randrange(8, h - top + 1), rng.randrange(8, w - left + 1)
        oh, ow = rng.choice((32, 57, 96)), rng.choice((32, 64, 101))
        kind, vf, flip = k % 2, bool(k % 3 == 0), bool(k % 5 == 0)
        cases.append(('decode_crop', lambda d=d, t=top, l=left, a=ch, b=cw: native.decode_crop(d, t, l, a, b)[0]))
        cases.append(('resize_crop_jpeg', lambda d=d, oh=oh, ow=ow, k=kind, vf=vf, fl=flip, b=(top, left, ch, cw):
                      native.resize_crop_jpeg(d, oh, ow, 0, 0, oh, ow, k, vertical_first=vf, box=b, flip=fl)[0]))
        rgb, x0, y0, dw, dh = native.decode_crop(d, 0, 0, h, w)
        src = np.frombuffer(bytes(rgb), np.uint8).reshape(dh, dw, 3)
        cases.append(('resample_window', lambda s=src, h=dh, w=dw, oh=oh, ow=ow, k=kind, fl=flip:
                      native.resample_window(s, 0, 0, h, w, oh + 6, ow + 4, 3, 2, oh, ow, k, False, fl)))
    items = [(d, None, (70, 90, 3, 5), k % 2, bool(k % 2), bool(k % 3), True) for k, d in enumerate(jpegs)]

    def batch():
        out = np.zeros((len(items), 3, 64, 80), np.uint8)
        status = native.resize_crop_jpeg_batch(items, 64, 80, out)
        return bytes(status) + out.tobytes()
    cases.append(('resize_crop_jpeg_batch', batch))
    srcs = [(np.random.default_rng(i).integers(0, 256, (40 + i, 50 + 2 * i, 3), dtype=np.uint8), i % 2, bool(i % 3), bool(i % 2))
            for i in range(8)]

    def resize_batch():
        out = np.zeros((len(srcs), 3, 33, 47), np.uint8)
        native.resize_batch(srcs, 33, 47, out)
        return out.tobytes()
    cases.append(('resize_batch', resize_batch))
    x = np.random.default_rng(2).integers(0, 256, (4, 3, 64 * 64), dtype=np.uint8)
    m = np.random.default_rng(3).uniform(-1, 1, (4, 3, 3)).astype(np.float32)
    b = np.random.default_rng(4).uniform(-1, 1, (4, 3)).astype(np.float32)
    lo, hi = np.full(3, -2, np.float32), np.full(3, 2, np.float32)

    def step():
        mu, out = np.zeros((4, 3), np.float32), np.zeros((4, 3, 64 * 64), np.float32)
        native.channel_means(x, mu, 4, 3, 64 * 64)
        native.affine_u8(x, m, b, lo, hi, out, 4, 3, 64 * 64)
        return mu.tobytes() + out.tobytes()
    cases.append(('channel_means+affine_u8', step))
    return cases


def _run(case):
    name, f = case
    try: return name, bytes(f())
    except ValueError as e: return name, f'ValueError: {e}'


@pytest.mark.slow
def test_eight_threads_give_what_one_thread_gives(native, jpegs):
    cases = _cases(native, jpegs)
    assert len(cases) >= 3 * 20
    n0 = native.jpeg_warnings()[0]
    seq = [_run(c) for c in cases]
    n1 = native.jpeg_warnings()[0]
    assert n1 > n0, 'the damaged JPEGs should make libjpeg warn'
    start = threading.Barrier(THREADS)
    shift = [t * 7 % len(cases) for t in range(THREADS)]  # each thread its own starting point in the list
    work = [cases[s:] + cases[:s] for s in shift]

    def thread(t):  # each thread the whole list ROUNDS times, from its own starting point, all starting together
        start.wait()
        got = []
        for _ in range(ROUNDS): got.extend(_run(c) for c in work[t])
        return t, got

    flips = threading.Event()

    def flipper():  # the SIMD and streaming switches changed while the threads run: both paths give the same bytes
        old_simd, old_stream = native.set_resample_simd(True), native.set_streaming(True)
        try:
            k = 0
            while not flips.is_set():
                native.set_resample_simd(k % 2 == 0); native.set_streaming(k % 3 != 0); k += 1
        finally: native.set_resample_simd(old_simd); native.set_streaming(old_stream)

    fl = threading.Thread(target=flipper); fl.start()
    try:
        with ThreadPoolExecutor(THREADS) as ex: results = list(ex.map(thread, range(THREADS)))
    finally: flips.set(); fl.join()
    n2 = native.jpeg_warnings()[0]
    for t, got in results:
        assert len(got) == ROUNDS * len(cases), f'thread {t}: {len(got)} results'
        ref = [seq[(shift[t] + j) % len(cases)] for _ in range(ROUNDS) for j in range(len(cases))]
        for j, (a, b) in enumerate(zip(got, ref, strict=True)):
            assert a == b, f'thread {t}, call {j} ({a[0]}): differs from the single-threaded result'
    assert n2 - n1 == THREADS * ROUNDS * (n1 - n0), 'libjpeg warnings lost or double counted across threads'


def test_the_module_declares_it_runs_without_the_gil(native):
    "On a free-threaded build, importing the extension leaves the GIL off (Py_mod_gil_not_used); GIL builds: skipped."
    if not hasattr(sys, '_is_gil_enabled') or sys._is_gil_enabled() and not _ft_build():
        pytest.skip('a build with the GIL (free-threaded builds: python3.13t, 3.14t; make ft-python)')
    import subprocess
    env = {k: v for k, v in __import__('os').environ.items() if k != 'PYTHON_GIL'}
    r = subprocess.run([sys.executable, '-W', 'error::RuntimeWarning', '-c',
                        'import sys, timmdata._native; print(sys._is_gil_enabled())'], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip() == 'False', r.stdout + r.stderr


def _ft_build() -> bool:
    import sysconfig
    return bool(sysconfig.get_config_var('Py_GIL_DISABLED'))
