"""Every repository path README.md names exists: in links, pictures, backticks and code blocks, the paths under the
repository's own folders (`nbs/`, `tools/`, `bench/`, `tests/`, `csrc/`, `timmdata/`). A path may end in a pytest
node id (`tests/test_x.py::test_y`) or an anchor (`#...`), and may be a glob (`timmdata/*.py`): it must match a file.
The README is made from nbs/index.ipynb (`python tools/make_readme.py`): mend a failure there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ('nbs', 'tools', 'bench', 'tests', 'csrc', 'timmdata')
# a path starts a word: not after a letter, a dot, a slash or a colon (`github.com/timmdata/timmdata`, `x.timmdata/`)
PATH = re.compile(r'(?<![\w./:~-])(?:' + '|'.join(FOLDERS) + r')/[\w./*?\[\]{}:#-]*')


def named_paths(text: str) -> list:
    "The repository paths `text` names, in order, each once, without a pytest node id, an anchor or trailing punctuation."
    out = []
    for m in PATH.finditer(text):
        p = m.group(0).split('::')[0].split('#')[0].rstrip('.,:;')
        if p not in out:
            out.append(p)
    return out


def missing(paths, root: Path = ROOT) -> list:
    "The paths of `paths` that name nothing under `root` (a glob names something when it matches a file)."

    def exists(p):
        return any(root.glob(p)) if any(c in p for c in '*?[') else (root / p).exists()

    return [p for p in paths if not exists(p)]


def test_readme_names_only_paths_that_exist():
    text = (ROOT / 'README.md').read_text(encoding='utf-8')
    paths = named_paths(text)
    assert len(paths) > 20, f'README.md names only {paths}: is the pattern still finding its paths?'
    gone = missing(paths)
    assert not gone, (
        f'README.md names {len(gone)} path(s) that do not exist: {gone}; mend them in nbs/index.ipynb, '
        'then run python tools/make_readme.py'
    )


def test_the_path_check_can_fail(tmp_path):
    (tmp_path / 'nbs' / 'tools').mkdir(parents=True)
    (tmp_path / 'nbs' / 'tools' / '45_bench.ipynb').write_text('{}')
    (tmp_path / 'tests').mkdir()
    (tmp_path / 'tests' / 'test_x.py').write_text('')
    text = (
        'The benchmark notebook (`nbs/45_bench.ipynb`), [its page](nbs/tools/45_bench.ipynb#speed), '
        '`tests/test_x.py::test_y`, `python bench/gone.py --quick`, ![a picture](nbs/images/none.png), '
        'https://github.com/timmdata/timmdata and `tests/*.py`.\n```sh\nbash tools/gone.sh\n```\n'
    )
    paths = named_paths(text)
    assert paths == [
        'nbs/45_bench.ipynb',
        'nbs/tools/45_bench.ipynb',
        'tests/test_x.py',
        'bench/gone.py',
        'nbs/images/none.png',
        'tests/*.py',
        'tools/gone.sh',
    ], paths
    assert missing(paths, tmp_path) == ['nbs/45_bench.ipynb', 'bench/gone.py', 'nbs/images/none.png', 'tools/gone.sh']
