"""The batches tests/test_start_methods.py compares across multiprocessing start methods, as digests. Run as a script:

    python tests/_start_batches.py METHOD ROOT SHARDS   ->  one JSON line {case: [digest per batch]}

It sets the start method (fork, forkserver: Python 3.14's default on Linux, spawn: macOS's and Windows'), then builds
each loader with 2 worker processes: 'train' and 'eval' over an image folder ('train' with RandAugment, random erasing
and a FastCollateMixup collate left on numpy's global stream), 'stream' over WebDataset shards, and 'resume' (the
training run cut after 3 batches and resumed from its state), and 'device': the device-decode loader on the CPU
(TorchCodec's CPU decoder), whose workers send each batch's JPEG bytes in a batch ring and the rest by value."""
import hashlib, io, json, multiprocessing, sys, warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ft_batches as fb  # noqa: E402


def stream_loader(shards):
    from timmdata import create_dataset, create_loader
    ds = create_dataset('wds/toy', root=str(shards), split='train', is_training=True, batch_size=8, seed=5)
    return create_loader(ds, 64, 8, is_training=True, device='cpu', seed=5, num_workers=2, worker_mode='process', re_prob=0.25)


def device_loader(root):
    from timmdata import ImageDataset
    from timmdata.engine.gpu_decode import create_device_decode_loader
    return create_device_decode_loader(ImageDataset(root), 64, 8, is_training=True, decode_device='cpu', seed=5,
                                       num_workers=2, re_prob=0.25)


def all_cases(root, shards) -> dict:
    out = {case: fb.run(fb.loader(root, case, 'process', 2))[0] for case in fb.CASES}
    out['device'] = fb.run(device_loader(root))[0]
    out['stream'] = fb.run(stream_loader(shards))[0]
    head, sd = fb.run(fb.loader(root, 'train', 'process', 2), stop=3)
    out['resume'] = head + fb.run(fb.loader(root, 'train', 'process', 2), state=sd)[0]
    return out


if __name__ == '__main__':  # the guard forkserver and spawn need: they import this file again in each worker
    warnings.simplefilter('ignore')
    multiprocessing.set_start_method(sys.argv[1], force=True)
    print(json.dumps(all_cases(sys.argv[2], sys.argv[3])))
