"""Public names of a package imported on first use (PEP 562), so that importing the package is cheap.

``import pals_adapters`` and ``pals-bench --help`` must not pay for torch, transformers or `datasets`: a
package's ``__init__`` lists its names by module and imports a module when one of its names is first read.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence


def lazy_exports(package: str, modules: Mapping[str, Sequence[str]]) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``modules`` maps a module (relative, ``".read"``)
    to the public names it defines."""
    where = {name: module for module, names in modules.items() for name in names}
    namespace = importlib.import_module(package).__dict__  # the package being initialised: it is in sys.modules
    # Importing a submodule sets the package's attribute of its name to the module, over a lazy name's value.
    clashes = sorted(set(where) & {found.name for found in pkgutil.iter_modules(namespace.get("__path__", []))})
    if clashes:
        raise ImportError(f"{package}: {', '.join(clashes)} would be both a public name and a module of the package")

    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name], package), name)
        namespace[name] = value  # read once; later reads are plain attributes
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
