"""The pictures the how-to pages open with, drawn from the page's own run: the batch its loader gave, the samples its
shards or Parquet files hold, the batches of a stopped and resumed run, a watch's figures, a folder's damaged files.

    import sys, os; sys.path.insert(0, os.path.abspath('../../tools/docs'))   # a hidden cell, before any os.chdir
    from howto_pictures import batch_row                                      # then, in a cell shown without its code
    batch_row(x, y, classes)                                                  # (`#| echo: false`)

Small on purpose (72 dpi, a few inches wide): the saved PNG stays a few kB in the notebook."""
from __future__ import annotations
import hashlib, io

import matplotlib.pyplot as plt
import numpy as np
from PIL import Image

DPI = 72
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])  # timm's ImageNet defaults


def _pixels(img) -> np.ndarray:
    "HWC floats in [0, 1] from a normalised CHW float tensor, a CHW uint8 tensor, a PIL image, or bytes of a file."
    if isinstance(img, (bytes, bytearray)):
        img = Image.open(io.BytesIO(img))
    if isinstance(img, Image.Image):
        return np.asarray(img.convert('RGB'), dtype=np.float32) / 255
    a = img.detach().cpu().numpy() if hasattr(img, 'detach') else np.asarray(img)
    if a.shape[0] in (1, 3) and a.shape[-1] not in (1, 3):
        a = a.transpose(1, 2, 0)  # CHW, as a loader gives it
    if a.dtype == np.uint8:
        return a.astype(np.float32) / 255
    return np.clip(a * STD + MEAN, 0, 1)  # a float batch: normalised with the ImageNet mean and std


def _off(ax):
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)


def thumbnails(
    rows: list,  # a list per row of (image, caption): an image as `_pixels` takes it, or None (a grey square, crossed)
    row_names: list = None,  # a name at the left of each row
    title: str = None,  # a line above the picture
    size: float = 0.6,  # inches per thumbnail
    colours: list = None,  # per row, a caption colour per cell (None: black)
):
    "Rows of small images, each with a caption under it."
    cols = max(len(r) for r in rows)
    fig, axs = plt.subplots(len(rows), cols, figsize=(size * cols + (1.1 if row_names else 0), (size + 0.25) * len(rows) + (0.3 if title else 0)),
                            dpi=DPI, squeeze=False)
    for r, row in enumerate(rows):
        for c in range(cols):
            ax = axs[r][c]
            _off(ax)
            if c < len(row) and row[c][0] is not None:
                ax.imshow(_pixels(row[c][0]))
            elif c < len(row):  # no image: a grey square with a red cross
                ax.imshow(np.full((64, 64, 3), 0.92))
                ax.text(32, 32, 'x', color='red', ha='center', va='center', fontsize=18)
            if c < len(row):
                colour = colours[r][c] if colours else 'black'
                ax.set_xlabel(row[c][1], fontsize=8, color=colour, labelpad=1)
        if row_names:
            axs[r][0].set_ylabel(row_names[r], fontsize=8, rotation=0, ha='right', va='center', labelpad=4)
    if title:
        fig.suptitle(title, fontsize=9, x=0.01, ha='left')
    fig.tight_layout(pad=0.2, w_pad=0.1, h_pad=0.3)
    return fig


def batch_row(
    x,  # a batch of images (N, 3, H, W): normalised floats or uint8, as a loader gives them
    y,  # its labels (N,)
    classes,  # class names by label (a list, or a dict name -> label)
    title: str = None,  # a line above the picture
    n: int = 8,  # images shown
):
    "One batch as the loader gave it, each image with its class name."
    names = sorted(classes, key=classes.get) if isinstance(classes, dict) else list(classes)
    return thumbnails([[(img, names[int(lab)]) for img, lab in zip(x[:n], y[:n])]], title=title)


def _colour(digest: str):
    "A colour from a batch's digest: the same batch, the same colour."
    h = int(hashlib.sha1(digest.encode()).hexdigest()[:6], 16)
    return plt.cm.tab20((h % 20) / 20)


def batch_timeline(
    runs: dict,  # a row name -> (first step, [(labels, digest) per batch])
    title: str = None,  # a line above the picture
    stop: float = None,  # a step to mark with a line (where a run stopped)
):
    "The batches of each run as boxes along the steps, coloured and labelled by what each batch held: the same box, the same batch."
    steps = max(first + len(b) for first, b in runs.values())
    fig, ax = plt.subplots(figsize=(0.75 * steps + 1.8, 0.42 * len(runs) + 0.5), dpi=DPI)
    for r, (name, (first, batches)) in enumerate(runs.items()):
        for k, (labels, digest) in enumerate(batches):
            ax.add_patch(plt.Rectangle((first + k + 0.05, -r - 0.4), 0.9, 0.8, color=_colour(digest)))
            ax.text(first + k + 0.5, -r, ''.join(map(str, labels)), ha='center', va='center', fontsize=7)
    if stop is not None:
        ax.axvline(stop, color='black', lw=1, ls='--')
    ax.set_yticks([-r for r in range(len(runs))], list(runs), fontsize=8)
    ax.set_xticks([k + 0.5 for k in range(steps)], [str(k + 1) for k in range(steps)], fontsize=7)
    ax.set_xlabel('batch (its labels written in it)', fontsize=8)
    ax.set_xlim(0, steps)
    ax.set_ylim(-len(runs) + 0.5, 0.5)
    for s in ('top', 'right', 'left'):
        ax.spines[s].set_visible(False)
    if title:
        ax.set_title(title, fontsize=9, loc='left')
    fig.tight_layout(pad=0.2)
    return fig


def figures_over_run(
    points: list,  # (step, figures) as a watch wrote them
    names: tuple = ('images_per_s', 'wait_share'),  # the figures drawn, a panel each
    title: str = None,  # a line above the picture
):
    "A watch's figures along the run: a panel per figure, a point per interval."
    fig, axs = plt.subplots(1, len(names), figsize=(2.6 * len(names), 1.7), dpi=DPI, squeeze=False)
    for ax, name in zip(axs[0], names):
        ax.plot([s for s, _ in points], [f.get(name, np.nan) for _, f in points], 'o-', ms=3)
        ax.set_title(name, fontsize=8)
        ax.set_xlabel('batches', fontsize=7)
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=0)
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    if title:
        fig.suptitle(title, fontsize=9, x=0.01, ha='left')
    fig.tight_layout(pad=0.3)
    return fig
