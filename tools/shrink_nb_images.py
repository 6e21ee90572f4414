"""Re-encodes large PNG outputs saved in notebooks as JPEG (quality 85), to keep nbs/ and docs/ small.

Photo-like figures compress ten times better as JPEG; plots with few colours stay PNG.
Usage: python tools/shrink_nb_images.py nbs/*.ipynb"""
import base64, io, json, sys
from PIL import Image

def shrink(path, min_bytes=60_000):
    nb = json.load(open(path, encoding='utf-8'))
    changed = 0
    for cell in nb['cells']:
        for out in cell.get('outputs', []):
            data = out.get('data', {})
            png = data.get('image/png')
            if not png: continue
            raw = base64.b64decode(png if isinstance(png, str) else ''.join(png))
            if len(raw) < min_bytes: continue
            im = Image.open(io.BytesIO(raw))
            if im.mode in ('RGBA', 'LA', 'P'):
                bg = Image.new('RGB', im.size, 'white'); im = im.convert('RGBA'); bg.paste(im, mask=im.split()[-1]); im = bg
            buf = io.BytesIO(); im.convert('RGB').save(buf, 'JPEG', quality=85)
            if buf.tell() > 0.7 * len(raw): continue
            del data['image/png']
            data['image/jpeg'] = base64.b64encode(buf.getvalue()).decode()
            changed += 1
    if changed:
        with open(path, 'w', encoding='utf-8') as f: json.dump(nb, f, indent=1, ensure_ascii=False); f.write('\n')
    return changed

if __name__ == '__main__':
    for p in sys.argv[1:]: print(p, shrink(p), 'images re-encoded')
