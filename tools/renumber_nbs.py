#!/usr/bin/env python
"""Renumbers nbs/NN_name.ipynb in the data's way: a notebook imports only notebooks with lower numbers, grouped into the
docs sections a reader scans, staying close to today's order.

    python tools/renumber_nbs.py --dry-run     # prints old -> new, the sections, the moves forced by imports
    python tools/renumber_nbs.py               # git mv the notebooks, rewrite every reference, write nbs/sections.json
    (then: nbdev_clean && nbdev_export, and commit)

How the order is made:
1. Each numbered notebook's module is its `#| default_exp` (a notebook without one, a tutorial, goes by its name less the
   number). Its imports are every `from timmdata.X import`, `from .X import`, `import timmdata.X` in its code cells:
   in `#| export` cells they are hard (the module needs X), in other cells soft (a test or a demo uses X).
2. SECTIONS below gives each known module a docs section. A notebook the table does not know (a new one) goes into
   the latest section among the notebooks it imports, or beside its old neighbour when it imports none.
3. A notebook imported by one of an earlier section moves into that section (reported: a test cell that pulls a
   notebook forward may be better moved into the imported notebook).
4. Inside a section, a topological order of the imports, ties broken by today's numbers. A soft import that closes a
   circle (a test in 02_decode using transforms, which imports decode) is left out of the order, and reported.
5. Numbers 00, 01, ... in that order, two digits, no letter suffixes.

References rewritten (old stem as a whole word: `14_loader.ipynb`, `14_loader.html`, `14_loader.md`, `14_loader`): every
text file git tracks except the built site (docs/) and the generated library (timmdata/: nbdev_export rewrites it),
so notebooks' links, nbs/*.yml, tools/ (nbtest.py, the docs build), tests/, README.md, Makefile. Page names do not
change (the docs build drops the number), so links between pages keep working. nbs/sections.json is written for the
docs build (tools/docs/build.py), which groups the navigation into these sections.
"""
import argparse, heapq, json, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / 'nbs'
SECTIONS_FILE = 'sections.json'

# docs section: the modules (or tutorial names) that belong to it, in the order a reader meets them
SECTIONS = [
    ('Start here', ['sample_data', 'settings', 'untrusted', 'torch_compat', 'runtime']),
    ('Samples: read, decode, transform', ['config', 'constants', 'readers.core', 'readers.__init__', 'readers.targets', 'readers.class_map',
                                          'readers.reader', 'readers.img_extensions', 'readers.reader_image_folder',
                                          'readers.reader_image_in_tar', 'readers.reader_image_tar', 'readers.reader_factory', 'decode', 'stages', 'resample', 'transforms']),
    ('Augmentation', ['auto_augment', 'random_erasing', 'jitter', 'target_transforms', 'tf_preprocessing',
                      'naflex_transforms', 'transforms_factory']),
    ('Datasets, shards and streams', ['store', 'dataset', 'net', 'shard_cache', 'shard_io', 'shard_index', 'global_order',
                                      'streaming', 'hf_readers', 'readers.reader_wds', 'readers.reader_hfds',
                                      'readers.reader_hfids', 'readers._hfds']),
    ('Batches and the device', ['collate', 'mixup', 'batch_ring', 'feeder', 'prefetch']),
    ('Sampling, resume and the loader', ['distributed_sampler', 'batch_plan', 'resume', 'gpu_decode', 'threads',
                                         'scheduled_sampler', 'loader', 'dataset_factory']),
    ('NaFlex', ['naflex_random_erasing', 'naflex_mixup', 'naflex_dataset', 'naflex_loader']),
    ('The store and tools', ['cache', 'shards', 'bench', 'check', 'cli']),
    ('Tutorials and timm compatibility', ['data_loading_from_first_principles', 'training_frameworks', 'dataset_info',
                                          'imagenet_info', 'model_config', 'real_labels']),
]
IMPORT_RE = re.compile(r'^\s*(?:from\s+(?:timmdata\.|\.)(\w+)\s+import|import\s+timmdata\.(\w+))', re.M)
NUMBERED_RE = re.compile(r'^(\d+)([a-z]?)_(.+)\.ipynb$')


