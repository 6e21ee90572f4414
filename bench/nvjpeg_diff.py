"""nvJPEG's decode against the CPU decoders, raw uint8 pixels: the evidence for the nvJPEG parity bound of
tests/test_gpu_decode.py. TorchCodec's and torchvision's nvJPEG against timmdata's libjpeg-turbo decode, and Pillow
against it, over 70 generated JPEGs of 500x375 (quality 90). Needs CUDA and TorchCodec.
    python bench/nvjpeg_diff.py
"""
import pathlib
import tempfile

import numpy as np
import torch
import torchvision.io as tio
from PIL import Image

from timmdata.pixels.decode import decode_image, torchcodec_jpeg
from timmdata.tools.sample_data import make_sample_dataset

if not torch.cuda.is_available() or torchcodec_jpeg() is None:
    raise SystemExit('nvjpeg_diff: needs CUDA and TorchCodec')
root = make_sample_dataset(pathlib.Path(tempfile.mkdtemp()) / 'd', n_train=4, n_val=3, size=(500, 375), num_workers=4)
files = sorted(pathlib.Path(root).rglob('*.JPEG'))
dec = torchcodec_jpeg()
stats = {k: [] for k in ('tc_vs_native', 'tv_vs_native', 'tc_vs_tv', 'pil_vs_native')}
for f in files:
    b = f.read_bytes()
    nat = decode_image(b, 'RGB', to_tensor=True).int()
    src = torch.frombuffer(bytearray(b), dtype=torch.uint8)
    tc = dec([src], mode='RGB', device='cuda')[0].cpu().int()
    tv = tio.decode_jpeg(src, device='cuda').cpu().int()
    pil = torch.from_numpy(np.array(Image.open(f).convert('RGB'))).permute(2, 0, 1).int()
    for k, (a, c) in {'tc_vs_native': (tc, nat), 'tv_vs_native': (tv, nat), 'tc_vs_tv': (tc, tv), 'pil_vs_native': (pil, nat)}.items():
        d = (a - c).abs().float()
        stats[k].append((d.max().item(), d.mean().item(), torch.quantile(d.flatten()[:2**24], 0.999).item()))
for k, v in stats.items():
    v = torch.tensor(v)
    print(f'{k:14s} over {len(v)} JPEGs 500x375 q90: max {v[:, 0].max():.0f} levels, mean {v[:, 1].mean():.3f}, '
          f'99.9th percentile (worst image) {v[:, 2].max():.0f}')
