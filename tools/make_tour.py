"""Makes the home page's tour pictures (nbs/images/tour/*.png): the first picture each page of the data's way draws
from a real run, shrunk to a thumbnail. Run after a page's picture changes: `python tools/make_tour.py`.
`--check` exits 1 when a tour picture is missing or a page named below has no picture."""
import base64, io, json, sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
NBS, OUT = ROOT / 'nbs', ROOT / 'nbs' / 'images' / 'tour'
# (picture name, notebook): the stages in the order the data goes through them (README's tour lists the same)
TOUR = [('readers', 'readers/05_readers'), ('decode', 'pixels/06_decode'), ('resample', 'pixels/09_resample'),
        ('transforms', '10_transforms'), ('dataset', '20_dataset'), ('store', 'store/19_format'),
        ('shards', 'streams/22_shard_io'), ('global_order', 'streams/24_global_order'), ('streams', 'streams/25_streaming'),
        ('collate', 'engine/27_collate'), ('batch_ring', 'engine/28_batch_ring'), ('mixup', '29_mixup'),
        ('batch_plan', 'engine/33_batch_plan'), ('feeder', 'engine/30_feeder'), ('prefetch', 'engine/31_prefetch'),
        ('threads', 'engine/37_threads'), ('device_decode', 'engine/36_gpu_decode'), ('loader', '38_loader')]
WIDTH = 520


def first_picture(nb: Path) -> bytes:
    for c in json.loads(nb.read_text(encoding='utf-8'))['cells']:
        for o in c.get('outputs', []):
            for mime in ('image/png', 'image/jpeg'):
                if mime in o.get('data', {}):
                    d = o['data'][mime]
                    return base64.b64decode(''.join(d) if isinstance(d, list) else d)
    raise SystemExit(f'{nb.relative_to(ROOT)} has no picture output: the tour shows each page\'s first picture')


def main(argv) -> int:
    if '--check' in argv:
        missing = [n for n, _ in TOUR if not (OUT / f'{n}.png').is_file()]
        for _, nb in TOUR: first_picture(NBS / f'{nb}.ipynb')
        if missing: print(f'tour pictures missing: {missing}; run python tools/make_tour.py', file=sys.stderr); return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, nb in TOUR:
        im = Image.open(io.BytesIO(first_picture(NBS / f'{nb}.ipynb'))).convert('RGB')
        if im.width > WIDTH: im = im.resize((WIDTH, round(im.height * WIDTH / im.width)), Image.LANCZOS)
        im = im.quantize(colors=128, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        im.save(OUT / f'{name}.png', optimize=True)
        print(f'{name}: {nb} -> {(OUT / f"{name}.png").relative_to(ROOT)} ({(OUT / f"{name}.png").stat().st_size // 1024} KB)')
    return 0


if __name__ == '__main__': sys.exit(main(sys.argv[1:]))
