"""Hostile loader states (issue 62): a state is untrusted input. `load_state_dict` of every loader and stream checks
the whole state before using it: a malformed or edited one is a `ResumeStateError` naming the field and its value, and
the loader is left as it was (before: `{'end': 1000}` gave 1,000 samples from 10 images, `{'offset': -40}` 48, a
missing key a `KeyError`, `samples_delivered: 10**9` an empty epoch, `batches_delivered: 10**12` a stream spinning for
ever, `partitions: 10**7` half a gigabyte). The fuzzer feeds mutated states."""
import copy, io, json, random
import pytest
from PIL import Image
from timmdata.dataset import ImageDataset
from timmdata.loader import create_loader
from timmdata.streams.streaming import IterableImageDataset
from timmdata.engine.resume import ResumeStateError
from timmdata.tools.sample_data import make_sample_dataset
from _helpers import write_shards


@pytest.fixture(scope='module')
def images(tmp_path_factory):
    "10 images (2 classes x 5)."
    return make_sample_dataset(tmp_path_factory.mktemp('hostile_resume') / 'd', n_train=5, n_val=1, classes=['a', 'b'], size=(20, 16))


@pytest.fixture(scope='module')
def shards(tmp_path_factory):
    "4 shards x 5 samples."
    root = tmp_path_factory.mktemp('hostile_resume_wds')
    b = io.BytesIO()
    Image.new('RGB', (20, 16), (90, 30, 60)).save(b, 'JPEG')
    write_shards(root, 'h', 4, 5, lambda i, s: b.getvalue())
    return root


def _map_loader(images, seed=0, **kw):
    return create_loader(ImageDataset(str(images / 'train')), (3, 16, 16), 2, is_training=True, num_workers=0,
                         device='cpu', use_prefetcher=False, seed=seed, **kw)


def _stream_loader(shards, order='global', **kw):
    ds = IterableImageDataset(str(shards), reader='wds/h', split='train', is_training=True, batch_size=2, order=order, **kw)
    return create_loader(ds, (3, 16, 16), 2, is_training=True, num_workers=0, device='cpu', use_prefetcher=False)


def _refused(dl, sd, field):
    "`sd` is refused with a `ResumeStateError` naming `field`, and the loader's state is what it was."
    before = json.dumps(dl.state_dict())
    with pytest.raises(ResumeStateError, match=field):
        dl.load_state_dict(sd)
    assert json.dumps(dl.state_dict()) == before


@pytest.mark.parametrize('change, field', [
    (dict(end=1000), 'end'),  # 1,000 samples from 10 images
    (dict(offset=8, end=2), 'offset'),  # 0 samples
    (dict(offset=-40), 'offset'),  # 48 samples
    (dict(done='no'), 'done'),
    (dict(epoch=1.5), 'epoch'),
    (dict(rep=-1), 'rep'),
    (dict(seed=2**70), 'seed'),
    (dict(offset=True), 'offset'),
    (dict(done=True), 'done'),  # at odds with its offset and end
    (dict(batches_delivered=10**9), 'batches_delivered'),
], ids=lambda v: json.dumps(v) if isinstance(v, dict) else v)
def test_map_state_fields_are_checked(images, change, field):
    dl = _map_loader(images)
    _refused(dl, {**dl.state_dict(), **change}, field)


def test_map_state_seed_in_range_without_a_seed_given(images):
    "A loader whose seed was drawn takes the state's: one above 2**63 was taken as it was."
    dl = _map_loader(images, seed=None)
    _refused(dl, {**dl.state_dict(), 'seed': 2**70}, 'seed')


def test_map_state_missing_key_is_named(images):
    dl = _map_loader(images)
    sd = dl.state_dict()
    del sd['end']
    _refused(dl, sd, "no 'end'")


def test_map_state_still_resumes(images):
    "A real state, through JSON, still resumes (the checks do not refuse what a loader saves)."
    dl = _map_loader(images)
    it = iter(dl); next(it); next(it)
    sd = json.loads(json.dumps(dl.state_dict()))
    rest = sum(1 for _ in it)
    dl2 = _map_loader(images)
    dl2.load_state_dict(sd)
    assert sum(1 for _ in dl2) == rest
    for stop in range(0, 6):  # every state of an epoch, and the finished one, loads
        dl = _map_loader(images)
        it = iter(dl)
        for _ in range(stop):
            next(it)
        _map_loader(images).load_state_dict(json.loads(json.dumps(dl.state_dict())))


