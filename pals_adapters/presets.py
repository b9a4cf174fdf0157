"""The PAL presets by name, as plain settings: `pals.config` builds its `PALsConfig` presets from them, and the
harness reads the names (its methods, ``pals-bench`` help) without importing `adapters`."""

# The paper's Table 3 family; sizes are BERT-base figures and scale with the model width.
PALS_PRESET_SETTINGS: dict[str, dict] = {
    "pals": {},
    "pals_no_share": {"reference_hidden_size_aug": 84, "shared_projections": False},
    "low_rank": {"reference_hidden_size_aug": 100, "shared_projections": False, "inner": "identity"},
    "pals_top_layers": {"reference_hidden_size_aug": 276, "layers": "top"},
    "pals_bottom_layers": {"reference_hidden_size_aug": 276, "layers": "bottom"},
}

# Old spelling -> preset (until 0.3): `add_adapter(config="pals_top")` still works, with a `RenamedWarning`.
RENAMED_PRESETS = {"pals_top": "pals_top_layers", "pals_bottom": "pals_bottom_layers"}
