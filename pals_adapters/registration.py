"""When the plugin registers its config types with `adapters`: as soon as both are imported, in either order.

``import pals_adapters`` does not import `adapters` (nor torch, nor transformers), so that the harness's light
paths (``pals-bench --help``, reading a manifest) start in a fraction of a second. Registration therefore
follows `adapters`: at once when it is already imported, else right after its import finishes, through an
import hook that removes itself once it has fired.

An import of `adapters` started by the plugin's own packages (``from pals_adapters.pals import PALsConfig``
as the first import of a program) must wait for them: their names are not all defined yet. The hook counts
the plugin packages being imported and registers when the outermost one is done.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable

_ADAPTERS = "adapters"
_PLUGIN_PACKAGES = ("pals_adapters.pals", "pals_adapters.ca_mtl")


def register_when_adapters_imported(register: Callable[[], None]) -> None:
    """Calls ``register`` now if `adapters` is imported, else installs the hook that calls it once it is."""
    if _ADAPTERS in sys.modules:
        register()
    elif not any(isinstance(finder, _RegistrationHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegistrationHook(register))


class _RegistrationHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it lets the other finders find `adapters` and the plugin packages, and wraps
    the loader's ``exec_module`` of each so that registration runs after the last of them is executed."""

    def __init__(self, register: Callable[[], None]) -> None:
        self._register_plugin = register
        self._lock = threading.RLock()
        self._plugin_imports = 0  # plugin packages being executed, nested
        self._adapters_imported = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _ADAPTERS and fullname not in _PLUGIN_PACKAGES:
            return None
        spec = self._spec_from_other_finders(fullname, path, target)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module
        finished = self._adapters_finished if fullname == _ADAPTERS else self._plugin_package_finished

        def exec_module(module):
            if fullname != _ADAPTERS:
                with self._lock:
                    self._plugin_imports += 1
            try:
                execute(module)
            except BaseException:
                if fullname != _ADAPTERS:
                    with self._lock:
                        self._plugin_imports -= 1
                raise
            finished()

        loader.exec_module = exec_module  # this spec's own loader instance, so module.__loader__ stays the real one
        return spec

    def _spec_from_other_finders(self, fullname, path, target):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None

    def _adapters_finished(self) -> None:
        with self._lock:
            self._adapters_imported = True
            ready = self._plugin_imports == 0
        if ready:
            self._register()

    def _plugin_package_finished(self) -> None:
        with self._lock:
            self._plugin_imports -= 1
            ready = self._plugin_imports == 0 and self._adapters_imported
        if ready:
            self._register()

    def _register(self) -> None:
        if self in sys.meta_path:  # first: registering imports the plugin packages, which must not count again
            sys.meta_path.remove(self)
        self._register_plugin()
