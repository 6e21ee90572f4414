"""Folders assembled from symbolic links read as timm reads them: class folders that are links to another disk, files
linked in, a mix of real and linked classes, a root that is a link, one folder or file reached by two link paths.
Each layout is compared with timm's `find_images_and_targets` and `ImageDataset` on the same folder: count, class
list, order, labels. A link loop, which timm walks until the system stops it, is an error naming the link. `follow_links=False`
makes a link out of the root an error naming it, through every entry point; leaving out files never changes the
class list without an error."""
import json
import os
from pathlib import Path

import pytest
import timm.data as timm_data
from timm.data.readers.reader_image_folder import find_images_and_targets as timm_find

import timmdata
from timmdata.core.untrusted import UnsafeFileError
from timmdata.readers import FolderReader, NoImagesError, create_reader
from timmdata.readers.reader_image_folder import find_images_and_targets

CLASSES = ['n2', 'n10', 'cat', 'n01']  # natural order: cat, n01, n2, n10
NAMES = ['img1.jpg', 'img10.jpg', 'img2.JPEG', 'Img3.png', 'img20.jpeg']


def _images(folder: Path, classes=CLASSES, names=NAMES) -> Path:
    "Class folders of (empty) image files: nothing here is decoded, only listed."
    for c in classes:
        (folder / c).mkdir(parents=True, exist_ok=True)
        for n in names:
            (folder / c / n).write_bytes(b'')
    return folder


def _same_as_timm(root: Path, n: int, classes: list) -> FolderReader:
    "timmdata lists `root` as timm does (find_images_and_targets and ImageDataset): lengths first, then the lists."
    root = str(root)
    theirs, their_c2i = timm_find(root)
    ours, our_c2i = find_images_and_targets(root)
    assert (len(ours), len(theirs)) == (n, n)
    assert sorted(our_c2i, key=our_c2i.get) == sorted(their_c2i, key=their_c2i.get) == classes
    assert our_c2i == their_c2i
    assert ours == theirs  # paths (through the links, as timm gives them), order and labels
    tds, ods = timm_data.ImageDataset(root), timmdata.ImageDataset(root)
    assert (len(ods), len(tds)) == (n, n)
    assert ods.filenames() == tds.filenames()
    assert ods.reader.targets == [t for _, t in tds.reader.samples]
    assert ods.reader.class_to_idx == tds.reader.class_to_idx
    return ods.reader


def test_class_folders_that_are_links_to_folders_elsewhere(tmp_path):
    full = _images(tmp_path / 'disk2' / 'imagenet' / 'train')
    sub = tmp_path / 'subset'
    sub.mkdir()
    for c in ['n10', 'cat', 'n2']:
        os.symlink(full / c, sub / c)
    r = _same_as_timm(sub, 15, ['cat', 'n2', 'n10'])
    assert r.filename(0) == 'cat/img1.jpg'


def test_real_class_folders_holding_linked_files(tmp_path):
    full = _images(tmp_path / 'disk2', names=['a1.jpg', 'a2.jpg', 'a10.jpg'])
    ds = tmp_path / 'ds'
    for c in ['n01', 'cat']:
        (ds / c).mkdir(parents=True)
        for f in (full / c).iterdir():
            os.symlink(f, ds / c / f.name)
    _same_as_timm(ds, 6, ['cat', 'n01'])


def test_one_class_real_one_class_linked(tmp_path):
    "The layout that once read as 5 images and 1 class, with a warning: timm's 10 images, 2 classes."
    other = _images(tmp_path / 'other', classes=['b'])
    ds = _images(tmp_path / 'ds', classes=['a'])
    (ds / 'b').mkdir()
    for f in (other / 'b').iterdir():
        os.symlink(f, ds / 'b' / f.name)
    r = _same_as_timm(ds, 10, ['a', 'b'])
    assert r.targets == [0] * 5 + [1] * 5


def test_the_root_a_link(tmp_path):
    real = _images(tmp_path / 'real')
    os.symlink(real, tmp_path / 'linked')
    _same_as_timm(tmp_path / 'linked', 20, ['cat', 'n01', 'n2', 'n10'])


def test_one_folder_and_one_file_reached_by_two_paths(tmp_path):
    "Not a loop: two link paths to one folder, two names for one file, a link inside the root: listed as timm lists them."
    elsewhere = _images(tmp_path / 'elsewhere', classes=['x'])
    ds = _images(tmp_path / 'ds', classes=['a'])
    os.symlink(elsewhere / 'x', ds / 'b')
    os.symlink(elsewhere / 'x', ds / 'c')
    os.symlink(ds / 'a', ds / 'd')  # inside the root
    os.symlink(ds / 'a' / 'img1.jpg', ds / 'a' / 'img1_again.jpg')
    _same_as_timm(ds, 22, ['a', 'b', 'c', 'd'])


