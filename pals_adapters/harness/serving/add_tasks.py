"""Adding a task later: train only the new task's parameters against the shared base of an existing
export (frozen), and export the task next to the others. The old tasks' files are not touched.

The export says what the new task trains on: its base (the fine-tuned ``<export>/base``, or the
pretrained model it names), its method and its tokenizer. `shared_base_of` reads and checks them,
`check_new_tasks` refuses what cannot be added, before anything is trained.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import AdapterLoadError, ConfigError, IntegrityError
from ...pretrained import pretrained_tokenizer
from ..export.files import BASE_DIR, verify_files
from ..export.library_heads import base_location, shared_base_name
from ..export.manifest import manifest_contents, read_base_manifest, read_task_manifest
from ..export.read import check_tokenizer, checked_task_folder, recorded_base, task_folders
from ..methods.method import Method
from ..methods.model import resolve_model


@dataclass(frozen=True)
class SharedBase:
    """What the tasks of an export share: the base they need, and the method that adds a task."""

    export_dir: Path
    method: Method
    base_mode: str  # how the base was made ("finetune": by the run, in <export>/base)
    fingerprint: str
    source: str  # folder or model name to load the base from
    base_model_name: str | None
    tasks: tuple[str, ...]

    def names(self) -> set[str]:
        """How a user may name this base: its folder or model name, and the pretrained model it came from."""
        names = {self.source, str(Path(self.source).resolve())}
        if self.base_model_name:
            names |= {self.base_model_name, str(resolve_model(self.base_model_name))}
        return names


def _export_folder(export_dir: Path) -> Path:
    """``export_dir`` if it is a run's export folder (its tasks in sub-folders); a task or base folder is refused."""
    contents = manifest_contents(export_dir)
    if contents in ("task", "base"):
        what = "one task's folder" if contents == "task" else "the base folder of an export"
        raise ConfigError(
            f"add_to={export_dir} is {what}, not an export: give the run's export folder that holds it "
            f"({export_dir.parent})"
        )
    return export_dir


def shared_base_of(export_dir: str | Path) -> SharedBase:
    """The shared base of a run's export folder, every file of its tasks and base checked."""
    export_dir = _export_folder(Path(export_dir))
    try:
        folders = task_folders(export_dir)
    except (AdapterLoadError, ConfigError) as err:
        raise type(err)(f"add_to={export_dir}: not a run's export folder ({err})") from None
    checked = [checked_task_folder(folder, allow_pickle=False) for folder in folders]
    first, _, method = checked[0]
    for manifest, _, other in checked[1:]:
        if (other.spec, manifest.base_mode, manifest.base_fingerprint) != (
            method.spec,
            first.base_mode,
            first.base_fingerprint,
        ):
            raise AdapterLoadError(
                f"{export_dir}: its tasks do not share one method and base; give a run's export folder"
            )
    if first.base_path is not None:  # fine-tuned, or a frozen base exported with the tasks (--with-base)
        base_dir = export_dir / BASE_DIR
        base = read_base_manifest(base_dir)  # a missing or unreadable manifest is an error
        verify_files(base_dir, base.files)
        if base.fingerprint != first.base_fingerprint:
            raise AdapterLoadError(f"{base_dir} is not the base its tasks were trained with (fingerprints differ)")
        source = str(base_dir)
    else:
        if not first.base_model_name:
            raise AdapterLoadError(f"{export_dir}: its tasks name no base model")
        source = recorded_base(first, folders[0])  # a local folder that is not there is refused here
    return SharedBase(
        export_dir,
        method,
        first.base_mode,
        first.base_fingerprint,
        source,
        base_location(first.base_model_name, folders[0]),  # a local folder where it is on this machine
        tuple(spec.name for _, spec, _ in checked),
    )


