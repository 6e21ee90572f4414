"""Thread mode (`create_loader(..., worker_mode='thread')`, timmdata.engine.threads) against worker processes: the same batches
bit for bit, states that resume across the modes, the same skips, and `stats()` counting every image and batch."""
import shutil, warnings
import pytest, torch
from timmdata import ImageDataset, create_loader

KW = dict(input_size=96, batch_size=8, is_training=True, device='cpu', seed=7, re_prob=0.25)

def batches(root, mode, workers, stop=None, state=None, defer=True, loader_kw=None, **kw):
    """(batches as (x, y) copies, state after the last one, the loader); `defer=False`: every sample made whole (no batch
    of pending crops); `loader_kw`: create_loader's keywords over `KW`; `kw`: ImageDataset's."""
    ld = create_loader(ImageDataset(str(root), **kw), **{**KW, **(loader_kw or {})}, num_workers=workers, worker_mode=mode)
    if not defer: _seeded(ld).defer_pixels = False
    if state is not None: ld.load_state_dict(state)
    out = []
    for x, y in ld:
        out.append((x.clone(), y.clone()))
        if stop is not None and len(out) == stop: break
    return out, ld.state_dict(), ld

def same(a, b):
    assert len(a) == len(b)
    for (x1, y1), (x2, y2) in zip(a, b, strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)

@pytest.fixture(scope='module')
def root(sample_root): return sample_root / 'train'

def test_thread_equals_process(root):
    thr, _, _ = batches(root, 'thread', 2)
    proc, _, _ = batches(root, 'process', 2)
    assert len(thr) == 60 // 8
    same(thr, proc)

@pytest.mark.parametrize('first,then', [('thread', 'process'), ('process', 'thread')])
def test_resume_across_modes(root, first, then):
    full, _, _ = batches(root, then, 2)
    head, sd, _ = batches(root, first, 2, stop=3)
    rest, _, _ = batches(root, then, 2, state=sd)
    same(head + rest, full)

def test_skips_and_stats(root, tmp_path):
    bad = tmp_path / 'train'
    shutil.copytree(root, bad)
    victims = sorted(bad.rglob('*.JPEG'))[::13]
    for f in victims: f.write_bytes(f.read_bytes()[:200])  # truncated: undecodable
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        thr, _, tl = batches(bad, 'thread', 2, bad_sample='skip')
        proc, _, pl = batches(bad, 'process', 2, bad_sample='skip')
    same(thr, proc)
    skipped = [ld.loader.dataset.bad_samples for ld in (tl, pl)]
    assert skipped[0] == skipped[1] and len(skipped[0]) == len(victims)
    for ld, got in ((tl, thr), (pl, proc)):
        st = ld.stats()
        assert (st.images, st.batches) == (sum(len(y) for _, y in got), len(got))
        assert st.images == 7 * 8 - len(victims)
        # every sample of the plan made (the skipped ones too) and every batch collated, in the workers of either mode
        assert (st.samples, st.collated) == (7 * 8, len(got))
        assert set(st.t) == {k for k, _ in st.STAGES} and all(v >= 0 for v in st.t.values())
        assert all(st.t[k] > 0 for k in st.WORKER_STAGES), st.t

def test_bad_sample_raise_names_file(root, tmp_path):
    bad = tmp_path / 'train'
    shutil.copytree(root, bad)
    f = sorted(bad.rglob('*.JPEG'))[5]
    f.write_bytes(f.read_bytes()[:200])
    with pytest.raises(OSError, match=f.name):
        batches(bad, 'thread', 2)



def _broken_in_data(f):
    "A progressive JPEG with a marker in the middle of its data: the header reads, every crop's decode fails (libjpeg and PIL)."
    import io
    from PIL import Image
    bio = io.BytesIO()
    with Image.open(f) as im:
        im.save(bio, 'JPEG', quality=90, progressive=True)  # all scans read before the first row: any crop meets the marker
    d = bio.getvalue()
    at = len(d) * 2 // 5
    f.write_bytes(d[:at] + b'\xff\xd8' + d[at:])


@pytest.mark.slow
def test_deferred_jpeg_bad_files_skip_like_threads(root, tmp_path):
    "Worker processes and loader threads decode a batch's JPEG crops in the collate (one call): a bad file there is skipped and counted as when the dataset decodes each sample, or raised naming it."
    from timmdata.pixels import decode
    from timmdata.pixels.resample import PendingJpegCrop
    if decode.native is None: pytest.skip(decode.NATIVE_STATUS)
    bad = tmp_path / 'train'
    shutil.copytree(root, bad)
    victims = sorted(bad.rglob('*.JPEG'))[::9]
    for f in victims: _broken_in_data(f)
    ds = ImageDataset(str(bad), transform=create_loader(ImageDataset(str(bad)), **KW).dataset.transform, bad_sample='skip')
    assert isinstance(ds.sample(0, defer=True)[0], PendingJpegCrop)  # what the deferring workers hand their collate
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        whole, _, wl = batches(bad, 'thread', 2, defer=False, bad_sample='skip')  # each sample decoded by the dataset
        thr, _, tl = batches(bad, 'thread', 2, bad_sample='skip')
        proc, _, pl = batches(bad, 'process', 2, bad_sample='skip')
    assert _deferring(pl) and _deferring(tl) and not _deferring(wl)
    same(thr, proc)
    same(whole, proc)
    skipped = [ld.loader.dataset.bad_samples for ld in (wl, tl, pl)]
    assert skipped[0] == skipped[1] == skipped[2] and len(skipped[0]) == len(victims), skipped
    assert {ds.filename(i, absolute=True) for i in skipped[0]} == {str(f) for f in victims}
    st = pl.stats()
    assert st.images == sum(len(y) for _, y in proc) == 7 * 8 - len(skipped[0])
    assert (st.samples, st.collated) == (7 * 8, len(proc)) and st.t['decode'] > 0
    for mode in ('process', 'thread'):
        with pytest.raises(OSError, match='could not be read or decoded') as e:
            batches(bad, mode, 2)
        assert any(f.name in str(e.value) for f in victims), str(e.value)


