"""Properties checked over many drawn cases (hypothesis): the orders deal every sample exactly once whatever the ranks,
workers, seed and resume point; a resumed loader gives the rest of its epoch exactly; mixing weights and boxes, crop
boxes and the device plan stay in their bounds; the index parsers answer any bytes with a result or a named error,
quickly and in memory bounded by their input.

Each property is a claim the code makes; a failure prints the smallest case hypothesis found (and a `@reproduce_failure`
line that reruns it). The cases are the same each run and modest in number, so the file stays quick;
`HYPOTHESIS_PROFILE=thorough` draws 20x more, new ones each run."""

import hashlib, json, os, signal, tracemalloc, warnings
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from torch.utils.data.distributed import DistributedSampler

from timmdata.core.permute import permute_index
from timmdata.core.untrusted import ResumeStateError, UnsafeNameError
from timmdata.distributed_sampler import OrderedDistributedSampler, PositionSampler, SeededRandomSampler, epoch_order
from timmdata.engine.batch_plan import ResumableBatchSampler, sample_key
from timmdata.engine.device_plan import INTERPS, DeviceDecodeTransform
from timmdata.index.dataset_index import parse_table
from timmdata.index.index_table import DatasetIndexError
from timmdata.index.shard_index import _entry_line, _entry_samples, _read_index
from timmdata.loader import create_loader
from timmdata.mixup import FastCollateMixup, Mixup, cutmix_bbox_and_lam
from timmdata.config import Draws
from timmdata.parquet.parquet_format import ParquetError
from timmdata.parquet.parquet_index import INDEX_FIELDS, PARQUET_INDEX_VERSION, parse_parquet_index
from timmdata.streams.global_order import GlobalOrder, batch_pieces, epoch_length, slice_positions, worker_positions
from timmdata.tools.sample_data import make_sample_dataset
from timmdata.transforms import RandomResizedCropAndInterpolation
from _datasets import IndexDataset

settings.register_profile(  # derandomized: the same cases every run (no example database), so a red run is reproducible
    'timmdata',
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    'timmdata-thorough', parent=settings.get_profile('timmdata'), max_examples=1200, derandomize=False
)  # random cases each run
settings.load_profile('timmdata-thorough' if os.environ.get('HYPOTHESIS_PROFILE') == 'thorough' else 'timmdata')

seeds = st.integers(0, 2**63 - 1)


# ---- orders: every index once per epoch, whatever the ranks, workers, seed and resume point -------------------------


def _samplers(kind: str, n: int, W: int, seed: int) -> list:
    data = range(n)
    if kind == 'distributed':
        return [DistributedSampler(data, num_replicas=W, rank=r, shuffle=True, seed=seed % 2**31) for r in range(W)]
    if kind == 'global':
        return [PositionSampler(data, seed=seed, num_replicas=W, rank=r) for r in range(W)]
    if kind == 'ordered':
        return [OrderedDistributedSampler(data, num_replicas=W, rank=r) for r in range(W)]
    assert W == 1
    return [SeededRandomSampler(data, seed=seed)]


def _plans(kind, n, W, B, seed, epoch, drop_last=False) -> list:
    plans = [ResumableBatchSampler(s, B, drop_last=drop_last, seed=seed) for s in _samplers(kind, n, W, seed)]
    for p in plans:
        p.set_epoch(epoch)
    return plans


def _take(plan, stop=None) -> tuple:
    "(the (index, key) pairs of `plan`'s pass, `stop` batches at most, each delivered; the state after them)."
    out, last = [], None
    for k, batch in enumerate(plan):
        if k == stop:
            break
        out += batch
        last = plan.delivered()
    return out, plan.state(last)


def _positions_of(pairs, seed, epoch) -> list:
    "Each pair's position in the epoch's global order, from its key (a key is `sample_key` of its position)."
    by_key = {}
    for p in range(4 * len(pairs) + 64):
        by_key[sample_key(seed, epoch, 0, p)] = p
    return [by_key[k] for _, k in pairs]


