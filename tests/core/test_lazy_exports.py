"""`lazy_exports`: a package's public names imported when first read, and refused where they would clash."""

import importlib
import sys

import pytest


def _package(root, name, init, modules):
    folder = root / name
    folder.mkdir()
    (folder / "__init__.py").write_text(init)
    for module, text in modules.items():
        (folder / f"{module}.py").write_text(text)


INIT = (
    "from pals_adapters.lazy import lazy_exports\n"
    '__getattr__, __dir__ = lazy_exports(__name__, {".heavy": ["value"]})\n'
)


def test_a_name_is_imported_when_first_read_and_kept(tmp_path, monkeypatch):
    _package(tmp_path, "lazy_probe", INIT, {"heavy": "value = object()\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    package = importlib.import_module("lazy_probe")
    try:
        assert "lazy_probe.heavy" not in sys.modules and "value" in dir(package)
        first = package.value
        assert "lazy_probe.heavy" in sys.modules and package.__dict__["value"] is first
        with pytest.raises(AttributeError, match="has no attribute 'missing'"):
            getattr(package, "missing")  # noqa: B009  (the attribute read is the point)
    finally:
        for name in ("lazy_probe", "lazy_probe.heavy"):
            sys.modules.pop(name, None)


def test_a_public_name_that_is_also_a_module_of_the_package_is_refused(tmp_path, monkeypatch):
    init = INIT.replace('["value"]', '["value", "other"]').replace('{".heavy"', '{".other": ["other"], ".heavy"')
    _package(tmp_path, "lazy_clash", init, {"heavy": "value = 1\n", "other": "other = 2\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match="other would be both a public name and a module"):
        importlib.import_module("lazy_clash")
    sys.modules.pop("lazy_clash", None)