def test_nested_links_and_loose_images(tmp_path):
    "Links at several depths, images in the root (class ''), a broken link named like an image (timm lists it)."
    elsewhere = _images(tmp_path / 'elsewhere', classes=['g/x', 'g/y'])
    ds = _images(tmp_path / 'ds', classes=['top/a'])
    os.symlink(elsewhere / 'g', ds / 'top' / 'linked')
    (ds / 'loose1.png').write_bytes(b'')
    os.symlink(tmp_path / 'gone.jpg', ds / 'top' / 'a' / 'broken.jpg')
    _same_as_timm(ds, 17, ['', 'a', 'x', 'y'])


@pytest.mark.parametrize('loop', ['parent', 'two_parents', 'self', 'outside'])
def test_a_link_loop_is_an_error_naming_it(tmp_path, loop):
    """timm lists each image about 40 times (until the OS refuses the path; with two links to `..` its walk branches
    and does not end in any useful time); timmdata ends at once with an error naming the link (or, for a loop closed
    outside the root, the folder met again inside itself) and what to do."""
    import multiprocessing as mp

    ds = _images(tmp_path / 'ds', classes=['a', 'b'])
    if loop == 'parent':
        os.symlink('..', ds / 'a' / 'up')
        says = "the link 'a/up' leads to"
    elif loop == 'two_parents':
        os.symlink('..', ds / 'a' / 'up')
        os.symlink('..', ds / 'b' / 'up')
        says = "/up' leads to"  # a/up or b/up: the first walked
    elif loop == 'self':
        os.symlink(ds / 'a', ds / 'a' / 'again')
        says = "the link 'a/again' leads to"
    else:  # a linked class folder whose target links back to its own parent
        elsewhere = _images(tmp_path / 'elsewhere', classes=['c'])
        os.symlink(elsewhere / 'c', ds / 'c')
        os.symlink(elsewhere, elsewhere / 'c' / 'up')
        says = "the folder 'c/up/c'"

    p = mp.get_context('fork').Process(target=_walk_error, args=(str(ds), str(tmp_path / 'out.json')))
    p.start()
    p.join(30)
    if p.is_alive():
        p.kill()
        p.join()
        pytest.fail(f'FolderReader did not finish a walk with a link loop ({loop})')
    said = json.loads((tmp_path / 'out.json').read_text())
    assert said[0] == 'FolderWalkError' and says in said[1] and 'a loop' in said[1] and 'remove' in said[1], said


def _walk_error(root: str, out: str):
    try:
        FolderReader(root)
        said = ['read', '']
    except Exception as e:
        said = [type(e).__name__, str(e)]
    Path(out).write_text(json.dumps(said))


def test_follow_links_false_is_an_error_naming_the_link(tmp_path):
    full = _images(tmp_path / 'disk2')
    sub = tmp_path / 'subset'
    _images(sub, classes=['cat'])
    os.symlink(full / 'n2', sub / 'n2')
    with pytest.raises(UnsafeFileError, match=r"'n2' is a symbolic link .*follow_links=False"):
        FolderReader(sub, follow_links=False)
    for make in (
        lambda: create_reader(str(sub), split='', follow_links=False),
        lambda: timmdata.ImageDataset(str(sub), follow_links=False),
        lambda: timmdata.create_dataset('', root=str(sub), split='', follow_links=False),
    ):
        with pytest.raises(UnsafeFileError, match='follow_links=False'):
            make()
    assert len(timmdata.create_dataset('', root=str(sub), split='')) == 10  # the default: followed
    assert len(create_reader(str(sub), split='', follow_links=True)) == 10
    # a linked file is refused as a linked folder is; links inside the root and the root itself as a link are read
    os.remove(sub / 'n2')
    os.symlink(full / 'n2' / 'img1.jpg', sub / 'cat' / 'extra.jpg')
    with pytest.raises(UnsafeFileError, match=r"'cat/extra.jpg' is a symbolic link"):
        FolderReader(sub, follow_links=False)
    os.remove(sub / 'cat' / 'extra.jpg')
    os.symlink(sub / 'cat', sub / 'dog')
    os.symlink(sub, tmp_path / 'root_link')
    assert FolderReader(tmp_path / 'root_link', follow_links=False).classes == ['cat', 'dog']


def test_files_left_out_never_change_the_class_list_silently(tmp_path):
    "A class folder whose files are all of other extensions: timm drops the class (and renumbers the rest); an error here."
    ds = _images(tmp_path / 'ds', classes=['a', 'c'])
    (ds / 'b').mkdir()
    (ds / 'b' / 'scan.gif').write_bytes(b'')
    assert sorted(timm_find(str(ds))[1]) == ['a', 'c']
    with pytest.raises(NoImagesError, match=r"'b' \(holds \.gif\).*extensions=.*class_map="):
        FolderReader(ds)
    with pytest.raises(NoImagesError, match="'b'"):
        timmdata.ImageDataset(str(ds))
    assert FolderReader(ds, extensions=('.jpg', '.jpeg', '.png', '.gif')).classes == ['a', 'b', 'c']
    assert FolderReader(ds, class_map={'a': 0, 'c': 1}).classes == ['a', 'c']
