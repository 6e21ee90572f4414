"""The reused shared batch memory (BatchRing) behind create_loader's default CPU path: never a wrong or stale batch."""
import pytest
import torch
from timmdata.engine.batch_ring import BatchRing
from timmdata.loader import create_loader

class IndexImages(torch.utils.data.Dataset):
    "Sample i is a 3x16x16 uint8 image whose pixels spell i (channel 0: i % 256, channel 1: i // 256), label i."
    def __init__(self, n): self.n, self.transform = n, None
    def __len__(self): return self.n
    def __getitem__(self, i):
        x = torch.empty(3, 16, 16, dtype=torch.uint8)
        x[0], x[1], x[2] = i % 256, i // 256, 7
        return x, i

def decode_ids(x):
    "Undo create_loader's normalisation (mean/std 0/1 below) and read each image's index back."
    u = (x * 255).round().to(torch.int64)
    assert (u[:, 2] == 7).all()
    return (u[:, 0, 0, 0] + 256 * u[:, 1, 0, 0]).tolist()

def in_ring(ring, x):
    "Is batch `x` memory of this process's own mapping of the ring (a slot), not a fresh segment?"
    base = ring.ring.data_ptr()
    return base <= x.data_ptr() < base + ring.ring.numel()

def loader(ds, **kw):
    return create_loader(ds, (3, 16, 16), 8, mean=(0, 0, 0), std=(1, 1, 1), num_workers=2, device='cpu', **kw)

def test_ring_is_used_and_every_epoch_is_right():
    ds = IndexImages(203)
    ld = loader(ds, is_training=False)
    assert isinstance(ld.loader.collate_fn, BatchRing)
    for epoch in range(4):
        ids, labels = [], []
        for x, y in ld:
            ids += decode_ids(x); labels += y.tolist()
        assert ids == labels == list(range(203)), f'epoch {epoch}'  # eval: in order, last batch partial
    assert int(ld.loader.collate_fn.busy.sum()) == 0  # every slot came back

def test_training_epochs_with_kept_outputs_and_early_stops():
    ds = IndexImages(160)
    ld = loader(ds, is_training=True, hflip=0., color_jitter=None, scale=(1., 1.), ratio=(1., 1.))
    kept = []
    for epoch in range(5):
        ids = []
        for k, (x, y) in enumerate(ld):
            assert decode_ids(x) == y.tolist()
            ids += y.tolist(); kept.append((x, y))
            if epoch == 2 and k == 3: break  # a loop that stops early: later batches must still be right
        if epoch != 2: assert sorted(ids) == list(range(160))
    for x, y in kept: assert decode_ids(x) == y.tolist()  # outputs are the prefetcher's own memory, never a slot

def test_plain_use_without_releases_falls_back_to_fresh_memory():
    ring = BatchRing((8, 3, 16, 16), num_workers=2, slots_per_worker=2)
    dl = torch.utils.data.DataLoader(IndexImages(80), batch_size=8, num_workers=2, collate_fn=ring)
    held = [(x, y) for x, y in dl]  # nobody releases: after 2 batches per worker, fresh memory
    for x, y in held:
        assert (x[:, 0, 0, 0].long() + 256 * x[:, 1, 0, 0].long()).tolist() == y.tolist()
    assert int(ring.busy.sum()) == 4

def test_no_ring_without_workers():
    ld0 = create_loader(IndexImages(16), (3, 16, 16), 8, num_workers=0, device='cpu')
    assert not isinstance(ld0.loader.collate_fn, BatchRing)
    assert BatchRing.choose((8, 3, 16, 16), 0, 3).ring is None

def test_batches_arrive_as_views_of_the_main_processs_ring_and_targets_as_copies():
    "A worker sends a slot's place in the ring, not a file descriptor: the main process reads its own mapping."
    # slots for the prefetch_factor (2) batches a worker has queued, the one it writes and the one being read
    ring = BatchRing((8, 3, 16, 16), num_workers=2, slots_per_worker=4)
    dl = torch.utils.data.DataLoader(IndexImages(120), batch_size=8, num_workers=2, collate_fn=ring, persistent_workers=True)
    tbase = ring.targets.untyped_storage().data_ptr()
    for epoch in range(2):
        ys = []
        for x, y in dl:
            assert in_ring(ring, x)  # memory of the ring this process made
            assert y.untyped_storage().data_ptr() != tbase  # targets are copied out: the slot is rewritten later
            assert (x[:, 0, 0, 0].long() + 256 * x[:, 1, 0, 0].long()).tolist() == y.tolist()
            ys.append(y)
            ring.release(x)
        assert torch.cat(ys).tolist() == list(range(120)), f'epoch {epoch}'  # targets kept across slot reuse stay right
    assert int(ring.busy.sum()) == 0

class SoftTargets(IndexImages):
    def __getitem__(self, i):
        x, _ = super().__getitem__(i)
        return x, torch.tensor([i / 2, 1.0])  # not class indices: sent the usual way

def test_non_index_targets_are_sent_as_they_are():
    ring = BatchRing((8, 3, 16, 16), num_workers=2, slots_per_worker=2)
    dl = torch.utils.data.DataLoader(SoftTargets(32), batch_size=8, num_workers=2, collate_fn=ring)
    for x, y in dl:
        assert y.dtype == torch.float32 and y.shape == (8, 2)
        assert (y[:, 0] * 2).long().tolist() == (x[:, 0, 0, 0].long() + 256 * x[:, 1, 0, 0].long()).tolist()
        ring.release(x)

def test_a_ring_batch_unpickled_elsewhere_is_an_error_not_garbage():
    import pickle
    from timmdata.engine.batch_ring import _InRing  # the pickling of a slot: private to batch_ring, tested here
    ring = BatchRing((2, 3, 4, 4), num_workers=1, slots_per_worker=1)
    ref = _InRing(ring.key, 0, ring.ring[0])
    assert pickle.loads(pickle.dumps(ref)).data_ptr() == ring.ring.data_ptr()  # the owner gets its own view back
    stranger = _InRing('another-process-ring', 0, ring.ring[0])
    try: pickle.loads(pickle.dumps(stranger))
    except RuntimeError as e: assert 'does not own' in str(e) and 'create_loader' in str(e)
    else: raise AssertionError('a batch of a ring this process does not own was accepted')

@pytest.mark.slow
def test_ring_with_spawned_workers():
    "Spawned workers receive the ring by pickling (its memory by file descriptor, once); batches still come back as views."
    ring = BatchRing((8, 3, 16, 16), num_workers=2, slots_per_worker=4)
    dl = torch.utils.data.DataLoader(IndexImages(64), batch_size=8, num_workers=2, collate_fn=ring,
                                     multiprocessing_context='spawn')
    ys = []
    for x, y in dl:
        assert in_ring(ring, x)
        assert (x[:, 0, 0, 0].long() + 256 * x[:, 1, 0, 0].long()).tolist() == y.tolist()
        ys += y.tolist(); ring.release(x)
    assert ys == list(range(64))
