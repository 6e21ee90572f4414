"""The picture of bench_knobs.py's grid: images/s (solid) and the consumer's wait (dashed) against workers, per worker
mode, one panel per (workload, model step); the 'auto' loader's choice marked with a star.

    python bench/plot_knobs.py bench/results/knobs_2026-11-24.json nbs/images/knobs_grid.png"""
import json, sys
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt


def main(src, dst):
    data = json.load(open(src))
    combos = list(data)
    cols = 3
    rows = (len(combos) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    colors = {'process': 'tab:blue', 'thread': 'tab:orange'}
    for ax, c in zip(axes.flat, combos):
        R = data[c]
        tw = ax.twinx()
        for mode, col in colors.items():
            for pf, mk in ((2, 'o'), (4, 's')):
                pts = sorted((v['setting'][1], v['ips'], v['stall']) for k, v in R.items()
                             if k != 'auto' and v['setting'][0] == mode and v['setting'][2] == pf)
                if mode == 'thread' and pf == 2:
                    pts = sorted(pts + [(v['setting'][1], v['ips'], v['stall']) for k, v in R.items()
                                        if k != 'auto' and v['setting'][1] == 0])  # 0 workers: the main process, both
                if not pts:
                    continue
                x, y, s = zip(*pts)
                ls = '-' if pf == 2 else 'none'
                ax.plot(x, y, marker=mk, ls=ls, color=col, label=f'{mode} pf={pf}' if c == combos[0] else None)
                tw.plot(x, [v * 100 for v in s], marker=mk, ls='--' if pf == 2 else 'none', color=col, alpha=0.45,
                        mfc='none')
        a = R['auto']
        ch = a['chosen']
        ax.plot([ch['num_workers']], [a['ips']], marker='*', ms=16, color=colors[ch['worker_mode']], mec='k',
                ls='none', label='auto (its choice)' if c == combos[0] else None)
        w, step = c.split(':')
        ax.set_title(f'{w}, model step: {step}', fontsize=10)
        ax.set_xlabel('workers')
        ax.set_ylabel('images/s (solid)')
        tw.set_ylabel('wait, % of wall (dashed)')
        tw.set_ylim(0, 100)
        ax.set_ylim(bottom=0)
        ax.set_xticks([0, 1, 2, 4])
    for ax in list(axes.flat)[len(combos):]:
        ax.axis('off')
    fig.legend(loc='lower center', ncol=5, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(dst, dpi=80)


if __name__ == '__main__':
    main(*sys.argv[1:3])