kinds = st.sampled_from(['distributed', 'global', 'ordered', 'random'])


@given(
    kind=kinds,
    n=st.integers(1, 60),
    W=st.integers(1, 6),
    B=st.integers(1, 7),
    seed=seeds,
    epoch=st.integers(0, 3),
    drop_last=st.booleans(),
)
def test_every_index_once_an_epoch_over_any_ranks(kind, n, W, B, seed, epoch, drop_last):
    "Over all ranks, an epoch's batches hold each position of the global order once: each index once, and the few padding ones."
    W = 1 if kind == 'random' else W
    plans = _plans(kind, n, W, B, seed, epoch, drop_last)
    pairs = [pair for p in plans for pair in _take(p)[0]]
    order, total, *_ = epoch_order(plans[0].sampler)
    pos = sorted(_positions_of(pairs, seed, epoch))
    if drop_last:  # whole batches on every rank, none past the epoch
        per_rank = len(range(0, total, W))
        assert pos == list(range(per_rank // B * B * W))
    else:
        assert pos == list(range(total)) and total - n < W  # the epoch padded to whole ranks, by wrapping round
    assert all(i == order[p % len(order)] for (i, _), p in zip(pairs, _positions_of(pairs, seed, epoch), strict=True))
    counts = Counter(i for i, _ in pairs)
    if not drop_last:
        assert set(counts) == set(range(n)) and sum(counts.values()) - n == total - n


@given(
    kind=st.sampled_from(['distributed', 'global', 'ordered']),
    n=st.integers(1, 60),
    W1=st.integers(1, 5),
    W2=st.integers(1, 5),
    B=st.integers(1, 6),
    seed=seeds,
    epoch=st.integers(0, 2),
    data=st.data(),
)
def test_resumed_on_other_ranks_every_position_once(kind, n, W1, W2, B, seed, epoch, data):
    "Cut after k steps on W1 ranks, resumed on W2: the two runs' batches hold each position of the epoch once (and the rest's padding)."
    plans = _plans(kind, n, W1, B, seed, epoch)
    k = data.draw(st.integers(0, plans[0].remaining()), label='k')
    head, states = [], []
    for p in plans:
        got, sd = _take(p, stop=k)
        head += got
        states.append(sd)
    assert all(sd == states[0] for sd in states), 'ranks in lockstep save one state'
    sd = json.loads(json.dumps(states[0]))
    if sd['done']:  # cut at the epoch's end: nothing left of it (iterating again reads the epoch once more)
        assert sorted(_positions_of(head, seed, epoch)) == list(range(sd['end']))
        return
    plans2 = _plans(kind, n, W2, B, seed, epoch)
    try:
        for p in plans2:
            p.load_state(sd)
    except ResumeStateError:
        assume(False)  # a sampler that does not resume on another world size refuses it by name
        return
    tail = [pair for p in plans2 for pair in _take(p)[0]]
    end, offset = sd['end'], sd['offset']
    rest = -(-(end - offset) // W2) * W2  # the rest of the epoch, padded to whole W2 ranks by wrapping round
    pos = sorted(_positions_of(head + tail, seed, epoch))
    assert pos == list(range(offset + rest)) and offset == k * B * W1


@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=12).filter(lambda a: sum(a) > 0),
    seed=seeds,
    epoch=st.integers(0, 5),
    pass_=st.integers(0, 2),
    block_shards=st.integers(1, 9),
    partitions=st.integers(1, 5),
)
def test_global_order_is_a_bijection(lengths, seed, epoch, pass_, block_shards, partitions):
    "A pass of the global order lists every (shard, member) once."
    order = GlobalOrder(lengths, seed, epoch, pass_, block_shards, partitions)
    assert len(order) == sum(lengths)
    s, m = order.locate(np.arange(len(order)))
    assert sorted(zip(s.tolist(), m.tolist())) == [(k, j) for k, n in enumerate(lengths) for j in range(n)]


@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=10).filter(lambda a: sum(a) > 0),
    B=st.integers(1, 6),
    W=st.integers(1, 5),
    workers=st.integers(1, 4),
    partitions=st.integers(1, 4),
    data=st.data(),
)
def test_worker_positions_cover_the_epoch_once(lengths, B, W, workers, partitions, data):
    "Every rank's workers together yield each position of the epoch once, from any resume point (whole global batches)."
    total, gb = sum(lengths), B * W
    done = data.draw(st.integers(0, epoch_length(total, gb) // gb), label='global batches before') * gb
    end = epoch_length(total, gb)
    got = [
        p
        for r in range(W)
        for w in range(workers)
        for p in worker_positions(done, end, B, r, W, w, workers, total=total, partitions=partitions)
    ]
    assert sorted(got) == list(range(done, end)) and (end - total) < gb


@given(a=st.integers(0, 500), B=st.integers(1, 8), W=st.integers(1, 6), total=st.integers(1, 120), P=st.integers(1, 6))
def test_batch_pieces_and_slices_cover_the_batch_once(a, B, W, total, P):
    "A global batch's pieces, sliced rank by rank, hold each of its positions once (wrapping into the next pass too)."
    gb = B * W
    pieces = batch_pieces(a, gb, total, P)
    assert sum(n for _, n in pieces) == gb and all(n > 0 for _, n in pieces)
    got = np.concatenate([slice_positions(pieces, r * B, (r + 1) * B, P) for r in range(W)])
    assert len(got) == gb and sorted(got.tolist()) == list(range(a, a + gb))
    assert all(len(slice_positions(pieces, r * B, (r + 1) * B, P)) == B for r in range(W))


@given(n=st.integers(1, 3000), seed=seeds)
def test_permute_index_is_a_bijection(n, seed):
    assert sorted(permute_index(np.arange(n), n, seed).tolist()) == list(range(n))


# ---- a loader cut at any batch resumes to the rest of its epoch ----------------------------------------------------


@pytest.fixture(scope='module')
def images(tmp_path_factory):
    "20 tiny images (5 per class): a loader over them runs an epoch in milliseconds."
    root = make_sample_dataset(
        tmp_path_factory.mktemp('prop') / 'data', n_train=5, n_val=0, classes=list('abcd'), size=(28, 24), num_workers=0
    )
    return root / 'train'


def _loader(images, seed, B, train, mix, **kw):
    collate = FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=20) if mix and train else None
    return create_loader(
        IndexDataset(str(images)),
        (3, 16, 16),
        B,
        is_training=train,
        device='cpu',
        seed=seed,
        re_prob=0.3 if train else 0.0,
        collate_fn=collate,
        **kw,
    )


def _epoch(loader, epoch, stop=None, sd=None) -> tuple:
    if sd is not None:
        loader.load_state_dict(json.loads(json.dumps(sd)))
    loader.set_epoch(epoch)
    out = []
    for x, y in loader:
        out.append((x.clone(), y.clone()))
        if len(out) == stop:
            break
    return out, loader.state_dict()


def _same(a, b):
    assert len(a) == len(b), f'{len(a)} batches and {len(b)}'
    for i, ((x, y), (u, v)) in enumerate(zip(a, b, strict=True)):
        assert torch.equal(x, u) and torch.equal(y, v), f'batch {i} differs'


def _check_resume(images, seed, B, train, mix, epoch, data, **kw):
    whole, _ = _epoch(_loader(images, seed, B, train, mix, **kw), epoch)
    assert whole, 'an epoch with batches'
    k = data.draw(st.integers(0, len(whole)), label='cut after k batches')
    head, sd = _epoch(_loader(images, seed, B, train, mix, **kw), epoch, stop=k or None) if k else ([], None)
    if k == 0:  # cut before the first batch: the state of a fresh loader at this epoch
        first = _loader(images, seed, B, train, mix, **kw)
        first.set_epoch(epoch)
        sd = first.state_dict()
    if k == len(whole):  # cut after the epoch's last batch: it says so, and the trainer goes on with the next epoch
        assert sd['done'] and sd['epoch'] == epoch, sd
        return
    tail, _ = _epoch(_loader(images, None, B, train, mix, **kw), epoch, sd=sd)  # seed=None: the saved seed is taken
    _same(head + tail, whole)


@given(
    seed=st.integers(0, 2**62),
    B=st.integers(1, 7),
    train=st.booleans(),
    mix=st.booleans(),
    epoch=st.integers(0, 2),
    data=st.data(),
)
def test_resume_at_any_batch(images, seed, B, train, mix, epoch, data):
    "A map-style loader (crops, flips, erasing, mixup) cut after any batch of any epoch and resumed: the rest of the epoch, bit for bit."
    _check_resume(images, seed, B, train, mix, epoch, data, num_workers=0)


@settings(max_examples=15)
@given(seed=st.integers(0, 2**62), B=st.integers(2, 7), data=st.data())
def test_resume_at_any_batch_threads(images, seed, B, data):
    _check_resume(images, seed, B, True, True, 0, data, num_workers=2, worker_mode='thread')


# ---- mixing weights and boxes in their bounds ----------------------------------------------------------------------


def _mixer(draw_kw):
    try:
        return Mixup(**draw_kw)
    except ValueError:  # both alphas 0 and no min-max boxes: refused by name
        assume(False)


@given(
    kw=st.fixed_dictionaries(
        dict(
            mixup_alpha=st.sampled_from([0.0, 0.2, 0.8, 1.0, 5.0]),
            cutmix_alpha=st.sampled_from([0.0, 0.3, 1.0, 3.0]),
            cutmix_minmax=st.one_of(st.none(), st.tuples(st.floats(0, 0.49), st.floats(0.5, 1.0))),
            prob=st.floats(0, 1),
            switch_prob=st.floats(0, 1),
            mode=st.sampled_from(['batch', 'pair', 'elem']),
            correct_lam=st.booleans(),
            label_smoothing=st.floats(0, 1),
            num_classes=st.integers(1, 10),
        )
    ),
    n=st.integers(1, 9),
    H=st.integers(1, 12),
    W=st.integers(1, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_mixup_weights_and_targets_in_bounds(kw, n, H, W, seed):
    "Lambdas in [0, 1]; each mixed pixel between its two sources; soft targets rows of weights in [0, 1] summing to 1."
    m = _mixer(kw)
    r = np.random.RandomState(seed)
    lam, _ = m._params_per_batch(rng=r)
    lams, _ = m._params_per_elem(n, rng=r)
    assert 0.0 <= lam <= 1.0 and len(lams) == n and ((lams >= 0) & (lams <= 1)).all(), (lam, lams)
    x = torch.rand(n, 3, H, W, generator=torch.Generator().manual_seed(seed))
    lo, hi = torch.minimum(x, x.flip(0)), torch.maximum(x, x.flip(0))
    out, target = m(x.clone(), torch.randint(0, m.num_classes, (n,)), rng=Draws(seed))
    assert out.shape == x.shape and bool(((out >= lo - 1e-6) & (out <= hi + 1e-6)).all())
    assert target.shape == (n, m.num_classes) and bool(((target >= -1e-6) & (target <= 1 + 1e-6)).all())
    assert torch.allclose(target.sum(1), torch.ones(n), atol=1e-5)


@given(
    H=st.integers(1, 64),
    W=st.integers(1, 64),
    lam=st.floats(0, 1),
    count=st.one_of(st.none(), st.integers(1, 5)),
    minmax=st.one_of(st.none(), st.tuples(st.floats(0, 0.49), st.floats(0.5, 1.0))),
    correct=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_cutmix_box_inside_and_lambda_its_area(H, W, lam, count, minmax, correct, seed):
    "A CutMix box lies inside the image; the corrected lambda is the share of the image it leaves."
    (yl, yh, xl, xh), lam2 = cutmix_bbox_and_lam((3, H, W), lam, minmax, correct, count, np.random.RandomState(seed))
    yl, yh, xl, xh, lam2 = map(np.asarray, (yl, yh, xl, xh, lam2))
    assert ((0 <= yl) & (yl <= yh) & (yh <= H) & (0 <= xl) & (xl <= xh) & (xh <= W)).all(), (yl, yh, xl, xh)
    assert ((0 <= lam2) & (lam2 <= 1)).all(), lam2
    if correct or minmax is not None:
        assert np.allclose(lam2, 1 - (yh - yl) * (xh - xl) / (H * W))


# ---- crop and resize boxes inside the image, of the requested size -------------------------------------------------

ranges = st.tuples(st.floats(0.01, 1.0), st.floats(0.01, 1.0)).map(sorted).map(tuple)
ratios = st.tuples(st.floats(0.2, 5.0), st.floats(0.2, 5.0)).map(sorted).map(tuple)


@given(h=st.integers(1, 2000), w=st.integers(1, 2000), scale=ranges, ratio=ratios, key=seeds)
def test_random_resized_crop_box_inside(h, w, scale, ratio, key):
    "The random-resized-crop box lies inside the image."
    t, l, bh, bw = RandomResizedCropAndInterpolation.get_params(torch.empty(0, h, w), scale, ratio, Draws(key))
    assert 0 <= t and 0 <= l and t + bh <= h and l + bw <= w and bh >= 0 and bw >= 0, (t, l, bh, bw)
    if min(h, w) >= 8:  # (a smaller image may get an empty box, as timm's get_params gives it: no 0 < w check)
        assert bh > 0 and bw > 0, (t, l, bh, bw)


def test_device_plan_border_trims_all():
    "Found by test_device_plan_inside_the_image: a 2x2 image and crop_border_pixels=1 is refused by name (it divided by zero)."
    with pytest.raises(ValueError, match='trims the whole of a 2x2 image'):
        DeviceDecodeTransform((1, 1), False, crop_border_pixels=1).plan(torch.empty(0, 2, 2), Draws(0))


@settings(max_examples=25)
@given(
    h=st.integers(4, 48),
    w=st.integers(4, 48),
    size=st.tuples(st.integers(1, 20), st.integers(1, 20)),
    scale=st.tuples(st.floats(0.3, 1.0), st.floats(0.3, 1.0)).map(sorted).map(tuple),
    ratio=ratios,
    key=seeds,
    interp=st.sampled_from(['bilinear', 'bicubic', 'random']),
)
def test_random_resized_crop_output_size(h, w, size, scale, ratio, key, interp):
    "The crop of a uint8 image is resized to the requested size."
    img = torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(key % 2**32))
    out = RandomResizedCropAndInterpolation(size, scale, ratio, interp)(img, Draws(key))
    assert tuple(out.shape[-2:]) == size, (out.shape, size)


@given(
    h=st.integers(1, 3000),
    w=st.integers(1, 3000),
    size=st.tuples(st.integers(1, 512), st.integers(1, 512)),
    train=st.booleans(),
    scale=ranges,
    ratio=ratios,
    hflip=st.floats(0, 1),
    vflip=st.floats(0, 1),
    crop_pct=st.one_of(st.none(), st.floats(0.3, 1.0)),
    border=st.one_of(st.none(), st.integers(0, 20)),
    interp=st.sampled_from(['bilinear', 'bicubic', 'random']),
    key=seeds,
)
def test_device_plan_inside_the_image(h, w, size, train, scale, ratio, hflip, vflip, crop_pct, border, interp, key):
    "The device plan's box lies inside the image, its resize holds the requested crop, the crop's place inside it."
    assume(min(h, w) > 2 * (border or 0))  # a border that trims the whole image: test_device_plan_border_trims_all
    t = DeviceDecodeTransform(size, train, scale, ratio, hflip, vflip, interp, crop_pct, border)
    try:
        top, left, bh, bw, rh, rw, t2, l2, fh, fv, ii = t.plan(torch.empty(0, h, w), Draws(key))
    except ValueError as e:  # an eval resize smaller than the crop: refused by name (no padding on the device)
        assert not train and 'does not pad' in str(e)
        return
    assert 0 <= top and 0 <= left and top + bh <= h and left + bw <= w and bh >= 0 and bw >= 0
    assert rh >= size[0] and rw >= size[1] and 0 <= t2 and 0 <= l2 and t2 + size[0] <= rh and l2 + size[1] <= rw
    assert fh in (0, 1) and fv in (0, 1) and 0 <= ii < len(INTERPS) and (fh == 0 or train) and (fv == 0 or train)
    if train:
        assert (rh, rw) == size


# ---- index parsers: any bytes give a result or a named error, quickly, in bounded memory ----------------------------


@contextmanager
def bounded(nbytes: int, seconds: int = 5):
    "The block finishes within `seconds` (no hang) and allocates at most a few times `nbytes` (plus 1 MiB)."

    def on_alarm(*_):
        raise TimeoutError(f'over {seconds} s: a hang')

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    tracemalloc.start()
    try:
        yield
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert peak <= 8 * nbytes + (1 << 20), f'{peak:,} bytes allocated for {nbytes:,} bytes of input'


def _parquet_index(files: list, rows_extra: int = 0) -> bytes:
    "A Parquet index (version 2) of `files` ([name, size, rows, groups]), its table of zeros (`rows_extra` more rows than listed)."
    n = sum(f[2] for f in files)
    body = bytes(8 * INDEX_FIELDS * max(0, n + rows_extra))
    head = dict(
        format='timmdata parquet index',
        version=PARQUET_INDEX_VERSION,
        image_column='image',
        label_column='label',
        classes=['a'],
        files=[f + ['0' * 32, ''] for f in files],
        sha256=hashlib.sha256(body).hexdigest(),
    )
    return json.dumps(head).encode() + b'\n' + body


def _mutated(blob: bytes, data) -> bytes:
    "`blob` cut short, with bytes overwritten or inserted (hypothesis chooses)."
    ops = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(['cut', 'set', 'insert']),
                st.integers(0, max(0, len(blob))),
                st.binary(min_size=1, max_size=8),
            ),
            max_size=4,
        ),
        label='mutations',
    )
    for op, i, b in ops:
        i = min(i, len(blob))
        blob = blob[:i] if op == 'cut' else blob[:i] + b + blob[i + (len(b) if op == 'set' else 0) :]
    return blob


