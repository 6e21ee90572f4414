"""Golden files: what this version's loader delivers for a fixed seed, the resume states it saves, and the files its
writers make, checked against copies kept in tests/golden/ -- so a change to seeding, to the resume format or to a file
format between versions fails here, where a run compared with another run of the same code never could.

Regenerate after a deliberate change: `TIMMDATA_REGOLD=1 .venv/bin/python -m pytest tests/test_golden.py` rewrites every
file in tests/golden/ (reading Parquet needs pyarrow: `pip install 'timmdata[parquet]'`). A change that alters them changes
what users' seeded runs or saved checkpoints give, so it must say so in CHANGELOG.md (which seeds, states or files differ).

What is compared, and why so:
- The images are kept (tests/golden/images: made once by `make_sample_dataset`), not drawn at each run: the drawing
  depends on Pillow's JPEG encoder and NumPy, so drawn images would fail the loader's digests after a Pillow upgrade.
  `test_sample_images_drawn_again_the_same` checks the generator still draws those very bytes (skipped, with its reason,
  where `drawing_version()` says Pillow, NumPy or the drawing code is not the one that drew them).
- uint8 batches: the loader's batches before normalisation (the prefetcher's input: `loader.loader`, `fast_collate`'s
  and `FastCollateMixup`'s uint8 NCHW), compared exactly by SHA-256: decoding, cropping, resizing and the RandAugment ops
  are integer arithmetic, the same bytes on every CPU. (AugMix's and mixup's weights come from NumPy's Beta and Dirichlet
  draws, through libm: another libm could, rarely, move a rounded pixel by one; then compare the float statistics.)
- float batches (after the prefetcher: colour jitter on the batch, normalisation, random erasing) and soft targets are
  float arithmetic, whose last bits can differ between instruction sets (FMA, vector widths). A digest of values rounded
  to 3 decimals is no cure: of the ~10^5 values of a batch, a last-bit difference moves some across a rounding edge.
  So each image's per-channel mean and standard deviation are kept (4 decimals) and compared within 2e-3, and the soft
  targets within 1e-3: far below what another draw of jitter, erasing or lambda moves them, far above rounding.
- Resume states are JSON: the state after K batches must be the kept one, field for field, and the kept one must resume
  to the rest of the epoch's kept digests, or be refused by a `ResumeStateError` that names the state's version.
- The tests `test_*_change_is_caught` change the seed derivation and the state format (monkeypatched) and check that the
  comparisons above then fail: the golden files can catch what they are for."""

import hashlib, json, os, shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import timmdata.engine.batch_plan as batch_plan
import timmdata.streams.streaming as streaming
from timmdata import IterableImageDataset, create_loader, write_shards
from timmdata.dataset import ImageDataset
from timmdata.engine.resume import ResumeStateError
from timmdata.index.dataset_index import DATASET_INDEX_FILE, read_dataset_index, spans_of
from timmdata.index.shard_index import INDEX_FILE, _entry_samples, _read_index, scan_shard
from timmdata.mixup import FastCollateMixup
from timmdata.parquet.parquet_index import parse_parquet_index
from timmdata.tools.sample_data import drawing_version, make_sample_dataset

GOLDEN = Path(__file__).parent / 'golden'
REGOLD = os.environ.get('TIMMDATA_REGOLD') == '1'
MAX_BYTES = 300_000  # the folder is checked in: kept small

CLASSES = ['a', 'b', 'c', 'd']
SAMPLE_SPEC = dict(n_train=6, n_val=0, classes=CLASSES, size=(40, 32), seed=0)  # 24 images, ~1 KB each
SIZE, BATCH, SEED, K = (3, 24, 24), 8, 3, 1  # 3 batches an epoch; states saved after K batches
SHARD_SIZE, SHARD_LENGTHS = 10, [10, 10, 4]
PARQUET_FILES, PARQUET_ROWS = 2, [12, 12]

# timm's train.py: FastCollateMixup(**mixup_args) as create_loader's collate_fn with the prefetcher (--mixup 0.8 --cutmix 1.0)
MIXUP = dict(
    mixup_alpha=0.8,
    cutmix_alpha=1.0,
    cutmix_minmax=None,
    prob=1.0,
    switch_prob=0.5,
    mode='batch',
    label_smoothing=0.1,
    num_classes=len(CLASSES),
)
POLICIES = {
    'crop_flip': dict(),  # create_loader(is_training=True)'s defaults: random resized crop, flip, jitter on the batch
    'randaugment': dict(auto_augment='rand-m9-mstd0.5-inc1', re_prob=0.25, re_mode='pixel'),  # timm's RA recipe
    'augmix': dict(auto_augment='augmix-m3-w3'),
    'mixup': dict(collate_fn=MIXUP),
    'mixup_elem': dict(collate_fn=dict(MIXUP, mode='elem')),  # a lambda and a box per image
}
# the modes that run a batch in different places: this process, worker processes, worker threads (the same batches)
MODES = {
    'main': dict(num_workers=0),
    'processes': dict(num_workers=2),
    'threads': dict(num_workers=2, worker_mode='thread'),
}


