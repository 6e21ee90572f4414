"""Makes the home page's tour pictures (nbs/images/tour/*.png): the first picture six pages of the data's way draw
from a real run, drawn larger than on their pages (up to 1.5x, at most 820 px wide) so that their labels can be read
on the home page, whose table names every stage in text. Run after one of those pictures changes:
`python tools/make_tour.py`. `--check` exits 1 when a tour picture is missing or a page named below has no picture."""
import base64, io, json, sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
NBS, OUT = ROOT / 'nbs', ROOT / 'nbs' / 'images' / 'tour'
# (picture name, notebook): six stages in the order the data goes through them (the home page shows them in this order)
TOUR = [('decode', 'pixels/06_decode'), ('transforms', '10_transforms'), ('collate', 'batch/27_collate'),
        ('global_order', 'streams/24_global_order'), ('feeder', 'engine/30_feeder'), ('loader', '38_loader')]
WIDTH, SCALE = 820, 1.5  # at most 1.5x the page's picture, at most 820 px wide


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
        s = min(SCALE, WIDTH / im.width)  # larger text than on the page, so that the labels can be read
        im = im.resize((round(im.width * s), round(im.height * s)), Image.LANCZOS)
        im = im.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        im.save(OUT / f'{name}.png', optimize=True)
        print(f'{name}: {nb} -> {(OUT / f"{name}.png").relative_to(ROOT)} ({(OUT / f"{name}.png").stat().st_size // 1024} KB)')
    return 0


if __name__ == '__main__': sys.exit(main(sys.argv[1:]))
