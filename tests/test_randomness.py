"""Explicit randomness (`timmdata.config.Draws`): a training loop that draws from torch's and Python's global generators
while the loader runs neither changes the loader's batches nor has its own draws changed by the loader, in every worker
mode (threads, processes, the main process); batches are bit-identical across the modes; a transform that is not ours
keeps working through the compatibility path (per-sample seeded globals) where that is safe, and is refused by name in
thread mode."""
import random
import pytest, torch
from timmdata import ImageDataset, create_loader
from _helpers import same_batches

KW = dict(input_size=64, batch_size=8, is_training=True, device='cpu', seed=11, re_prob=0.25, hflip=0.5)
MODES = [('thread', 2), ('process', 2), ('process', 0)]


@pytest.fixture(scope='module')
def root(sample_root): return sample_root / 'train'


def run(root, mode, workers, loop_draws: bool, transform=None, epochs=2, **kw):
    """(the loader's batches, the loop's own draws): the loop seeds torch's and Python's generators once, then draws from
    them after every batch (as a CPU dropout or drop-path would) when `loop_draws`."""
    ld = create_loader(ImageDataset(str(root)), **{**KW, **kw}, num_workers=workers, worker_mode=mode)
    if transform is not None: ld.dataset.transform = transform
    torch.manual_seed(1234); random.seed(1234)
    batches, draws = [], []
    for e in range(epochs):
        ld.set_epoch(e)
        for x, y in ld:
            batches.append((x.clone(), y.clone()))
            if loop_draws: draws.append((torch.rand(4), random.random()))
    return batches, draws


def loop_alone(n):
    "The draws the loop makes with no loader at all: what it must get whatever the loader does."
    torch.manual_seed(1234); random.seed(1234)
    return [(torch.rand(4), random.random()) for _ in range(n)]


@pytest.mark.parametrize('mode,workers', MODES)
def test_loop_and_loader_do_not_disturb_each_other(root, mode, workers):
    quiet, _ = run(root, mode, workers, loop_draws=False)
    busy, draws = run(root, mode, workers, loop_draws=True)
    assert len(quiet) == 2 * (60 // 8) and len(draws) == len(busy)
    same_batches(busy, quiet)  # the loop's draws do not change the loader's batches
    alone = loop_alone(len(draws))
    assert len(alone) == len(draws)
    for (a, b), (c, d) in zip(draws, alone, strict=True):  # nor does the loader change the loop's draws
        assert torch.equal(a, c) and b == d


def test_same_batches_in_every_mode(root):
    ref, _ = run(root, 'process', 0, loop_draws=True)
    for mode, workers in MODES[:2]:
        got, _ = run(root, mode, workers, loop_draws=True)
        same_batches(got, ref)


def test_foreign_transform_compatibility(root):
    "torchvision's random transforms draw from the global generators: exact in processes, refused by name in threads."
    from torchvision import transforms as tvt
    tf = tvt.Compose([tvt.RandomResizedCrop(64), tvt.RandomHorizontalFlip(), tvt.PILToTensor()])
    a, _ = run(root, 'process', 2, loop_draws=False, transform=tf, epochs=1)
    b, _ = run(root, 'process', 0, loop_draws=True, transform=tf, epochs=1)  # the loop's states are put back
    same_batches(a, b)
    with pytest.raises(ValueError, match="worker_mode='thread' needs a transform that takes its random draws explicitly"):
        run(root, 'thread', 2, loop_draws=False, transform=tf, epochs=1)