def _kw(policy: str, mode: str) -> dict:
    kw = dict(POLICIES[policy], **MODES[mode])
    if 'collate_fn' in kw:
        kw['collate_fn'] = FastCollateMixup(**kw['collate_fn'])  # a fresh one per loader
    return kw


def map_loader(images: Path, policy: str, mode: str):
    return create_loader(
        ImageDataset(str(images / 'train')), SIZE, BATCH, is_training=True, device='cpu', seed=SEED, **_kw(policy, mode)
    )


def stream_loader(shards: Path, mode: str):
    ds = IterableImageDataset(str(shards), reader='wds/golden', split='train', is_training=True, batch_size=BATCH)
    return create_loader(ds, SIZE, BATCH, is_training=True, device='cpu', seed=SEED, **MODES[mode])


def _targets(y: torch.Tensor):
    return y.tolist() if not y.is_floating_point() else np.round(y.double().numpy(), 4).tolist()


def uint8_record(x: torch.Tensor, y: torch.Tensor) -> dict:
    "A uint8 batch as kept: its shape and SHA-256 (exact), its targets (class indices, or soft targets to 4 decimals)."
    assert x.dtype == torch.uint8, f'expected the uint8 batch before normalisation; got {x.dtype}'
    return dict(shape=list(x.shape), sha256=hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest(), y=_targets(y))


def float_record(x: torch.Tensor, y: torch.Tensor) -> dict:
    "A float batch as kept: each image's per-channel mean and standard deviation (4 decimals), its targets."
    assert x.is_floating_point(), x.dtype
    x = x.double()
    stats = torch.cat([x.mean((2, 3)), x.std((2, 3))], 1)
    return dict(shape=list(x.shape), stats=np.round(stats.numpy(), 4).tolist(), y=_targets(y))


def ignore(x, y):
    return None


def run(loader, record, sd=None, stop=None, inner=False) -> tuple:
    "(records of epoch 0's batches, the state after them): from state `sd` (through JSON), `stop` batches at most."
    if sd is not None:
        loader.load_state_dict(json.loads(json.dumps(sd)))
    loader.set_epoch(0)
    out = []
    for x, y in loader.loader if inner else loader:
        out.append(record(x, y))
        if len(out) == stop:
            break
    return out, loader.state_dict()


def same_records(got: list, want: list, what: str):
    "The batches match the kept ones: as many, uint8 bytes exactly, floats and soft targets within their tolerances."
    assert len(got) == len(want), f'{what}: {len(got)} batches, golden {len(want)}'
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        where = f'{what}, batch {i}'
        assert g['shape'] == w['shape'], f"{where}: shape {g['shape']}, golden {w['shape']}"
        if 'sha256' in w:
            assert g['sha256'] == w['sha256'], f'{where}: other pixels than the golden batch'
        else:
            a, b = np.asarray(g['stats']), np.asarray(w['stats'])
            assert a.shape == b.shape and np.allclose(a, b, rtol=0, atol=2e-3), (
                f'{where}: image statistics differ by up to {np.abs(a - b).max():.4f} from the golden ones'
            )
        ya, yb = np.asarray(g['y'], np.float64), np.asarray(w['y'], np.float64)
        assert ya.shape == yb.shape and np.allclose(ya, yb, rtol=0, atol=1e-3), (
            f"{where}: targets {g['y']}, golden {w['y']}"
        )


def tree_digests(folder: Path) -> dict:
    "{relative path: SHA-256} of every file under `folder`."
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob('*'))
        if p.is_file()
    }


def shard_samples(shards: Path) -> list:
    "(shard, member name, SHA-256 of its bytes) of every member of every tar shard, in tar order."
    import tarfile

    out = []
    for p in sorted(shards.glob('*.tar')):
        with tarfile.open(p) as t:
            out += [(p.name, m.name, hashlib.sha256(t.extractfile(m).read()).hexdigest()) for m in t.getmembers()]
    return out


README = '''# Golden files

Written by `tests/test_golden.py` from this version's code (`TIMMDATA_REGOLD=1 python -m pytest tests/test_golden.py`)
and checked against it: sample images, the loader's batch digests per augmentation policy and worker mode, resume
states, shards with their indexes, Parquet files with their index. A change that alters them says so in CHANGELOG.md.
'''


