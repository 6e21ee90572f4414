"""NaFlex over a stream (issue 15): create_naflex_loader takes an IterableImageDataset; token-budget batches of one
sequence length, every sample once per epoch across ranks and workers, the same number of batches on every rank."""
import pytest, torch

pytest.importorskip('webdataset')
from test_streaming import write_timm_shards  # shards whose class is the sample's index
from timmdata.naflex_loader import create_naflex_loader
from timmdata.streams.streaming import IterableImageDataset


def _loader(root, rank, world):
    ds = IterableImageDataset(root, reader='wds/toy', is_training=True, shuffle_size=16, shuffle_initial=4, rank=rank, world_size=world)
    return ds, create_naflex_loader(ds, patch_size=8, train_seq_lens=(4, 8, 16), batch_size=4, is_training=True,
                                    num_workers=2, device='cpu', seed=3)


def test_naflex_over_a_stream_on_two_ranks(tmp_path):
    root = write_timm_shards(tmp_path / 'shards')  # 8 shards of 4: 2 ranks x 2 workers, 2 shards each
    loaders = [_loader(root, r, 2) for r in range(2)]
    orders = []
    for epoch in range(2):
        seen, counts = [], []
        for ds, loader in loaders:
            loader.loader.dataset.set_epoch(epoch)  # the wrapper passes the epoch on to the stream (and its workers)
            n = 0
            for d, y in loader:
                L = d['patches'].shape[1]
                assert L in (4, 8, 16) and d['patches'].dtype == torch.float32
                assert int(d['patch_valid'].sum(1).max()) <= L  # each image fits its batch's sequence length
                assert len(y) * L <= 64 or len(y) == 1  # the token budget: batch_size x the longest sequence
                seen += y.tolist(); n += 1
            assert n == len(loader), f'rank {len(counts)}: {n} batches, len() says {len(loader)}'
            counts.append(n)
        assert sorted(seen) == list(range(32)), f'epoch {epoch}: every sample once across ranks and workers'
        assert counts[0] == counts[1], f'ranks yield different batch counts: {counts}'
        orders.append(seen)
    assert orders[0] != orders[1]  # reshuffled every epoch
