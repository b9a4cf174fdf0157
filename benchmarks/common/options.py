"""Command-line options the suites share."""

from pals_adapters.errors import warn_renamed
from pals_adapters.harness.methods.method import current_name


def comma_list(text):
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (the scripts' comma-separated options)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def typed_methods(text):
    """``--methods`` as typed -> method specs in their current spelling; an old name (``pals_top``,
    ``top_pals``) is accepted with a `pals_adapters.errors.RenamedWarning`."""
    specs = []
    for spec in comma_list(text):
        new = current_name(spec)
        if new != spec:
            warn_renamed("method", spec.partition("[")[0].strip(), new.partition("[")[0])
        specs.append(new)
    return specs