# ---- regeneration -----------------------------------------------------------------------------------------------


def _regenerate(tmp: Path):
    "Writes every golden file from this version's code (`TIMMDATA_REGOLD=1`)."
    from timmdata.parquet.parquet_files import need_pyarrow, write_sample_parquet
    from timmdata.parquet.parquet_index import write_parquet_index

    need_pyarrow()  # the Parquet files are part of the set: refused by name rather than left stale
    shutil.rmtree(GOLDEN, ignore_errors=True)
    GOLDEN.mkdir()
    drawn = make_sample_dataset(tmp / 'drawn', num_workers=0, **SAMPLE_SPEC)
    shutil.copytree(drawn / 'train', GOLDEN / 'images' / 'train')
    images = GOLDEN / 'images'
    write_shards(images / 'train', GOLDEN / 'shards', shard_size=SHARD_SIZE, progress=False)
    files = sorted((images / 'train').rglob('*.JPEG'))
    write_sample_parquet(
        GOLDEN / 'parquet',
        [(f.read_bytes(), CLASSES.index(f.parent.name)) for f in files],
        CLASSES,
        files=PARQUET_FILES,
    )
    write_parquet_index(GOLDEN / 'parquet', progress=False)
    # the map-style shard reader's index (its stamps are this run's mtimes: the test parses each line with its own)
    shutil.copytree(GOLDEN / 'shards', tmp / 'shards')
    for p in (tmp / 'shards').glob('*.tar'):  # a fixed mtime: the index (its stamps) is the same at each regeneration
        os.utime(p, ns=(10**18, 10**18))
    len(ImageDataset(str(tmp / 'shards'), reader='shards', split='train'))
    shutil.copy(tmp / 'shards' / INDEX_FILE, GOLDEN / 'shards' / INDEX_FILE)
    batches = {}
    for policy in POLICIES:
        batches[policy] = dict(
            uint8=run(map_loader(images, policy, 'main'), uint8_record, inner=True)[0],
            float=run(map_loader(images, policy, 'main'), float_record)[0],
        )
    stream = run(stream_loader(tmp / 'shards', 'main'), uint8_record, inner=True)[0]
    digests = dict(
        sample_spec=dict(SAMPLE_SPEC, size=list(SAMPLE_SPEC['size'])),
        drawing_version=drawing_version(),
        images=tree_digests(images),
        batches=batches,
        stream=stream,
    )
    (GOLDEN / 'README.md').write_text(README)
    (GOLDEN / 'digests.json').write_text(json.dumps(digests, indent=1) + '\n')
    for name, loader in (
        ('map', map_loader(images, 'crop_flip', 'main')),
        ('stream', stream_loader(tmp / 'shards', 'main')),
    ):
        sd = run(loader, ignore, stop=K)[1]
        (GOLDEN / f'state_{name}.json').write_text(json.dumps(sd, indent=1) + '\n')


@pytest.fixture(scope='module')
def golden(tmp_path_factory) -> dict:
    "The kept digests (rewritten first with TIMMDATA_REGOLD=1)."
    if REGOLD:
        _regenerate(tmp_path_factory.mktemp('regold'))
    if not (GOLDEN / 'digests.json').is_file():
        pytest.fail(f'{GOLDEN} has no digests.json: write the golden files with TIMMDATA_REGOLD=1')
    return json.loads((GOLDEN / 'digests.json').read_text())


@pytest.fixture(scope='module')
def copies(golden, tmp_path_factory) -> Path:
    "A copy of the golden folder: readers may write beside what they read (an index), never into tests/golden."
    dst = tmp_path_factory.mktemp('golden') / 'golden'
    shutil.copytree(GOLDEN, dst)
    return dst


def state(name: str) -> dict:
    return json.loads((GOLDEN / f'state_{name}.json').read_text())


# ---- the checks, also run under the deliberate changes below ------------------------------------------------------


def check_batches(golden, images, policy, mode, floats=True):
    want = golden['batches'][policy]
    got = run(map_loader(images, policy, mode), uint8_record, inner=True)[0]
    same_records(got, want['uint8'], f'{policy} ({mode}), uint8')
    if floats:
        got = run(map_loader(images, policy, mode), float_record)[0]
        same_records(got, want['float'], f'{policy} ({mode}), float')


