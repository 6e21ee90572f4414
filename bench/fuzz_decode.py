"""Fuzz every decode path with mutated JPEGs and PNGs: no crash, no hang, every failure named or counted.

    python bench/fuzz_decode.py --count 10000 --seed 0            # the issue's run: counts by path and outcome
    python bench/fuzz_decode.py --start 4711 --count 1 --seed 0 -v  # one case again: what each path did
    python bench/fuzz_decode.py --paths native.decode_crop,native.header --count 3000   # some paths only

Case i of seed S is drawn from numpy's generator seeded with (S, i): a base image (small photo-like JPEGs: 4:2:0,
4:4:4, progressive, greyscale, CMYK, restart markers; PNGs: RGB, RGBA, palette, L, 16-bit, 1-bit) and one to three
mutations (bit flips, truncation with or without an end marker, header byte edits, huge claimed sizes in the JPEG SOF or
the PNG IHDR (60000x60000 and others, CRC fixed), zeroed ranges, garbage after a JPEG marker, zero-length data, random
bytes, inserted marker segments, broken segment lengths and SOF fields, PNG chunks with fixed CRCs, spliced ranges).
Every case goes through every path (see PATHS): timmdata's decode_image (tensor and PIL), the EncodedJpeg crop path
(`crop_box` on `encoded_jpeg`) and its whole decode, the extension's `header`, `decode_crop` and the training crop's
`resize_crop_jpeg(box=...)` directly, TorchCodec's
decoder, PIL, and `create_transform`'s train and eval pipelines on an `ImageDataset` (prefetcher on and off; one with
bad_sample='skip').

Outcomes per path: ok; `named` (an ImageDecodeError; from the dataset it must name the sample and the file);
`counted` (bad_sample='skip': None returned and the index in `bad_samples`); `raised:<Type>` on the raw third-party
or native paths when the type is one they document (PIL: OSError, SyntaxError, ValueError, EOFError; TorchCodec:
RuntimeError; the extension: ValueError); `FINDING:<Type>` for anything else (another exception type, a wrong output
shape, an ImageDecodeError that names nothing), printed with the case to reproduce it.

The cases run in a forked child process with an address-space limit (RLIMIT_AS, --mem-gb above what it holds at the
start, so a huge claimed size cannot take the machine's memory) and a watchdog (--timeout seconds without progress):
a crash (signal) or a hang is reported with its case and the run goes on from the next case in a fresh child. What
the child prints on stderr (libjpeg's warnings) goes to a file and is summarised; Python warnings are counted by path.
Under AddressSanitizer pass --no-rlimit (ASan reserves terabytes of address space) and limit allocations with
ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=2048."""
import argparse, collections, faulthandler, io, os, random, re, resource, struct, sys, tempfile, time, warnings, zlib
import multiprocessing as mp
import numpy as np, torch
from PIL import Image

from timmdata.pixels import decode
from timmdata.dataset import ImageDataset
from timmdata.pixels.decode import ImageDecodeError, decode_image, encoded_jpeg
from timmdata.readers import Reader
from timmdata.tools.sample_data import make_sample_image
from timmdata.transforms import crop_box
from timmdata.transforms_factory import create_transform

OUT = 32  # the transforms' output size: small, so that thousands of cases run in a minute


# ---------------------------------------------------------------- base images
def _save(img, fmt, **kw) -> bytes:
    b = io.BytesIO(); img.save(b, fmt, **kw); return b.getvalue()

def base_images() -> list:
    "(name, bytes) of the unmutated images the cases start from."
    small, big = make_sample_image(2, size=(64, 48)), make_sample_image(5, seed=1, size=(160, 120))
    out = [('jpeg420', _save(small, 'JPEG', quality=90)), ('jpeg420_big', _save(big, 'JPEG', quality=85)),
           ('jpeg444', _save(small, 'JPEG', quality=95, subsampling=0)),
           ('jpeg_progressive', _save(big, 'JPEG', quality=80, progressive=True)),
           ('jpeg_gray', _save(small.convert('L'), 'JPEG')), ('jpeg_cmyk', _save(small.convert('CMYK'), 'JPEG'))]
    try: out.append(('jpeg_restart', _save(big, 'JPEG', quality=85, restart_marker_blocks=4)))
    except TypeError: pass  # an older Pillow: no restart markers
    pal = small.convert('P', palette=Image.ADAPTIVE, colors=16); pal.info['transparency'] = 3
    a16 = Image.fromarray((np.asarray(small.convert('L'), np.uint16) * 257).astype(np.uint16))
    out += [('png_rgb', _save(small, 'PNG')), ('png_rgba', _save(small.convert('RGBA'), 'PNG')),
            ('png_palette', _save(pal, 'PNG')), ('png_gray', _save(small.convert('L'), 'PNG')),
            ('png_16bit', _save(a16, 'PNG')), ('png_1bit', _save(small.convert('1'), 'PNG')),
            ('png_big', _save(big, 'PNG', compress_level=1))]
    return out