parquet_files = st.lists(
    st.tuples(
        st.text(st.characters(codec='ascii', exclude_characters='\0'), min_size=1, max_size=12),
        st.integers(0, 10**6),
        st.integers(0, 20),
        st.integers(0, 4),
    ).map(list),
    max_size=4,
)


@given(raw=st.binary(max_size=4000))
def test_parquet_index_any_bytes(raw):
    with bounded(len(raw)):
        try:
            head, table = parse_parquet_index(raw, 'idx')
        except (ParquetError, UnsafeNameError):
            return
    assert table.shape == (sum(e[2] for e in head['files']), INDEX_FIELDS)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2**64) | st.text(max_size=8),
    lambda v: st.lists(v, max_size=6) | st.dictionaries(st.text(max_size=4), v, max_size=3),
    max_leaves=12,
)


@given(files=parquet_files, rows_extra=st.integers(-3, 3), data=st.data())
def test_parquet_index_damaged(files, rows_extra, data):
    "An index with its table longer or shorter than it lists, a field of any JSON value, or bytes damaged: exactly its rows, or a named error."
    blob = _parquet_index(files, rows_extra)
    if data.draw(st.booleans(), label='a field of any value'):
        line, _, body = blob.partition(b'\n')
        head = json.loads(line)
        where = data.draw(st.sampled_from(['format', 'version', 'files', 'sha256'] + [i for i in range(len(files))]))
        value = data.draw(json_values, label='value')
        if isinstance(where, int):
            head['files'][where][data.draw(st.integers(0, 5), label='field')] = value
        else:
            head[where] = value
        blob = json.dumps(head).encode() + b'\n' + body
    blob = _mutated(blob, data)
    with bounded(len(blob)):
        try:
            head, table = parse_parquet_index(blob, 'idx')
        except (ParquetError, UnsafeNameError):
            return
    assert table.shape == (sum(e[2] for e in head['files']), INDEX_FIELDS)
    assert len(blob) == len(blob.partition(b'\n')[0]) + 1 + table.nbytes