def check_resume(golden, make, want_uint8: list, want_float, name: str):
    "The state after K batches is the kept one; the kept one resumes to the rest of the epoch (or is refused by name)."
    sd = run(make(), ignore, stop=K)[1]
    assert sd == state(name), f'state_{name}.json: this version saves {json.dumps(sd)}'
    try:
        rest = run(make(), uint8_record, sd=state(name), inner=True)[0]
    except ResumeStateError as e:  # a format change refused by name is allowed; the state check above still fails
        assert 'version' in str(e), f'state_{name}.json refused without naming its version: {e}'
        return
    same_records(rest, want_uint8[K:], f'resumed from state_{name}.json, uint8')
    if want_float is not None:
        same_records(
            run(make(), float_record, sd=state(name))[0], want_float[K:], f'resumed from state_{name}.json, float'
        )


def check_stream(golden, shards, mode):
    got = run(stream_loader(shards, mode), uint8_record, inner=True)[0]
    same_records(got, golden['stream'], f'stream ({mode})')


# ---- the tests --------------------------------------------------------------------------------------------------


def test_golden_folder_is_small_and_whole(golden):
    files = [p for p in GOLDEN.rglob('*') if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    assert total < MAX_BYTES, f'tests/golden holds {total:,} bytes: keep it under {MAX_BYTES:,}'
    assert tree_digests(GOLDEN / 'images') == golden['images'], 'tests/golden/images differ from digests.json'
    assert len(golden['images']) == 24 and len(golden['batches']) == len(POLICIES), (
        len(golden['images']),
        list(golden['batches']),
    )


def test_sample_images_drawn_again_the_same(golden, tmp_path):
    "make_sample_dataset draws the kept images byte for byte (with the Pillow, NumPy and drawing code that drew them)."
    if drawing_version() != golden['drawing_version']:
        pytest.skip(
            f"make_sample_dataset's drawing_version() is {drawing_version()}, the golden images' "
            f"{golden['drawing_version']} (another Pillow, NumPy or drawing code): its bytes may differ"
        )
    spec = dict(golden['sample_spec'], size=tuple(golden['sample_spec']['size']))
    drawn = make_sample_dataset(tmp_path / 'drawn', num_workers=0, **spec)
    assert tree_digests(drawn / 'train') == tree_digests(GOLDEN / 'images' / 'train')


@pytest.mark.parametrize('mode', list(MODES))
@pytest.mark.parametrize('policy', list(POLICIES))
def test_batches(golden, copies, policy, mode):
    "Each policy's batches for the fixed seed, in each worker mode: the kept ones."
    check_batches(golden, copies / 'images', policy, mode)


@pytest.mark.parametrize('policy', list(POLICIES))
def test_resume_map(golden, copies, policy):
    want = golden['batches'][policy]
    check_resume(golden, lambda: map_loader(copies / 'images', policy, 'main'), want['uint8'], want['float'], 'map')


@pytest.mark.parametrize('mode', ['processes', 'threads'])
def test_resume_map_workers(golden, copies, mode):
    want = golden['batches']['crop_flip']
    check_resume(golden, lambda: map_loader(copies / 'images', 'crop_flip', mode), want['uint8'], None, 'map')


@pytest.mark.parametrize('mode', list(MODES))
def test_stream(golden, copies, mode):
    "A stream over the kept shards (`IterableImageDataset`, the global order): the kept batches; resumed, the rest."
    check_stream(golden, copies / 'shards', mode)
    if mode != 'processes':
        check_resume(golden, lambda: stream_loader(copies / 'shards', mode), golden['stream'], None, 'stream')


def test_shards_and_their_indexes(golden, copies, tmp_path):
    "The kept shards, their `_info.json`, dataset index and shard index are read with their sample counts; the writer still writes them."
    shards = copies / 'shards'
    info = json.loads((shards / '_info.json').read_text())['splits']['train']
    assert info['shard_lengths'] == SHARD_LENGTHS and info['num_samples'] == sum(SHARD_LENGTHS), info
    index = read_dataset_index(str(shards))
    names = [index.table.name(i) for i in range(len(index.table))]
    assert names == info['filenames'] and index.counts.tolist() == SHARD_LENGTHS, (names, index.counts)
    assert index.sizes.tolist() == [(shards / n).stat().st_size for n in names]
    for i, name in enumerate(names):  # each shard's spans: read, checked against their digest, where the scan says
        assert index.spans(i).tolist() == spans_of(scan_shard(str(shards / name))).tolist(), (
            f'{DATASET_INDEX_FILE}: {name}'
        )
    lines = _read_index(str(GOLDEN / 'shards' / INDEX_FILE))  # read in place: only read
    assert sorted(lines) == names, sorted(lines)
    for name, n in zip(names, SHARD_LENGTHS, strict=True):
        _, size, stamp, *_ = json.loads(lines[name])
        samples = _entry_samples(lines[name], size, stamp)
        assert samples is not None and len(samples) == n, f'{INDEX_FILE}: {name} not read as {n} samples'
        assert samples == scan_shard(str(shards / name)), f'{INDEX_FILE}: {name} differs from a scan of the shard'
    mapped = ImageDataset(str(shards), reader='shards', split='train')
    assert len(mapped) == sum(SHARD_LENGTHS)
    assert sorted(mapped.reader.targets) == sorted(CLASSES.index(c) for c in CLASSES for _ in range(6))
    ds = IterableImageDataset(str(shards), reader='wds/golden', split='train', batch_size=BATCH)
    got = [int(y) for _, y in ds]
    assert len(got) == sum(SHARD_LENGTHS) and sorted(got) == sorted(mapped.reader.targets), got
    write_shards(copies / 'images' / 'train', tmp_path / 'again', shard_size=SHARD_SIZE, progress=False)
    assert shard_samples(tmp_path / 'again') == shard_samples(GOLDEN / 'shards'), (
        'write_shards puts other samples, or in another order, into the shards than it did'
    )


def test_parquet_index(golden):
    "The kept Parquet index parses to its rows (no pyarrow needed)."
    from timmdata.parquet.parquet_format import PARQUET_INDEX_FILE

    head, table = parse_parquet_index((GOLDEN / 'parquet' / PARQUET_INDEX_FILE).read_bytes(), PARQUET_INDEX_FILE)
    assert [e[2] for e in head['files']] == PARQUET_ROWS and table.shape[0] == sum(PARQUET_ROWS), (
        head['files'],
        table.shape,
    )
    assert [e[0] for e in head['files']] == [
        p.relative_to(GOLDEN / 'parquet').as_posix() for p in sorted((GOLDEN / 'parquet' / 'data').glob('*.parquet'))
    ]


def test_parquet_files(golden, copies):
    "The kept Parquet files are read as a dataset, every row once."
    pytest.importorskip('pyarrow', reason="reading Parquet needs pyarrow: pip install 'timmdata[parquet]'")
    from timmdata import create_dataset

    ds = create_dataset('parquet/golden', root=str(copies / 'parquet'), split='train')
    got = [int(y) for _, y in ds]
    assert len(ds) == len(got) == sum(PARQUET_ROWS), (len(ds), len(got))
    assert sorted(got) == sorted(CLASSES.index(c) for c in CLASSES for _ in range(6))


# ---- the golden files catch what they are for --------------------------------------------------------------------


def test_seed_change_is_caught(golden, copies, monkeypatch):
    "Another per-sample seed derivation (the batch plan's `sample_key`): the batch digests no longer match."
    key = batch_plan.sample_key
    monkeypatch.setattr(batch_plan, 'sample_key', lambda seed, epoch, rep, p: key(seed, epoch, rep, p + 1))
    with pytest.raises(AssertionError, match='other pixels'):
        check_batches(golden, copies / 'images', 'crop_flip', 'main', floats=False)


def test_stream_seed_change_is_caught(golden, copies, monkeypatch):
    "Another seed mixing in the stream (its draws' keys): the stream's digests no longer match."
    mix = streaming.mix_seed
    monkeypatch.setattr(streaming, 'mix_seed', lambda *a: mix(*a, 1))
    with pytest.raises(AssertionError, match='other pixels'):
        check_stream(golden, copies / 'shards', 'main')


def test_state_format_change_is_caught(golden, copies, monkeypatch):
    "A state with another field, or another version: the state check fails (and the older state is refused by name)."
    want = golden['batches']['crop_flip']
    make = lambda: map_loader(copies / 'images', 'crop_flip', 'main')
    plain = batch_plan.plain_state

    def renamed(d, *where):  # the state's `offset` saved as `position` (plain_state also walks the state's parts)
        out = plain(d, *where)
        return out if where else {('position' if k == 'offset' else k): v for k, v in out.items()}

    monkeypatch.setattr(batch_plan, 'plain_state', renamed)
    with pytest.raises(AssertionError, match='state_map.json: this version saves'):
        check_resume(golden, make, want['uint8'], None, 'map')
    monkeypatch.setattr(batch_plan, 'plain_state', plain)
    monkeypatch.setattr(batch_plan, 'STATE_VERSION', 2)
    with pytest.raises(AssertionError, match='state_map.json: this version saves'):
        check_resume(golden, make, want['uint8'], None, 'map')
    with pytest.raises(ResumeStateError, match='state version 1'):
        make().load_state_dict(state('map'))