@pytest.mark.slow
def test_eval_deferred_equals_whole(root):
    "Eval's resize and centre crop of a batch's JPEGs, decoded in one call (worker processes and threads), give the batches of samples made whole."
    ev = dict(is_training=False, re_prob=0.0, interpolation='bicubic')
    whole, _, wl = batches(root, 'process', 0, defer=False, loader_kw=ev)
    assert len(whole) == 8 and not _deferring(wl)  # 60 samples: 7 batches of 8 and one of 4
    for mode, workers in (('process', 2), ('thread', 2), ('process', 0)):
        got, _, ld = batches(root, mode, workers, loader_kw=ev)
        assert _deferring(ld)
        same(got, whole)

def test_native_decode_in_threads_same_results_and_warning_count(root):
    "The GIL-free decoder from 4 threads: the same pixels and errors as one thread, and every libjpeg warning counted."
    import random
    from concurrent.futures import ThreadPoolExecutor
    from timmdata.pixels import decode
    if decode.native is None: pytest.skip(decode.NATIVE_STATUS)
    nat, rng = decode.native, random.Random(0)
    cases = []
    for f in sorted(root.rglob('*.JPEG'))[:30]:
        d = bytearray(f.read_bytes())
        for _ in range(3):  # damage the entropy-coded data: libjpeg warns, or fails, or decodes grey blocks
            i = rng.randrange(len(d) // 2, len(d) - 2); d[i] = rng.randrange(256)
        h, w = nat.header(bytes(d))[:2]
        cases.append((bytes(d), h, w))
    def one(c):
        try: return bytes(nat.decode_crop(c[0], 0, 0, c[1], c[2])[0])
        except ValueError as e: return str(e)
    n0 = nat.jpeg_warnings()[0]
    seq = [one(c) for c in cases]
    n1 = nat.jpeg_warnings()[0]
    with ThreadPoolExecutor(4) as ex: par = list(ex.map(one, cases * 4))
    n2 = nat.jpeg_warnings()[0]
    assert len(par) == 4 * len(seq) and par == seq * 4
    assert n1 > n0 and n2 - n1 == 4 * (n1 - n0)


@pytest.fixture(scope='module')
def store(root, tmp_path_factory):
    from timmdata.store.builder import build_cache
    dst = tmp_path_factory.mktemp('threads') / 'store'
    build_cache(root, dst, max_size=128, num_workers=0, progress=False)
    return dst


def _seeded(ld):
    "The loader's `SeededDataset` (its `fetch_dataset`: `.dataset` is the dataset passed in, as timm's), under the prefetcher."
    inner = ld
    while not hasattr(inner, 'fetch_dataset'):
        inner = inner.loader
    return inner.fetch_dataset


def _deferring(ld) -> bool:
    "Whether the loader's dataset hands its collate `PendingResize`s (`SeededDataset.defer_pixels`)."
    return _seeded(ld).defer_pixels


@pytest.mark.parametrize('workers', [2, 0])
def test_store_deferred_crops_equal_threads(store, workers):
    "A store's training crops made a batch at a time by the collate (processes, and threads after their first batch) give the batches of samples made whole."
    whole, _, wl = batches(store, 'thread', 2, defer=False)
    thr, _, tl = batches(store, 'thread', 2)
    proc, _, pl = batches(store, 'process', workers)
    assert _deferring(pl) and _deferring(tl) and not _deferring(wl)
    assert len(thr) == 60 // 8
    same(thr, proc)
    same(whole, proc)
    head, sd, _ = batches(store, 'process', workers, stop=3)  # and a resume from the deferring loader in thread mode
    rest, _, _ = batches(store, 'thread', 2, state=sd)
    same(head + rest, thr)


def test_store_custom_collate_not_deferred(store):
    "A collate of the user's own never sees a `PendingResize`: the loader defers only for fast_collate's."
    from timmdata import fast_collate
    seen = []
    def mine(samples):
        seen.extend(type(s[0]).__name__ for s in samples)
        return fast_collate(samples)
    ld = create_loader(ImageDataset(str(store)), **KW, num_workers=0, collate_fn=mine)
    assert not _deferring(ld)
    n = sum(len(y) for _, y in ld)
    assert n == 56 and len(seen) == 56 and set(seen) == {'Tensor'}
