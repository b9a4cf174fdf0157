"""Training data in batches: the task samplers (`sampling`; pure in seed and step), MT-Uncertainty's
choice of examples (`uncertainty`), a sampler's schedule (`schedule`), and the batches of one task or
of several mixed (`batches`).

A new sampler is one family in `sampling.TaskSampler` plus its name in `STRATEGIES`.
"""

from ...lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".batches": ["MultiTaskBatches"],
        ".sampling": ["STRATEGIES", "TaskSampler", "make_sampler"],
    },
)

__all__ = ["MultiTaskBatches", "STRATEGIES", "TaskSampler", "make_sampler"]