# ---------------------------------------------------------------- mutations
def _jpeg_segments(d: bytes) -> list:
    "(offset, marker) of the marker segments before the first scan (SOS included)."
    out, i = [], 2
    while i + 4 <= len(d) and d[i] == 0xFF:
        m = d[i + 1]
        if m == 0xFF: i += 1; continue
        out.append((i, m))
        if m == 0xDA: break
        i += 2 + int.from_bytes(d[i + 2:i + 4], 'big')
    return out

def _png_chunks(d: bytes) -> list:
    "(offset, type) of the PNG chunks."
    out, i = [], 8
    while i + 8 <= len(d):
        out.append((i, d[i + 4:i + 8])); i += 12 + int.from_bytes(d[i:i + 4], 'big')
    return out

def _png_fix_crc(d: bytearray, off: int):
    n = int.from_bytes(d[off:off + 4], 'big')
    if off + 12 + n <= len(d): d[off + 8 + n:off + 12 + n] = struct.pack('>I', zlib.crc32(bytes(d[off + 4:off + 8 + n])))

HUGE = [(60000, 60000), (65535, 65535), (0, 0), (1, 60000), (60000, 1), (65500, 3)]

def m_bitflip(d, r):
    d = bytearray(d)
    for _ in range(int(r.integers(1, 17))):
        if d: p = int(r.integers(len(d))); d[p] ^= 1 << int(r.integers(8))
    return bytes(d), 'bitflip'

def m_truncate(d, r):
    p = int(r.integers(0, len(d) + 1)); end = r.random() < 0.5
    tail = (b'\xff\xd9' if d[:2] == b'\xff\xd8' else b'\x00\x00\x00\x00IEND\xaeB`\x82') if end else b''
    return d[:p] + tail, f'truncate@{p}' + ('+end' if end else '')

def m_header(d, r):
    d = bytearray(d); lim = min(len(d), 700)
    for _ in range(int(r.integers(1, 9))):
        if lim: d[int(r.integers(lim))] = int(r.choice([0, 0xFF, int(r.integers(256))]))
    return bytes(d), 'header-bytes'

def m_huge(d, r):
    h, w = HUGE[int(r.integers(len(HUGE)))]; d = bytearray(d)
    if d[:2] == b'\xff\xd8':
        for off, m in _jpeg_segments(bytes(d)):
            if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC): d[off + 5:off + 9] = struct.pack('>HH', h, w)
    else:
        for off, t in _png_chunks(bytes(d)):
            if t == b'IHDR':
                d[off + 8:off + 16] = struct.pack('>II', h if r.random() < .8 else 2 ** 31 - 1, w)
                if r.random() < 0.8: _png_fix_crc(d, off)
    return bytes(d), f'huge {h}x{w}'

def m_zeros(d, r):
    a = int(r.integers(0, len(d) + 1)); b = min(len(d), a + int(r.integers(1, 512)))
    return d[:a] + bytes(b - a) + d[b:], f'zeros@{a}:{b}'

def m_garbage_marker(d, r):
    g = r.integers(0, 256, int(r.integers(0, 3000)), dtype=np.uint8).tobytes()
    head = b'\xff\xd8\xff' + bytes([int(r.choice([0xE0, 0xDB, 0xC0, 0xC4, 0xDA, 0xD9]))])
    return head + g, 'garbage+jpeg-marker'

def m_empty(d, r): return b'', 'zero-length'

def m_random(d, r): return r.integers(0, 256, int(r.integers(0, 4000)), dtype=np.uint8).tobytes(), 'random-bytes'