def check_can_take_tasks(shared: SharedBase) -> None:
    """An export of a method that fine-tunes every weight for its tasks (no frozen base): nothing of it is a
    task's own but the head, and its base cannot stay frozen for a new task (`--add-to` refuses it plainly)."""
    if not shared.method.allows_frozen_base:
        raise ConfigError(
            f"add_to={shared.export_dir}: an export of method {shared.method.name!r} cannot take a new task (its "
            "tasks fine-tuned the whole encoder together; a task added later trains against the export's frozen "
            "base, which this method does not allow). Train the new task with the others in a new run"
        )


def check_new_tasks(shared: SharedBase, tasks, method: Method, replace: bool = False) -> None:
    """Refuses tasks that the export already has (unless ``replace``; then each must be there), and a method
    other than the export's."""
    taken = sorted(set(tasks) & set(shared.tasks))
    if taken and not replace:
        raise ConfigError(
            f"add_to={shared.export_dir}: it already has tasks {taken}; give new task names, or replace=True "
            "(--replace) to train them again and replace them"
        )
    absent = sorted(set(tasks) - set(shared.tasks))
    if replace and absent:
        raise ConfigError(
            f"replace: the export {shared.export_dir} has no tasks {absent} to replace (its tasks: "
            f"{list(shared.tasks)}); leave out replace (--replace) to add them"
        )
    if method.spec != shared.method.spec:
        raise ConfigError(
            f"add_to={shared.export_dir}: its tasks use method {shared.method.spec!r}; a task added to it must "
            f"use the same (got {method.spec!r}) so that all tasks load onto one model; leave out the method to "
            "use the export's"
        )


def check_model(shared: SharedBase, model: str) -> None:
    """A model given with add_to must be the export's base (it is what the new task trains on)."""
    given, names = {model, str(resolve_model(model)), str(Path(model).resolve())}, shared.names()
    origin = shared.base_model_name
    if origin and os.path.isabs(origin) and not os.path.exists(origin):  # a folder not found from the moved export
        given, names = given | {Path(model).name}, names | {Path(origin).name}  # known by its name only
    if not given & names:
        raise ConfigError(
            f"add_to={shared.export_dir}: model={model!r} is not the export's base ({shared.source}"
            + (f", made from {shared.base_model_name}" if shared.base_model_name != shared.source else "")
            + "); a task added to an export trains on the export's own base: leave out the model"
        )


def export_tokenizer(shared: SharedBase):
    """The tokenizer of the export's base, checked against the record of every task of the export."""
    source = resolve_model(shared.source)
    try:
        tokenizer = pretrained_tokenizer(str(source))
    except (OSError, ValueError) as err:
        raise ConfigError(f"add_to={shared.export_dir}: cannot load the tokenizer of {source} ({err})") from None
    try:
        check_tokenizer(tokenizer, task_folders(shared.export_dir), source)
    except AdapterLoadError as err:
        raise ConfigError(
            f"add_to={shared.export_dir}: {err}. A task added now would be trained with another tokenizer than the "
            "export's tasks: restore the base's tokenizer files as they were at export"
        ) from None
    return tokenizer


def taken_from_export(config) -> str | None:
    """What a run with add_to takes from the export, in words (from its manifests: nothing is loaded): the
    method it leaves unset and the base; None without add_to or where the export cannot be read (the run's
    checks then say why)."""
    if config.add_to is None:
        return None
    try:
        manifest = read_task_manifest(task_folders(config.add_to)[0])
    except (AdapterLoadError, ConfigError, IntegrityError):
        return None
    method = Method(manifest.method.name, manifest.method.kind, overrides=dict(manifest.method.overrides)).spec
    what = "its fine-tuned base (base/)" if manifest.base_mode == "finetune" else "its pretrained base"
    name = shared_base_name(manifest.base_model_name)
    taken = [] if config.method is not None else [f"method {method}"]
    return (
        f"add_to {config.add_to}: "
        + ", ".join([*taken, f"{what}{f' from {name}' if name else ''}, frozen"])
        + " (taken from the export)"
    )
