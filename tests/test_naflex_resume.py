"""NaFlex loaders resume mid-epoch bit for bit: state_dict() after any batch, load_state_dict() into a freshly built
loader (another torch seed), and the following batches equal an uninterrupted run's, over map-style datasets and
streams, in the main process and in workers; states that cannot resume exactly are refused, naming the field."""
import pytest, torch
from timmdata.dataset import ImageDataset
from timmdata.naflex_loader import create_naflex_loader
from timmdata.naflex_mixup import NaFlexMixup
from timmdata.engine.resume import ResumeStateError
from timmdata.tools.sample_data import make_sample_dataset
from _helpers import clone, run_epochs, same_batches

KEYS = ('patches', 'patch_coord', 'patch_valid', 'seq_len')


@pytest.fixture(scope='module')
def root(tmp_path_factory):
    return make_sample_dataset(tmp_path_factory.mktemp('nf') / 'data', n_train=6, n_val=1, classes=['a', 'b', 'c'],
                               size=(64, 48), portrait_every=3, num_workers=0) / 'train'


def _map(root, num_workers=0, mix=True, **kw):
    return create_naflex_loader(
        ImageDataset(str(root)), patch_size_choices=[8, 16], train_seq_lens=(4, 8, 16), batch_size=4, is_training=True,
        mixup_fn=NaFlexMixup(num_classes=3) if mix else None, re_prob=0.5, re_mode='pixel', re_count=2, color_jitter=0.4,
        num_workers=num_workers, device='cpu', seed=3, **kw)


def _run(loader, epochs, **kw):
    "run_epochs keeping each batch's KEYS (a tensor or a list of sizes) and targets."
    return run_epochs(loader, epochs, take=lambda b: ([clone(b[0][k]) for k in KEYS], b[1].clone()), **kw)


def _same(a, b): same_batches(a, b, names=('patch data', 'targets'))


def _cut_and_resume(make, make_resumed=None, epochs=2, cuts=(1, 3)):
    torch.manual_seed(1)
    ref, _ = _run(make(), epochs)
    n0 = len(make())
    for stop in (*cuts, n0):  # n0: cut at the end of epoch 0
        torch.manual_seed(1)
        a, sd = _run(make(), epochs, stop=stop)
        torch.manual_seed(2)  # the new process draws other seeds: nothing may depend on them
        b, _ = _run((make_resumed or make)(), epochs - sd['epoch'], start=sd['epoch'], sd=sd)
        _same(a + b, ref)
    return ref


@pytest.mark.parametrize('nw,mix', [(0, True), (2, True), (0, False)], ids=['main-mixup', 'workers-mixup', 'main-jitter'])
def test_map_resume_bit_identical(root, nw, mix):
    ref = _cut_and_resume(lambda: _map(root, nw, mix))
    assert len({x[0].shape[1] for x, _ in ref}) > 1 and len({x[0].shape[2] for x, _ in ref}) > 1  # several lengths, patch sizes


def test_map_resume_with_another_worker_count(root):
    _cut_and_resume(lambda: _map(root, 2), lambda: _map(root, 0), cuts=(3,))


def test_refused_states_name_the_field(root):
    torch.manual_seed(1)
    _, sd = _run(_map(root), 1, stop=2)
    with pytest.raises(ResumeStateError, match='world_size: saved 1, this loader 2'):
        _map(root, distributed=True, rank=0, world_size=2).load_state_dict(sd)
    with pytest.raises(ResumeStateError, match='max_tokens_per_batch'):
        create_naflex_loader(ImageDataset(str(root)), patch_size_choices=[8, 16], train_seq_lens=(4, 8, 16), batch_size=2,
                             is_training=True, num_workers=0, device='cpu', seed=3).load_state_dict(sd)


def _stream(shards, nw):
    from timmdata.streams.streaming import IterableImageDataset
    ds = IterableImageDataset(shards, reader='wds/toy', is_training=True, shuffle_size=16, shuffle_initial=4)
    return create_naflex_loader(ds, patch_size_choices=[8, 16], train_seq_lens=(4, 8, 16), batch_size=2, is_training=True,
                                mixup_fn=NaFlexMixup(num_classes=32), re_prob=0.5, re_mode='pixel', num_workers=nw, device='cpu', seed=3)


@pytest.mark.slow
@pytest.mark.parametrize('nw', [0, 2])
def test_stream_resume_bit_identical(tmp_path, nw):
    pytest.importorskip('webdataset')
    from test_streaming import write_timm_shards
    shards = write_timm_shards(tmp_path / 'shards')
    _cut_and_resume(lambda: _stream(shards, nw), cuts=(1, 2, 5, 10))  # 10: a worker is done
    if nw:
        torch.manual_seed(1)
        _, sd = _run(_stream(shards, nw), 1, stop=2)
        with pytest.raises(ResumeStateError, match='num_workers: saved 2, this loader 1'):
            _stream(shards, 0).load_state_dict(sd)