def old_key(name: str) -> tuple:
    "'27b_shard_index.ipynb' -> (27, 'b', name): today's reading order."
    m = NUMBERED_RE.match(name)
    return (int(m.group(1)), m.group(2), name)


def read_notebooks(nbs: Path) -> dict:
    "name: {'module', 'key' (section lookup), 'hard', 'soft': {module: first cell}} for every numbered notebook."
    out = {}
    for p in sorted(nbs.glob('*.ipynb'), key=lambda p: old_key(p.name) if NUMBERED_RE.match(p.name) else (10**9, '', p.name)):
        m = NUMBERED_RE.match(p.name)
        if not m: continue
        module, hard, soft = None, {}, {}
        for i, c in enumerate(json.loads(p.read_text(encoding='utf-8'))['cells']):
            if c['cell_type'] != 'code': continue
            src = ''.join(c['source'])
            d = re.search(r'^#\|\s*default_exp\s+(\S+)', src, re.M)
            if d: module = d.group(1)
            exported = re.search(r'^#\|\s*export', src, re.M) is not None
            for a, b in IMPORT_RE.findall(src): (hard if exported else soft).setdefault(a or b, i)
        out[p.name] = dict(module=module, key=module or m.group(3), hard=hard, soft=soft)
    return out


def plan(nbs: Path = NBS):
    "(order: [(old name, new name, section)], notes: [str]) for the notebooks in `nbs`."
    info = read_notebooks(nbs)
    home = {v['module']: n for n, v in info.items() if v['module']}
    names = list(info)  # today's order
    notes = []
    def deps(n, kind): return {home[m]: cell for m, cell in info[n][kind].items() if m in home and home[m] != n}
    hard = {n: deps(n, 'hard') for n in names}
    soft = {n: {d: c for d, c in deps(n, 'soft').items() if d not in hard[n]} for n in names}

    # soft edges that would close a circle are left out (hard ones first, then soft ones in today's order)
    edges = {n: set(hard[n]) for n in names}
    def reaches(a, b):
        seen, todo = set(), [a]
        while todo:
            x = todo.pop()
            if x == b: return True
            if x not in seen: seen.add(x); todo += edges[x]
        return False
    for n in names:
        if any(reaches(d, n) for d in hard[n]): raise SystemExit(f'{n}: its exported code imports itself through {sorted(hard[n])}: an import circle to fix first')
    for n in names:
        for d, cell in soft[n].items():
            if reaches(d, n): notes.append(f'left out: {n} cell {cell} imports {info[d]["module"]} ({d}), which imports {n}: '
                                           f'move that cell into {d}')
            else: edges[n].add(d)

    # sections: the table, then unknown notebooks by what they import (or beside their old neighbour)
    index = {k: i for i, (_, ks) in enumerate(SECTIONS) for k in ks}
    sec = {}
    for j, n in enumerate(names):
        if info[n]['key'] in index: sec[n] = index[info[n]['key']]
    for j, n in enumerate(names):  # today's order: a new notebook's imports are mostly placed already
        if n in sec: continue
        placed = [sec[d] for d in edges[n] if d in sec]
        sec[n] = max(placed) if placed else next((sec[m] for m in reversed(names[:j]) if m in sec), 0)
        notes.append(f'new: {n} ({info[n]["key"]}) is not in SECTIONS: placed in "{SECTIONS[sec[n]][0]}" by '
                     + ('its imports' if placed else 'its old neighbour') + '; add it to the table in tools/renumber_nbs.py')
    changed = True
    while changed:  # a notebook imported from an earlier section moves there
        changed = False
        for n in names:
            for d in edges[n]:
                if sec[d] > sec[n]:
                    kind = 'exported code' if d in hard[n] else f'cell {soft[n][d]}'
                    notes.append(f'pulled: {d} into "{SECTIONS[sec[n]][0]}" (from "{SECTIONS[sec[d]][0]}"): {n} {kind} imports it')
                    sec[d], changed = sec[n], True

    # a topological order: sections in turn, inside one the table's order then today's numbers as tie-break
    rank = {n: (sec[n], index.get(info[n]['key'], 10**6), old_key(n)) for n in names}
    indeg = {n: len(edges[n]) for n in names}
    users = {n: [m for m in names if n in edges[m]] for n in names}
    ready = [(rank[n], n) for n in names if indeg[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, n = heapq.heappop(ready)
        order.append(n)
        for m in users[n]:
            indeg[m] -= 1
            if indeg[m] == 0: heapq.heappush(ready, (rank[m], m))
    assert len(order) == len(names), 'circle left in the imports'
    if len(order) > 100: raise SystemExit(f'{len(order)} notebooks: two digits hold 100')
    out = []
    for i, n in enumerate(order):
        new = f'{i:02d}_{NUMBERED_RE.match(n).group(3)}.ipynb'
        out.append((n, new, SECTIONS[sec[n]][0]))
    # a section read in order: the topological sort may interleave sections only if an import forces it
    secs = [sec[n] for n in order]
    if secs != sorted(secs): notes.append('warning: sections interleave in the order (an import across sections): see the list')
    return out, notes


def tracked_text_files(root: Path) -> list:
    files = subprocess.run(['git', 'ls-files'], cwd=root, capture_output=True, text=True, check=True).stdout.split('\n')
    out = []
    for f in files:
        if not f or f.startswith(('docs/', 'timmdata/')) or f == 'tools/renumber_nbs.py' or f.endswith(('.png', '.jpg', '.JPEG', '.so', '.whl', '.ico')): continue
        p = root / f
        if p.is_file():
            try: p.read_text(encoding='utf-8'); out.append(p)
            except (UnicodeDecodeError, OSError): pass
    return out


def rewrite_references(root: Path, renames: dict) -> list:
    "Replace every old stem (a whole word) by the new one in the tracked text files; the files changed."
    stems = {o[:-len('.ipynb')]: n[:-len('.ipynb')] for o, n in renames.items() if o != n}
    if not stems: return []
    pat = re.compile(r'(?<![\w])(' + '|'.join(re.escape(s) for s in sorted(stems, key=len, reverse=True)) + r')(?![\w])')
    changed = []
    for p in tracked_text_files(root):
        s = p.read_text(encoding='utf-8')
        t = pat.sub(lambda m: stems[m.group(1)], s)
        if t != s: p.write_text(t, encoding='utf-8'); changed.append(str(p.relative_to(root)))
    return changed


def apply(root: Path, order: list) -> list:
    renames = {o: n for o, n, _ in order}
    nbs = root / 'nbs'
    # two steps through temporary names, so a new name may be an old one of another notebook
    moves = [(o, n) for o, n in renames.items() if o != n]
    for o, _ in moves: subprocess.run(['git', 'mv', f'nbs/{o}', f'nbs/{o}.renumber-tmp'], cwd=root, check=True)
    for o, n in moves: subprocess.run(['git', 'mv', f'nbs/{o}.renumber-tmp', f'nbs/{n}'], cwd=root, check=True)
    changed = rewrite_references(root, renames)
    sections = []
    for _, n, s in order:
        if not sections or sections[-1]['title'] != s: sections.append({'title': s, 'notebooks': []})
        sections[-1]['notebooks'].append(n)
    (nbs / SECTIONS_FILE).write_text(json.dumps(sections, indent=1) + '\n', encoding='utf-8')
    subprocess.run(['git', 'add', f'nbs/{SECTIONS_FILE}'], cwd=root, check=True)
    return changed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--dry-run', action='store_true', help='print the plan; change nothing')
    ap.add_argument('--root', default=str(ROOT), help='the repository (default: this one)')
    a = ap.parse_args(argv)
    root = Path(a.root).resolve()
    order, notes = plan(root / 'nbs')
    last = None
    for o, n, s in order:
        if s != last: print(f'\n== {s}'); last = s
        print(f'  {o:45s} -> {n}' if o != n else f'  {o:45s}    (unchanged)')
    if notes: print('\nnotes:\n  ' + '\n  '.join(notes))
    moved = sum(o != n for o, n, _ in order)
    print(f'\n{moved} of {len(order)} notebooks renamed')
    if a.dry_run: return 0
    changed = apply(root, order)
    print(f'references rewritten in {len(changed)} files: ' + ', '.join(changed))
    print(f'wrote nbs/{SECTIONS_FILE}; now run: nbdev_clean && nbdev_export, then the tests, then commit')
    return 0


if __name__ == '__main__':
    sys.exit(main())