_keys = st.text(st.characters(codec='ascii', exclude_characters='"\\'), min_size=1, max_size=6)
_exts = st.sampled_from(['jpg', 'cls', 'json', 'png'])
_tar_samples = st.lists(
    st.tuples(_keys, st.dictionaries(_exts, st.integers(0, 3000), min_size=1, max_size=3)), max_size=5
)


def _tar_like(samples) -> tuple:
    "(samples with members laid out as tar lays them: a 512-byte header before each, padded to 512; the file's size)."
    out, at = [], 0
    for key, members in samples:
        m = {}
        for ext, n in members.items():
            m[ext] = [at + 512, n]
            at += 512 + -(-n // 512) * 512
        out.append([key, m])
    return out, at + 1024


_nudges = st.sampled_from([0, 0, 0, 1, -1, 512, -512, 1024, -1536])


@given(tar=_tar_samples, data=st.data())
def test_shard_index_line_damaged(tar, data):
    """A shard index line, well formed with its numbers nudged (members moved into each other, out of the file), or
    damaged: None, or samples whose members all lie inside the shard, in order, a header apart (what the reader then
    reads without checking the tar again)."""
    samples, size = _tar_like(tar)
    line = _entry_line('s.tar', size, 7, samples)
    assert _entry_samples(line, size, 7) == samples  # the line as written reads back
    if data.draw(st.booleans(), label='numbers nudged'):
        nudged = [
            [k, {e: [o + data.draw(_nudges), n + data.draw(_nudges)] for e, (o, n) in m.items()}] for k, m in samples
        ]
        size += data.draw(_nudges, label='size nudged')
        line = _entry_line('s.tar', size, 7, nudged)
    else:
        line = _mutated(line.encode(), data).decode('ascii', 'replace')
    with bounded(len(line)):
        got = _entry_samples(line, size, 7)
    if got is None:
        return
    spans = [(o, n) for _, m in got for o, n in m.values()]  # in tar order
    assert all(512 <= o and 0 <= n and o + n <= size for o, n in spans), spans
    assert all(b[0] >= a[0] + a[1] + 512 for a, b in zip(spans, spans[1:])), spans


@given(raw=st.binary(max_size=3000), data=st.data())
def test_shard_index_file_any_bytes(tmp_path_factory, raw, data):
    "An index file of any bytes (or a real header then any bytes): read as a dict of lines, or dropped ({}), never an error."
    if data.draw(st.booleans(), label='with a real header'):
        raw = b'{"format":"timmdata shard index","version":2,"shards":[\n' + raw
    path = tmp_path_factory.mktemp('idx') / '_timmdata_index.json'
    path.write_bytes(raw)
    with bounded(len(raw)), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        got = _read_index(str(path))
    assert isinstance(got, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in got.items())


@given(raw=st.binary(max_size=3000), data=st.data())
def test_dataset_index_table_any_bytes(raw, data):
    "A dataset index table of any bytes (or a real first line and checksum around them): parsed, or `DatasetIndexError`."
    if data.draw(st.booleans(), label='well framed'):
        text = b'{"format":"timmdata dataset index","version":2}\n' + raw.replace(b'\r', b'')
        body = text if text.endswith(b'\n') else text + b'\n'
        raw = body + b'{"sha256":"%s"}\n' % hashlib.sha256(body).hexdigest().encode()
    with bounded(len(raw)):
        try:
            names, sizes, counts, digests, starts, version = parse_table(raw, 'idx')
        except DatasetIndexError:
            return
    assert len(names) == len(sizes) == len(counts) == len(digests) and version in (1, 2)
    assert len(starts) == max(1, len(names))  # (a table of no shards: one start, where its spans would begin)
    assert all(map(str.isascii, names)) and (counts >= 0).all() and (sizes >= 0).all()