def m_marker(d, r):
    p = int(r.integers(2, max(3, len(d)))); m = int(r.choice([0xC0, 0xC4, 0xD8, 0xD9, 0xDA, 0xDB, 0xDD, 0xD0, 0xFE, 0x01]))
    seg = bytes([0xFF, m]) + struct.pack('>H', int(r.integers(0, 70))) + r.integers(0, 256, int(r.integers(0, 40)), dtype=np.uint8).tobytes()
    return d[:p] + seg + d[p:], f'marker {m:02X}@{p}'

def m_segment(d, r):
    d = bytearray(d)
    if d[:2] == b'\xff\xd8':
        segs = _jpeg_segments(bytes(d))
        if segs:
            off, m = segs[int(r.integers(len(segs)))]
            if r.random() < 0.5 or not (0xC0 <= m <= 0xC3): d[off + 2:off + 4] = struct.pack('>H', int(r.choice([0, 1, 2, 3, 65535, int(r.integers(65536))])))
            else:  # SOF fields: precision, component count, sampling factors, table ids
                k = int(r.choice([4, 9, 11, 12]))
                if off + k < len(d): d[off + k] = int(r.choice([0, 1, 2, 4, 12, 16, 0x44, 0xFF, int(r.integers(256))]))
            return bytes(d), f'segment {m:02X}'
    else:
        ch = _png_chunks(bytes(d))
        if ch:
            off, t = ch[int(r.integers(len(ch)))]
            if r.random() < 0.4: d[off:off + 4] = struct.pack('>I', int(r.choice([0, 2 ** 31 - 1, 2 ** 32 - 1, int(r.integers(2 ** 32))])))
            else:  # the chunk's data changed, its CRC fixed: the decoder's own checks get the bad data
                n = int.from_bytes(d[off:off + 4], 'big')
                for _ in range(int(r.integers(1, 5))):
                    if n and len(d) - off - 8 > 0:  # a chunk that claims data past the file's end: nothing to flip
                        d[off + 8 + int(r.integers(min(n, len(d) - off - 8)))] ^= 1 << int(r.integers(8))
                _png_fix_crc(d, off)
            return bytes(d), f'chunk {t!r}'
    return bytes(d), 'segment(none)'

def m_splice(d, r):
    a = int(r.integers(0, len(d) + 1)); b = min(len(d), a + int(r.integers(1, 300)))
    return (d[:a] + d[a:b] + d[a:]) if r.random() < 0.5 else (d[:a] + d[b:]), f'splice@{a}:{b}'

MUTATIONS = [m_bitflip, m_truncate, m_header, m_huge, m_zeros, m_garbage_marker, m_empty, m_random, m_marker,
             m_segment, m_splice]
WEIGHTS = np.array([6, 4, 4, 3, 3, 1, 0.3, 1, 3, 4, 2]); WEIGHTS = WEIGHTS / WEIGHTS.sum()

def make_case(bases, seed: int, i: int) -> tuple:
    "(bytes, description, rng) of case i: a base image and one to three mutations."
    r = np.random.default_rng([seed, i])
    name, d = bases[int(r.integers(len(bases)))]
    steps = []
    for _ in range(int(r.choice([1, 1, 1, 2, 3]))):
        d, what = MUTATIONS[int(r.choice(len(MUTATIONS), p=WEIGHTS))](d, r); steps.append(what)
    return d, f'{name}: ' + ', '.join(steps), r


# ---------------------------------------------------------------- the decode paths
class CaseReader(Reader):
    "A reader whose sample i is the data of case i (set in `case` before it is read), named case_<i>.img."
    def __init__(self, n: int):
        self.root, self.class_to_idx, self._targets, self.case = 'fuzz', {'x': 0}, np.zeros(n, np.int64), (None, b'')
    def __getitem__(self, i):
        j, d = self.case
        if i != j: raise IndexError(f'case reader holds case {j}, not {i}')
        return d, 0
    def filename(self, i, basename=False, absolute=False): return f'case_{i}.img'

def _box(r, h: int, w: int) -> tuple:
    "A random (top, left, height, width) inside an h x w image."
    bh, bw = int(r.integers(1, h + 1)), int(r.integers(1, w + 1))
    return int(r.integers(0, h - bh + 1)), int(r.integers(0, w - bw + 1)), bh, bw

