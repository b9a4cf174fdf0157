"""Draw the figures of the documentation into docs/figures/.

    python docs/figures/make_figures.py

* ``pal_layer.png``: where a Projected Attention Layer sits in a BERT layer (a diagram).
* ``annealed_sampling.png``: the annealed task-sampling schedule for the five GLUE tasks
  kept locally, computed with ``pals_adapters.harness.data.sampling``. The per-epoch table it is drawn
  from is printed to stdout.

Needs matplotlib (``pip install -e ".[docs]"``).
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

from pals_adapters.harness.data.schedule import format_schedule, schedule  # noqa: E402
from pals_adapters.harness.data.sampling import make_sampler  # noqa: E402

HERE = Path(__file__).resolve().parent

# Training-set sizes of the local GLUE copy (rows of train.tsv, header excluded).
TASK_SIZES = {"CoLA": 8551, "SST-2": 67349, "MRPC": 3668, "STS-B": 5749, "RTE": 2490}
TOTAL_STEPS = 20_000
STEPS_PER_EPOCH = 2400  # the paper's "epoch" (footnote in its section on sampling tasks)

BASE_COLOUR = "#dfe7f2"  # BERT's own blocks
PAL_COLOUR = "#fde2c4"  # the PAL branch
EDGE = "#333333"


def _box(ax, x, y, text, colour, width=1.5, height=0.8):
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2), width, height,
            boxstyle="round,pad=0.02,rounding_size=0.12", facecolor=colour, edgecolor=EDGE, linewidth=1.2,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=10)
    return (x - width / 2, x + width / 2)


def _arrow(ax, start, end, **kw):
    style = dict(arrowstyle="-|>", color=EDGE, linewidth=1.2, shrinkA=0, shrinkB=0)
    style.update(kw)
    ax.annotate("", xy=end, xytext=start, arrowprops=style)


def draw_pal_layer(path: Path) -> None:
    fig, ax = plt.subplots(figsize=(11, 4.6), dpi=120)
    ax.set_xlim(-0.4, 13.4)
    ax.set_ylim(-2.9, 1.5)
    ax.set_axis_off()

    top, bottom = 0.0, -1.9  # rows: BERT's path and the PAL branch
    # BERT's layer, left to right.
    ax.text(0.0, top, "$h$", ha="center", va="center", fontsize=15)
    sa = _box(ax, 1.9, top, "self-attention\n(12 heads, $d$)", BASE_COLOUR, width=1.9)
    ln1 = _box(ax, 4.1, top, "Add & LN", BASE_COLOUR, width=1.3)
    ffn = _box(ax, 6.3, top, "FFN", BASE_COLOUR, width=1.3)
    ax.add_patch(plt.Circle((8.6, top), 0.28, facecolor="white", edgecolor=EDGE, linewidth=1.2))
    ax.text(8.6, top, "+", ha="center", va="center", fontsize=15)
    ln2 = _box(ax, 10.6, top, "LN", BASE_COLOUR, width=1.1)
    ax.text(12.7, top, "out", ha="center", va="center", fontsize=12)

    _arrow(ax, (0.25, top), (sa[0], top))
    _arrow(ax, (sa[1], top), (ln1[0], top))
    _arrow(ax, (ln1[1], top), (ffn[0], top))
    ax.text(5.45, top + 0.12, "$a$", ha="center", va="bottom", fontsize=12)
    _arrow(ax, (ffn[1], top), (8.32, top))
    _arrow(ax, (8.88, top), (ln2[0], top))
    _arrow(ax, (ln2[1], top), (12.4, top))

    # Residual connections above the main path (plain lines, arrow head on the last leg).
    rail = top + 1.0
    for start, end, end_y, label in ((0.5, ln1[0] + 0.65, top + 0.4, "residual $h$"),
                                     (5.2, 8.6, top + 0.28, "residual $a$")):
        ax.plot([start, start, end], [top, rail, rail], color=EDGE, linewidth=1.2)
        _arrow(ax, (end, rail), (end, end_y))
        ax.text((start + end) / 2, rail + 0.1, label, ha="center", va="bottom", fontsize=9, color="#555555")
    for x in (0.5, 5.2):  # branch points
        ax.plot([x], [top], "o", color=EDGE, markersize=4)

    # The PAL branch below: h -> V_E -> small attention -> V_D -> GELU -> (+).
    ve = _box(ax, 1.9, bottom, "$V_E$\n$d \\to d_s$", PAL_COLOUR, width=1.3)
    mh = _box(ax, 4.3, bottom, "multi-head attention\nin $d_s$ (6 heads,\nno output matrix)", PAL_COLOUR, width=2.3,
              height=0.95)
    vd = _box(ax, 6.7, bottom, "$V_D$\n$d_s \\to d$", PAL_COLOUR, width=1.3)
    act = _box(ax, 8.6, bottom, "GELU", PAL_COLOUR, width=1.1)
    ax.plot([0.5, 0.5], [top, bottom], color=EDGE, linewidth=1.2)
    _arrow(ax, (0.5, bottom), (ve[0], bottom))
    _arrow(ax, (ve[1], bottom), (mh[0], bottom))
    _arrow(ax, (mh[1], bottom), (vd[0], bottom))
    _arrow(ax, (vd[1], bottom), (act[0], bottom))
    _arrow(ax, (8.6, bottom + 0.4), (8.6, top - 0.28))
    ax.text(8.75, (top + bottom) / 2, "$TS(h)$", ha="left", va="center", fontsize=11)

    ax.text(4.3, -2.75, "PAL of one task: $V_E$, $V_D$ shared by all layers (\"pals\"), "
            "the small attention is per layer", ha="center", fontsize=9, color="#7a4a12")
    ax.text(12.9, -1.9, "out = LN( FFN($a$) + $a$ + TS($h$) )", ha="right", va="center", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def draw_annealed_schedule(path: Path) -> str:
    sampler = make_sampler("annealed", TASK_SIZES, total_steps=TOTAL_STEPS, steps_per_epoch=STEPS_PER_EPOCH)
    table = format_schedule(schedule(sampler, TOTAL_STEPS))  # one row per epoch
    rows = schedule(sampler, TOTAL_STEPS, every=50)
    steps = [r["step"] for r in rows] + [TOTAL_STEPS]

    fig, ax = plt.subplots(figsize=(8, 4.4), dpi=120)
    for name in TASK_SIZES:
        values = [r[f"p_{name}"] for r in rows]
        ax.plot(steps, values + values[-1:], drawstyle="steps-post", linewidth=2,
                label=f"{name} ({TASK_SIZES[name]:,})")
    ax.set_xlim(0, TOTAL_STEPS)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("training step")
    ax.set_ylabel("probability of training on the task")
    for boundary in range(STEPS_PER_EPOCH, TOTAL_STEPS, STEPS_PER_EPOCH):
        ax.axvline(boundary, color="#cccccc", linewidth=0.8, zorder=0)
    alpha_ax = ax.twinx()
    alphas = [r["alpha"] for r in rows]
    alpha_ax.plot(steps, alphas + alphas[-1:], "k--", drawstyle="steps-post", linewidth=1.2)
    alpha_ax.set_ylim(0, 1.05)
    alpha_ax.set_ylabel(r"$\alpha$ (dashed)")
    ax.set_title(
        rf"annealed sampling, $p_i \propto N_i^{{\alpha}}$: {TOTAL_STEPS:,} steps, {STEPS_PER_EPOCH:,} steps per epoch"
    )
    ax.legend(loc="upper right", fontsize=9, title="task (train size)", title_fontsize=9, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return table


def main() -> None:
    draw_pal_layer(HERE / "pal_layer.png")
    table = draw_annealed_schedule(HERE / "annealed_sampling.png")
    print(table)
    print(f"wrote {HERE / 'pal_layer.png'} and {HERE / 'annealed_sampling.png'}")


if __name__ == "__main__":
    main()
