"""The picture of bench_knobs.py's grid: images/s (solid) and the consumer's wait for the workers (dashed) against
workers, per worker mode and look-ahead, one panel per (workload, model step); the 'auto' loader's choice marked with a
star at its steady-state images/s, its ratio to the best grid setting in the panel's title.

    python bench/plot_knobs.py bench/results/knobs_DATE.json nbs/images/knobs_grid.png"""
import json, sys
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt

COLORS = {'process': 'tab:blue', 'thread': 'tab:orange'}
MARKERS = {1: '^', 2: 'o', 4: 's'}  # look-ahead (prefetch_factor): only pf=2 is joined by a line


def series(R: dict, mode: str, pf: int) -> list:
    "(workers, images/s, wait) of the grid settings in `mode` with look-ahead `pf`; 0 workers (the main process) joins both modes' pf=2 lines."
    pts = [(v['setting'][1], v['ips'], v['stall']) for k, v in R.items()
           if k != 'auto' and v['setting'][1] and v['setting'][0] == mode and v['setting'][2] == pf]
    if pf == 2:
        pts += [(0, v['ips'], v['stall']) for k, v in R.items() if k != 'auto' and v['setting'][1] == 0]
    return sorted(pts)


def panel(ax, combo: str, S: dict, legend: bool):
    R, ans = S['rows'], S['answers']
    tw = ax.twinx()
    for mode, col in COLORS.items():
        for pf, mk in MARKERS.items():
            pts = series(R, mode, pf)
            if not pts:
                continue
            x, y, s = zip(*pts)
            ax.plot(x, y, marker=mk, ls='-' if pf == 2 else 'none', color=col,
                    label=f'{mode}, look-ahead {pf}' if legend else None)
            tw.plot(x, [v * 100 for v in s], marker=mk, ls='--' if pf == 2 else 'none', color=col, alpha=0.45, mfc='none')
    A = R['auto']
    ch = A['chosen']
    ax.plot([ch['num_workers']], [A['ips']], marker='*', ms=17, color=COLORS[ch['worker_mode']], mec='k', ls='none',
            label="auto: its choice, at its steady images/s" if legend else None)
    w, step = combo.split(':')
    ax.set_title(f"{w}, step {step} ({ans['bound']}-bound): auto {ans['vs_best']:.2f}x best", fontsize=9)
    ax.set_xlabel('workers')
    ax.set_ylabel('images/s (solid)')
    tw.set_ylabel('wait for workers, % (dashed)')
    tw.set_ylim(0, 100)
    ax.set_ylim(bottom=0)
    ax.set_xticks([0, 1, 2, 3, 4])


def main(src, dst):
    data = json.load(open(src))
    combos = data['combos']
    cols = 3
    rows = (len(combos) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.1 * rows), squeeze=False)
    for i, (ax, c) in enumerate(zip(axes.flat, combos)):
        panel(ax, c, combos[c], legend=i == 0)
    for ax in list(axes.flat)[len(combos):]:
        ax.axis('off')
    fig.legend(loc='lower center', ncol=4, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.2 / rows, 1, 1))  # room for the legend, two lines of it
    fig.savefig(dst, dpi=80)


if __name__ == '__main__':
    main(*sys.argv[1:3])