def _tc_jpeg(d, r, i, env):
    "TorchCodec's decode_jpeg, the decoder timmdata's decode_image uses for JPEGs the extension does not take (CMYK in L; all without it)."
    tc = decode.torchcodec_jpeg()
    if tc is None: return True  # TorchCodec not installed (or not loading): nothing to fuzz here
    t = tc(torch.frombuffer(bytearray(d), dtype=torch.uint8) if d else torch.empty(0, dtype=torch.uint8), mode='RGB')
    return t.ndim == 3 and t.shape[0] == 3 or f'FINDING:shape {tuple(t.shape)}'

def _tv_decode(d, r, i, env):
    "torchvision's decode_image (PNG too): not used by timmdata; only with --paths (it crashes on some PNGs, see the report)."
    from torchvision.io import decode_image as tvd, ImageReadMode
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', UserWarning)  # torchvision's deprecation of its decoders (in TorchCodec's favour)
        t = tvd(torch.frombuffer(bytearray(d), dtype=torch.uint8) if d else torch.empty(0, dtype=torch.uint8), mode=ImageReadMode.RGB)
    return t.ndim == 3 and t.shape[0] == 3 or f'FINDING:shape {tuple(t.shape)}'

def _pil(d, r, i, env):
    with Image.open(io.BytesIO(d)) as im: im.load()
    return True

def _decode_tensor(d, r, i, env):
    t = decode_image(d, 'RGB', to_tensor=True)
    return (t.dtype == torch.uint8 and t.ndim == 3 and t.shape[0] == 3) or f'FINDING:tensor {t.dtype} {tuple(t.shape)}'

def _decode_pil(d, r, i, env):
    mode = ['RGB', 'L', None][int(r.integers(3))]
    img = decode_image(d, mode)
    return mode is None or img.mode == mode or f'FINDING:mode {img.mode} for {mode}'

def _native_header(d, r, i, env):
    decode.native.header(d); return True

def _crop_box(r, h: int, w: int) -> tuple:
    "A crop box for the native crop calls of an h x w header: inside it, or (15%) outside it or near int32's ends, which must be a ValueError."
    if r.random() < 0.15 or h < 1 or w < 1:
        edge = [-1, 0, 1, h, w, 2 ** 31 - 2, -2 ** 31]
        sizes = [0, 1, 10, 2 ** 31 - 1]
        return int(r.choice(edge)), int(r.choice(edge)), int(r.choice(sizes)), int(r.choice(sizes))
    return _box(r, min(h, 4096), min(w, 4096))  # crops of huge claimed sizes stay < 50 MB here

def _native_crop(d, r, i, env):
    try: h, w = decode.native.header(d)[:2]
    except ValueError: h, w = 48, 64
    top, left, bh, bw = _crop_box(r, h, w)
    buf, x0, y0, cw, ch = decode.native.decode_crop(d, top, left, bh, bw)
    ok = len(buf) == cw * ch * 3 and y0 == top and ch == bh and x0 <= left and x0 + cw >= left + bw
    return ok or f'FINDING:crop box {(x0, y0, cw, ch, len(buf))} for {(top, left, bh, bw)}'

def _native_resize_box(d, r, i, env):
    "The training crop's native call: a box (sometimes outside the image or at int32's ends), resized and maybe flipped."
    try: h, w = decode.native.header(d)[:2]
    except ValueError: h, w = 48, 64
    box = _crop_box(r, h, w)
    oh, ow = int(r.choice([1, 7, 224])), int(r.choice([1, 9, 224]))
    buf, warned = decode.native.resize_crop_jpeg(d, oh, ow, 0, 0, oh, ow, int(r.random() < 0.5), r.random() < 0.5,
                                                 box=box, flip=r.random() < 0.5, to_end=r.random() < 0.5)
    return len(buf) == 3 * oh * ow or f'FINDING:resize_box {len(buf)} bytes for {(oh, ow)}'

def _encoded_crop(d, r, i, env):
    enc = encoded_jpeg(d)
    if enc is None: return 'not-encoded'
    top, left, bh, bw = _box(r, min(enc.height, 4096), min(enc.width, 4096))
    t = crop_box(enc, top, left, bh, bw)
    return tuple(t.shape) == (3, bh, bw) or f'FINDING:crop {tuple(t.shape)} for {(bh, bw)}'

def _encoded_decode(d, r, i, env):
    enc = encoded_jpeg(d)
    if enc is None: return 'not-encoded'
    t = enc.decode()
    return tuple(t.shape) == (3, enc.height, enc.width) or f'FINDING:decode {tuple(t.shape)} for header {enc.height}x{enc.width}'

def _dataset(key):
    def run(d, r, i, env):
        ds = env[key]; ds.reader.case = (i, d)
        s = ds[i]
        if s is None: return 'counted' if i in ds.bad_samples else 'FINDING:None not counted'
        return tuple(s[0].shape) == (3, OUT, OUT) or f'FINDING:sample {tuple(s[0].shape)}'
    return run

DATASETS = {'dataset.train': (True, False, False), 'dataset.train.prefetcher': (True, True, False),
            'dataset.eval': (False, False, False), 'dataset.eval.prefetcher.skip': (False, True, True)}
PATHS = {'decode_image.tensor': _decode_tensor, 'decode_image.pil': _decode_pil, 'encoded.crop_box': _encoded_crop,
         'encoded.decode': _encoded_decode, 'native.header': _native_header, 'native.decode_crop': _native_crop,
         'native.resize_box': _native_resize_box,
         'torchcodec.decode_jpeg': _tc_jpeg, 'pil': _pil, **{k: _dataset(k) for k in DATASETS}}
EXTRA_PATHS = {'torchvision.decode_image': _tv_decode}  # run only when named in --paths / paths=
RAW = {'pil': (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError),
       'torchcodec.decode_jpeg': (RuntimeError,), 'torchvision.decode_image': (RuntimeError,),
       'native.header': (ValueError,), 'native.decode_crop': (ValueError,), 'native.resize_box': (ValueError,)}  # documented error types of the raw paths

def make_env(n: int) -> dict:
    "What the paths share: a dataset per pipeline (train/eval, prefetcher on/off) over a `CaseReader` of n cases."
    return {k: ImageDataset('fuzz', reader=CaseReader(n), bad_sample='skip' if skip else 'raise',
                            transform=create_transform(OUT, is_training=train, use_prefetcher=pf))
            for k, (train, pf, skip) in DATASETS.items()}

def _norm(s: str) -> str: return re.sub(r'\d+', 'N', ' '.join(str(s).split()))[:90]

def run_case(bases, seed: int, i: int, paths: dict, env: dict, current=None) -> list:
    "[(path, outcome, detail, [warning texts])] of case i through each path."
    d, what, _ = make_case(bases, seed, i)
    out = []
    for k, (name, fn) in enumerate(paths.items()):
        if current is not None: current[1] = k  # the watchdog names the path of a crash or a hang
        r = np.random.default_rng([seed, i, len(name)])  # the path's own draws (boxes, modes)
        torch.manual_seed(seed * 1_000_003 + i); random.seed(seed * 1_000_003 + i)
        detail = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            try:
                res = fn(d, r, i, env)
                res = 'ok' if res is True else res
            except ImageDecodeError as e:
                named = not name.startswith('dataset') or (f'sample {i} ' in str(e) and f'case_{i}.img' in str(e))
                res = 'named' if named and name not in RAW else 'FINDING:ImageDecodeError unnamed'
                detail = str(e)
            except Exception as e:
                t = type(e).__name__
                if isinstance(e, RAW.get(name, ())) and not isinstance(e, MemoryError):
                    res = f'raised:{t}' + ('[alloc]' if 'alloc' in str(e) else '')
                else: res = f'FINDING:{t}'
                detail = f'{t}: {e}'
        if res.startswith('FINDING') and detail is None: detail = res
        out.append((name, res, detail, [f'{type(w.message).__name__}: {_norm(w.message)}' for w in caught]))
    return out


# ---------------------------------------------------------------- the child and its watchdog
def _limit_memory(gb: float):
    "RLIMIT_AS = what the process maps now + gb: an allocation past it fails (MemoryError / RuntimeError) instead."
    vm = next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmSize:'))
    resource.setrlimit(resource.RLIMIT_AS, (vm + int(gb * 2 ** 30), resource.getrlimit(resource.RLIMIT_AS)[1]))

def _child(bases, seed, start, stop, paths, conn, current, mem_gb, err_path):
    fd = os.open(err_path, os.O_WRONLY | os.O_APPEND); os.dup2(fd, 2); os.close(fd)  # libjpeg's prints, ASan's reports
    faulthandler.enable(file=sys.stderr)  # a crash's Python stack goes to that file too (not to a test runner's terminal)
    torch.set_num_threads(1)
    env = make_env(stop)
    if mem_gb: _limit_memory(mem_gb)
    for i in range(start, stop):
        current[0] = i
        conn.send((i, run_case(bases, seed, i, paths, env, current)))
    conn.send(None)

def fuzz(count: int, seed: int = 0, start: int = 0, paths=None, timeout: float = 60, mem_gb: float = 3,
         log=print) -> dict:
    """Run cases start..start+count in watched children: {'counts', 'findings', 'crashes', 'hangs', 'stderr', 'warnings', ...}.
    `paths`: names of PATHS / EXTRA_PATHS, or a dict name -> fn(data, rng, case, env) (default: PATHS)."""
    every = {**PATHS, **EXTRA_PATHS}
    if isinstance(paths, dict): every = paths  # name -> fn(data, rng, case, env): the test's own paths
    paths = {k: every[k] for k in (paths or PATHS) if k in every and (decode.native is not None or not k.startswith(('native', 'encoded')))}
    bases, ctx, stop, names = base_images(), mp.get_context('fork'), start + count, list(paths)
    counts, findings = collections.defaultdict(collections.Counter), collections.defaultdict(list)
    warns, crashes, hangs = collections.Counter(), [], []
    err = tempfile.NamedTemporaryFile(prefix='fuzz_stderr_', delete=False); err.close()
    i, t0, last_log = start, time.perf_counter(), time.perf_counter()
    while i < stop:
        rx, tx = ctx.Pipe(duplex=False); current = ctx.Array('q', [i, 0], lock=False)  # (case, path) being run
        p = ctx.Process(target=_child, args=(bases, seed, i, stop, paths, tx, current, mem_gb, err.name), daemon=True)
        p.start(); tx.close(); seen = time.perf_counter()
        while True:
            if rx.poll(1.0):
                try: msg = rx.recv()
                except EOFError: msg = 'dead'  # the child is gone: a crash, handled below
                if msg is None: i = stop; break
                if msg != 'dead':
                    j, res = msg; i, seen = j + 1, time.perf_counter()
                    for name, outcome, detail, ws in res:
                        counts[name][outcome] += 1
                        for w in ws: warns[(name, w)] += 1
                        if outcome.startswith('FINDING'): findings[(name, outcome)].append((j, make_case(bases, seed, j)[1], detail))
                    if time.perf_counter() - last_log > 30:
                        log(f'  ... {i - start}/{count} cases, {time.perf_counter() - t0:.0f} s'); last_log = time.perf_counter()
                    continue
                p.join(10)
            if p.exitcode is not None:
                c, where = current[0], names[current[1]]
                crashes.append((c, make_case(bases, seed, c)[1], where, p.exitcode))
                log(f'  CRASH case {c} in {where} (exit {p.exitcode})'); i = c + 1; break
            if time.perf_counter() - seen > timeout:
                c, where = current[0], names[current[1]]; p.kill(); p.join()
                hangs.append((c, make_case(bases, seed, c)[1], where)); log(f'  HANG case {c} in {where} (> {timeout} s)')
                i = c + 1; break
        p.join(5); rx.close()
    text = open(err.name, errors='replace').read(); os.unlink(err.name)
    lines = collections.Counter(_norm(l) for l in text.splitlines() if l.strip())
    return {'counts': counts, 'findings': findings, 'crashes': crashes, 'hangs': hangs, 'stderr': lines, 'stderr_text': text,
            'warnings': warns, 'seconds': time.perf_counter() - t0, 'cases': count, 'seed': seed, 'start': start}


# ---------------------------------------------------------------- the report
def report(res: dict, verbose: bool = False) -> str:
    "Counts by path and outcome, then findings, crashes, hangs, what was printed on stderr and the warnings."
    seed = res['seed']
    rows = [f"{res['cases']} cases (seed {seed}, from case {res['start']}) in {res['seconds']:.0f} s",
            f"{'path':30s} outcomes"]
    for name, c in res['counts'].items():
        rows.append(f'{name:30s} ' + ', '.join(f'{k} {v}' for k, v in sorted(c.items(), key=lambda kv: -kv[1])))
    rows.append(f"crashes: {len(res['crashes'])}, hangs: {len(res['hangs'])}, "
                f"findings: {sum(len(v) for v in res['findings'].values())}")
    for c, what, where, code in res['crashes']:
        rows.append(f'  CRASH  case {c} ({what}) in {where}, exit {code}: python bench/fuzz_decode.py --seed {seed} --start {c} --count 1 -v')
    if res['crashes'] and verbose: rows += ['  the children\'s stderr ends:'] + ['    ' + l for l in res['stderr_text'].splitlines()[-40:]]
    for c, what, where in res['hangs']:
        rows.append(f'  HANG   case {c} ({what}) in {where}: python bench/fuzz_decode.py --seed {seed} --start {c} --count 1 -v')
    for (name, outcome), cases in res['findings'].items():
        rows.append(f'  {name} {outcome}: {len(cases)} cases, e.g.')
        for j, what, detail in cases[:None if verbose else 3]:
            rows.append(f'      case {j} ({what}): {" ".join(str(detail).split())[:300]}')
    if res['stderr']:
        rows.append(f"printed on stderr: {sum(res['stderr'].values())} lines")
        rows += [f'  {n:6d} x {l}' for l, n in res['stderr'].most_common(None if verbose else 8)]
    if res['warnings']:
        rows.append(f"Python warnings: {sum(res['warnings'].values())}")
        rows += [f'  {n:6d} x {name}: {w}' for (name, w), n in res['warnings'].most_common(None if verbose else 8)]
    return '\n'.join(rows)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--count', type=int, default=10000, help='cases (default 10000)')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--start', type=int, default=0, help='first case (to reproduce one: --start I --count 1 -v)')
    ap.add_argument('--paths', default=None, help=f"comma-separated paths (default: all but {', '.join(EXTRA_PATHS)}): {', '.join(PATHS)}")
    ap.add_argument('--timeout', type=float, default=60, help='seconds without progress that count as a hang')
    ap.add_argument('--mem-gb', type=float, default=3, help='address space the child may add (RLIMIT_AS)')
    ap.add_argument('--no-rlimit', action='store_true', help='no RLIMIT_AS (AddressSanitizer)')
    ap.add_argument('--save', help='write case --start to this file (to reproduce it elsewhere)')
    ap.add_argument('-v', '--verbose', action='store_true', help='every finding, every stderr line kind; with --count 1: each path')
    a = ap.parse_args(argv)
    paths = a.paths.split(',') if a.paths else None
    every = {**PATHS, **EXTRA_PATHS}
    if paths and set(paths) - set(every): ap.error(f'unknown paths {sorted(set(paths) - set(every))}; known: {", ".join(every)}')
    print(f'timmdata fuzz: native {decode.NATIVE_STATUS}; pixel limit '
          f'{getattr(decode, "MAX_IMAGE_PIXELS", "none (timmdata.pixels.decode.MAX_IMAGE_PIXELS not there)")}', flush=True)
    if a.save:
        d, what, _ = make_case(base_images(), a.seed, a.start)
        open(a.save, 'wb').write(d); print(f'case {a.start} ({what}): {len(d)} bytes to {a.save}'); return 0
    if a.count == 1 and a.verbose:
        d, what, _ = make_case(base_images(), a.seed, a.start)
        print(f'case {a.start}: {what} ({len(d)} bytes)')
        sel = {k: every[k] for k in (paths or PATHS)}
        env = make_env(a.start + 1)
        if not a.no_rlimit: _limit_memory(a.mem_gb)  # this process runs the case: the same guard as the children
        for name, outcome, detail, ws in run_case(base_images(), a.seed, a.start, sel, env):
            print(f'  {name:30s} {outcome}' + (f'  {detail}' if detail else '') + (f'  warnings {ws}' if ws else ''))
        return 0
    res = fuzz(a.count, a.seed, a.start, paths, a.timeout, 0 if a.no_rlimit else a.mem_gb)
    print(report(res, a.verbose))
    bad = res['crashes'] or res['hangs'] or res['findings']
    return 1 if bad else 0

if __name__ == '__main__': sys.exit(main())
