"""Where a grid's runs train: here (``launcher: local``, ``--jobs`` processes) or on a Ray cluster
(``launcher: ray``), with the resources each run asks for there; read and checked before any run starts.
Ray itself is imported only by `ray_launcher`, and only when the launcher is Ray."""

from __future__ import annotations

import importlib.util
import numbers
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError, PalsError

LAUNCHERS = ("local", "ray")
# The grid file's keys about where runs train: none of them changes a run's settings or its folder.
LAUNCH_KEYS = ("launcher", "ray_address", "resources_per_run", "storage", "max_retries")
RESOURCE_KEYS = ("cpus", "gpus")
INSTALL_RAY = 'pip install "pals-adapters[ray]"'


@dataclass(frozen=True)
class Launch:
    """The launcher and, for Ray, the cluster's address (None: a Ray instance started on this machine),
    each run's CPUs and GPUs (fractions pack small runs on one device), the folder every node mounts for
    checkpoints (None: each run trains in its node's scratch space) and the retries of a run whose node
    was lost."""

    launcher: str = "local"
    ray_address: str | None = None
    cpus: float = 1
    gpus: float = 0
    storage: str | None = None
    max_retries: int = 2

    @property
    def on_ray(self) -> bool:
        return self.launcher == "ray"


@dataclass
class FailedRun:
    """A run that did not finish: its row, seed, folder and why (its own error, or its node lost too often)."""

    row: str
    seed: int
    folder: Path
    error: str


def read_launch(
    values: dict, where: str, launcher: str | None = None, ray_address: str | None = None, jobs: int = 1
) -> Launch:
    """The launch settings of the grid file's ``values`` (`LAUNCH_KEYS`), ``launcher`` and ``ray_address``
    (from the command line or the caller) replacing the file's; ConfigError naming what to fix."""
    chosen = launcher if launcher is not None else values.get("launcher", "local")
    if chosen not in LAUNCHERS:
        raise ConfigError(f"{where}: launcher={chosen!r}: choose one of {', '.join(LAUNCHERS)}")
    if chosen != "ray":
        if ray_address is not None:
            raise ConfigError("ray_address goes with launcher ray (--launcher ray); remove it or add the launcher")
        return Launch()
    if jobs != 1:
        raise ConfigError(
            f"jobs={jobs}: on Ray, resources_per_run decides how many runs train at a time; remove --jobs"
        )
    address = ray_address if ray_address is not None else values.get("ray_address")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise ConfigError(f"{where}: ray_address={address!r}: give the cluster's address (auto, HOST:PORT, ray://...)")
    cpus, gpus = _resources(values.get("resources_per_run", {}), where)
    return Launch("ray", address, cpus, gpus, _storage(values.get("storage"), where), _retries(values, where))


def _resources(given, where: str) -> tuple[float, float]:
    if not isinstance(given, dict):
        raise ConfigError(f"{where}: resources_per_run={given!r}: expected a mapping such as {{cpus: 4, gpus: 1}}")
    unknown = sorted(set(given) - set(RESOURCE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: resources_per_run: unknown {unknown}; give cpus and gpus")
    cpus, gpus = given.get("cpus", 1), given.get("gpus", 0)
    for name, value, least in (("cpus", cpus, 0), ("gpus", gpus, 0)):
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not number or value < least or (name == "cpus" and value == 0):
            raise ConfigError(
                f"{where}: resources_per_run: {name}={value!r}: expected a number "
                f"{'above 0' if name == 'cpus' else '0 or more'} (fractions such as 0.5 share a device)"
            )
    if gpus > 1 and gpus != int(gpus):
        raise ConfigError(f"{where}: resources_per_run: gpus={gpus}: above 1, give whole GPUs")
    return cpus, gpus


def _storage(storage, where: str) -> str | None:
    if storage is None:
        return None
    if not isinstance(storage, str) or "://" in storage or not Path(storage).is_absolute():
        raise ConfigError(
            f"{where}: storage={storage!r}: give the absolute path of a folder every node of the cluster mounts "
            "at that path (object stores such as s3:// are not supported); leave it out to train in each "
            "node's scratch space"
        )
    return storage


def _retries(values: dict, where: str) -> int:
    retries = values.get("max_retries", Launch.max_retries)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ConfigError(
            f"{where}: max_retries={retries!r}: the times a run lost with its node is run again, 0 or more"
        )
    return retries


def require_ray() -> None:
    """ConfigError with the install command where Ray cannot be imported: said before any run starts."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(f"launcher ray needs Ray, which is not installed here; install it with {INSTALL_RAY}")


def failed_runs_error(failed: list[FailedRun]) -> PalsError:
    """The error a comparison ends with when runs failed: each named with its error; the report leaves them out."""
    lines = [f"  {run.row} seed {run.seed} ({run.folder.name}): {run.error}" for run in failed]
    return PalsError(
        f"{len(failed)} run(s) failed; the report leaves them out (as missing):\n"
        + "\n".join(lines)
        + "\nfix what they name and run the same command again: it trains only the runs not done"
    )