@pytest.mark.parametrize('change, field', [
    (dict(samples_delivered=10**9), 'samples_delivered'),  # an empty epoch
    (dict(samples_delivered=2**64), 'samples_delivered'),  # OverflowError
    (dict(samples_delivered=-2), 'samples_delivered'),
    (dict(epoch='1'), 'epoch'),
    (dict(batches_delivered=None), 'batches_delivered'),
    (dict(fingerprint=[]), 'fingerprint'),
], ids=lambda v: json.dumps(v) if isinstance(v, dict) else v)
def test_global_stream_state_fields_are_checked(shards, change, field):
    dl = _stream_loader(shards)
    sd = dl.state_dict()
    assert 'samples_delivered' in sd
    _refused(dl, {**sd, **change}, field)


def test_global_stream_partitions_are_bounded(shards):
    "partitions 10**7 sized arrays per batch (+540 MB): refused by the bound of the pass."
    dl = _stream_loader(shards)
    sd = dl.state_dict()
    sd['fingerprint']['partitions'] = 10**7
    _refused(dl, sd, 'partitions')


def test_shards_stream_batches_delivered_is_bounded(shards):
    "A training stream in the shards order with batches_delivered 10**12 spun for ever (islice over an endless stream)."
    dl = _stream_loader(shards, order='shards')
    sd = dl.state_dict()
    assert 'samples_delivered' not in sd
    _refused(dl, {**sd, 'batches_delivered': 10**12}, 'batches_delivered')
    del sd['batch_size']
    _refused(dl, sd, "no 'batch_size'")


def test_stream_states_still_resume(shards):
    for order in ('global', 'shards'):
        dl = _stream_loader(shards, order=order)
        it = iter(dl); next(it)
        sd = json.loads(json.dumps(dl.state_dict()))
        rest = sum(1 for _ in it)
        dl2 = _stream_loader(shards, order=order)
        dl2.load_state_dict(sd)
        assert sum(1 for _ in dl2) == rest, order


_VALUES = [None, True, False, -1, 0, 1, 2, 3, 7, 10**12, 2**63, 2**64, -2**63, 1.5, float('nan'), '1', 'no', [], {}, [1], {'a': 1}]


def _mutate(sd: dict, rng: random.Random) -> dict:
    "A state with one to three fields replaced by odd values, deleted, or nudged by a little."
    sd = copy.deepcopy(sd)
    for _ in range(rng.randint(1, 3)):
        k = rng.choice(sorted(sd))
        r = rng.random()
        if r < 0.15:
            del sd[k]
        elif r < 0.5 and isinstance(sd[k], int) and not isinstance(sd[k], bool):
            sd[k] += rng.choice([-3, -2, -1, 1, 2, 3, 10, 1000])
        elif k == 'fingerprint' and isinstance(sd[k], dict) and sd[k]:
            sd[k][rng.choice(sorted(sd[k]))] = rng.choice(_VALUES)
        else:
            sd[k] = rng.choice(_VALUES)
        if not sd:
            break
    return sd


def _fuzz_states(make, cases: int, seed: int):
    "Each mutated state loads (and its pass ends, with at most an epoch's batches) or is a `ResumeStateError`; nothing else."
    rng = random.Random(seed)
    dl = make()
    it = iter(dl); next(it)
    good, full = dl.state_dict(), len(make())
    refused = 0
    for case in range(cases):
        sd = _mutate(good, rng)
        dl = make()
        try:
            dl.load_state_dict(sd)
        except ResumeStateError:
            refused += 1
            continue
        except Exception as e:
            pytest.fail(f'case {case}: {sd!r} raised {type(e).__name__}: {e}')
        n = 0
        for _ in dl:
            n += 1
            assert n <= full + 1, f'case {case}: {sd!r} gave more than an epoch of batches'
    assert refused, 'no mutated state was refused'


def test_fuzz_map_states(images):
    _fuzz_states(lambda: _map_loader(images), 120, 0)


def test_fuzz_stream_states(shards):
    _fuzz_states(lambda: _stream_loader(shards), 60, 1)
    _fuzz_states(lambda: _stream_loader(shards, order='shards'), 40, 2)


@pytest.mark.slow
def test_fuzz_states_slow(images, shards):
    "More cases: `TIMMDATA_SLOW=1 pytest tests/test_hostile_resume.py`."
    _fuzz_states(lambda: _map_loader(images), 2000, 10)
    _fuzz_states(lambda: _stream_loader(shards), 1000, 11)
