"""Issue 60's candidate that was measured and not taken: libjpeg-turbo's scaled IDCT for training crops.

A training crop at least twice the output on both sides (448x448 for 224) could be decoded at 1/2 scale (libjpeg's
scaled IDCT: a quarter of the IDCT, upsampling and colour work) and resized from there. On the photographic set
(`timmdata.tools.photos`, ImageNet's sizes) this prints how many of timm's RandomResizedCrop boxes qualify, and how far
the result lies from timmdata's default (timm's pixels: the full decode, then the antialiased bilinear resize of the
box), with PIL doing both (`Image.draft` is libjpeg's scaled decode). Few crops qualify at ImageNet's sizes and the
default would no longer give timm's pixels, so timmdata keeps the full decode of the crop's rows and columns.

    python bench/bench_scaled_idct.py [--data /tmp/timmdata_photos_1500] [--crops 4]
"""

import argparse
import glob
import io
import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', default='/tmp/timmdata_photos_1500', help='the photographic set (made there if absent)')
    ap.add_argument('--crops', type=int, default=4, help='random crops drawn per image')
    ap.add_argument('--size', type=int, default=224)
    a = ap.parse_args(argv)
    from timmdata.tools.photos import make_photo_set
    from timmdata.transforms import RandomResizedCropAndInterpolation

    files = sorted(glob.glob(str(make_photo_set(Path(a.data), n=1500) / 'train' / '*' / '*')))
    random.seed(0)
    torch.manual_seed(0)
    n = q = 0
    mad, mx = [], 0
    for f in files:
        data = Path(f).read_bytes()
        im = Image.open(io.BytesIO(data))
        if im.format != 'JPEG' or im.mode != 'RGB':
            continue
        for _ in range(a.crops):
            top, left, h, w = RandomResizedCropAndInterpolation.get_params(im, (0.08, 1.0), (3 / 4, 4 / 3))
            n += 1
            if h < 2 * a.size or w < 2 * a.size:
                continue
            q += 1
            box = (left, top, left + w, top + h)
            full = Image.open(io.BytesIO(data)).convert('RGB').resize((a.size, a.size), Image.BILINEAR, box=box)
            half = Image.open(io.BytesIO(data))
            half.draft('RGB', (im.width // 2, im.height // 2))
            half = half.convert('RGB').resize((a.size, a.size), Image.BILINEAR, box=tuple(v / 2 for v in box))
            d = np.abs(np.asarray(full, dtype=np.int16) - np.asarray(half, dtype=np.int16))
            mad.append(float(d.mean()))
            mx = max(mx, int(d.max()))
    print(f'{len(files)} files, {n} crops of {a.size}: {q} ({q / max(n, 1):.1%}) at least {2 * a.size}x{2 * a.size} '
          f'(decodable at 1/2)')
    if mad:
        print(f'1/2 decode + resize against the full decode + resize: mean absolute difference {np.mean(mad):.2f} '
              f'levels (worst crop {max(mad):.2f}), largest single difference {mx}')


if __name__ == '__main__':
    main()
