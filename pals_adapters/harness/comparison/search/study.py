"""A row's search as an Optuna study kept in a journal file beside the comparison's runs: the trials asked
(their settings) and told (their selection scores) survive the command, so a killed search goes on from
them. Trials are asked in rounds, each seeing the scores of all rounds before it: a grid's candidates all at
once; a range search's first, random trials at once, then one at a time (each learning from those before).
Each ask's sampler is seeded by the search's seed and the trial's number, so the same seed draws the same
trials however often the search was interrupted."""

from __future__ import annotations

import logging
from pathlib import Path

from filelock import FileLock

from .space import SearchSpec

RUNNING, COMPLETE = "RUNNING", "COMPLETE"


def _optuna():
    import optuna

    optuna.logging.set_verbosity(logging.WARNING)  # compare prints its own lines
    return optuna


def startup_trials(spec: SearchSpec) -> int:
    """A range search's first trials, drawn at random (TPE models the scores once it has some)."""
    return min(10, max(1, spec.trials // 2))


def open_study(journal: Path, name: str, create: bool):
    """The study ``name`` of the journal file; None when it does not exist and not ``create``."""
    optuna = _optuna()
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if not create and not journal.is_file():
        return None
    journal.parent.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(journal)))
    if not create and name not in {summary.study_name for summary in optuna.get_all_study_summaries(storage)}:
        return None
    return optuna.create_study(study_name=name, storage=storage, direction="maximize", load_if_exists=True)


def trials_of(study) -> list:
    """The study's trials (asked, with their settings; told ones with their score), by number."""
    return sorted(study.get_trials(deepcopy=False), key=lambda trial: trial.number) if study is not None else []


def ask_round(study, spec: SearchSpec, journal: Path) -> None:
    """Asks the next round's trials, when no trial is waiting for its score and the search has trials left
    (under a lock: two commands on one output folder never both ask)."""
    # Not "<journal>.lock": Optuna's journal backend takes that name for its own lock, and would wait on ours.
    with FileLock(str(journal) + ".ask.lock"):
        _ask_round(study, spec)


def _ask_round(study, spec: SearchSpec) -> None:
    optuna = _optuna()
    trials = trials_of(study)
    if any(trial.state.name == RUNNING for trial in trials) or len(trials) >= spec.trials:
        return
    distributions = spec.distributions()
    if spec.grid_form:
        study.sampler = optuna.samplers.GridSampler(spec.space, seed=spec.seed)
        count = spec.trials - len(trials)
    else:
        startup = startup_trials(spec)
        count = startup - len(trials) if len(trials) < startup else 1
    for number in range(len(trials), len(trials) + count):
        if not spec.grid_form:
            seed = (spec.seed + number) % 2**32  # numpy's seeds end below 2**32
            study.sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials(spec))
        study.ask(distributions)


def waiting(study) -> list:
    """The trials asked and not yet told their score."""
    return [trial for trial in trials_of(study) if trial.state.name == RUNNING]


def tell(study, number: int, score: float) -> None:
    """The trial's selection score, recorded (the grid sampler would stop an optimisation loop there is none of:
    a plain sampler sees the tell)."""
    study.sampler = _optuna().samplers.RandomSampler(seed=0)
    study.tell(number, score, skip_if_finished=True)  # another command on the folder may have told it


def best(study):
    """The told trial of the highest selection score (the first of them on a tie), or None."""
    told = [trial for trial in trials_of(study) if trial.state.name == COMPLETE]
    return max(told, key=lambda trial: (trial.value, -trial.number)) if told else None
