"""One rank of a tiny 2-process multi-task PALs run (launched by tests/test_reliability.py).

    python -m torch.distributed.run --nproc_per_node 2 --master_port PORT \\
        tests/harness/distributed_worker.py --model TINY_BERT_DIR --glue-dir GLUE_DIR --out OUT_DIR

The same run with accelerate (2 processes; on a CPU-only machine the harness picks gloo DDP; not
``--cpu``, which accelerate launches as a single process without mpirun):

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no --main_process_port PORT \\
        tests/harness/distributed_worker.py --model TINY_BERT_DIR --glue-dir GLUE_DIR --out OUT_DIR

It trains rte + stsb (32 examples each, batch 4, 6 steps, base fine-tuned) through the harness
functions, records the task (and a digest of the input ids) of every step
on this rank by wrapping ``compute_loss``, and writes ``OUT_DIR/rank<R>.json``: ``{"rank",
"world_size", "backend", "global_step", "tasks", "batches", "fingerprint"}``, the fingerprint being
the sha256 of every parameter's name and bytes after training.
"""

import argparse
import hashlib
import json
import os
from pathlib import Path

import torch
from transformers import AutoTokenizer, set_seed

from pals_adapters.harness.methods.model import build_model
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.training.runner import (
    RunConfig,
    build_trainer,
    load_dev_sets,
    load_train_sets,
    resolve_tasks,
)


def parameter_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over the sorted parameter names and their raw bytes."""
    digest = hashlib.sha256()
    for name, param in sorted(model.named_parameters()):
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--glue-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)

    config = RunConfig(
        model=args.model,
        tasks=["rte", "stsb"],
        glue_dir=args.glue_dir,
        data_source="local",
        method="pals",
        base="finetune",
        sampler="annealed",
        steps_per_epoch=2,
        max_steps=args.steps,
        batch_size=4,
        max_length=64,
        lr=1e-3,
        max_train_examples=32,
        max_eval_examples=4,
        logging_steps=3,
        eval_batch_size=4,
        output_dir=str(Path(args.out) / "run"),
        export=False,
    )
    config.validate()
    set_seed(config.seed)
    specs = resolve_tasks(config)
    tokenizer = AutoTokenizer.from_pretrained(config.model)
    train, dev = load_train_sets(config, specs, tokenizer), load_dev_sets(config, specs, tokenizer)
    model = build_model(config.model, specs, get_method(config.method), config.base)
    trainer = build_trainer(config, model, tokenizer, train, dev)

    tasks, batches = [], []
    compute_loss = trainer.compute_loss

    def recording_compute_loss(model, inputs, *rest, **kwargs):
        tasks.append(inputs["task"])
        batches.append(hashlib.sha256(inputs["input_ids"].numpy().tobytes()).hexdigest()[:16])
        return compute_loss(model, inputs, *rest, **kwargs)

    trainer.compute_loss = recording_compute_loss
    trainer.train()

    rank = int(os.environ.get("RANK", "0"))
    result = {
        "rank": rank,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
        "global_step": trainer.state.global_step,
        "tasks": tasks,
        "batches": batches,
        "fingerprint": parameter_fingerprint(trainer.accelerator.unwrap_model(trainer.model)),
    }
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
