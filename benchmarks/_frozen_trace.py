"""frozen_learning.py --trace: the PALs' output over the first steps of the stsb part, in a plain loop."""

import torch

from pals_adapters.harness import build_model, get_method
from pals_adapters.harness.data.batches import TaskFeatures
from pals_adapters.harness.methods.model import resolve_model
from pals_adapters.harness.training.runner import load_train_sets, regression_label_stats


def record_into(seen, key, output):
    """A hook that keeps the module's output (``output``) or its first input in ``seen[key]``."""
    if output:
        return lambda module, args, out: seen.__setitem__(key, out.detach())
    return lambda module, args, *out: seen.__setitem__(key, args[0].detach())


def trace_run(config, at_mean, steps, every):
    from transformers import AutoTokenizer, get_linear_schedule_with_warmup, set_seed

    specs = config.validate()
    set_seed(config.seed)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(config.model))
    train = load_train_sets(config, specs, tokenizer)
    model = build_model(config.model, specs, get_method("pals"), "frozen")
    mean, std = regression_label_stats(train, specs)["stsb"]
    if at_mean:
        model.standardise_targets({"stsb": (mean, std)})
    features = TaskFeatures(train["stsb"], tokenizer.pad_token_id)
    seen = {}
    layers = list(model.backbone.encoder.layer)
    for i, layer in enumerate(layers):
        pal = layer.pals.adapters["stsb"]
        pal.register_forward_hook(record_into(seen, ("pal", i), output=True))
        pal.activation.register_forward_hook(record_into(seen, ("gelu", i), output=False))
        layer.output.LayerNorm.register_forward_pre_hook(record_into(seen, ("ln", i), output=False))
    params = model.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * config.max_steps), config.max_steps)
    order = torch.randperm(len(train["stsb"]), generator=torch.Generator().manual_seed(config.seed)).tolist()
    model.train()
    losses, lines = [], []
    for step in range(1, steps + 1):
        batch = features.batch(order[(step - 1) * config.batch_size : step * config.batch_size])
        loss = model(task="stsb", **batch)["loss"]
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss) * (std**2 if at_mean else 1.0))
        if step % every == 0 or step == 1:
            rms = [seen[("pal", i)].pow(2).mean().sqrt() for i in range(len(layers))]
            residual = [(seen[("ln", i)] - seen[("pal", i)]).pow(2).mean().sqrt() for i in range(len(layers))]
            dead = [(seen[("gelu", i)] < -2).float().mean() for i in range(len(layers))]
            pal = [seen[("pal", i)] for i in range(len(layers))]
            varying = [(x - x.mean(1, keepdim=True)).pow(2).mean().sqrt() / x.pow(2).mean().sqrt() for x in pal]
            recent = losses[-every:]
            lines.append(
                f"| {'label mean' if at_mean else '0'} | {step} | {sum(recent) / len(recent):.2f} | "
                f"{' '.join(f'{float(x):.3f}' for x in rms)} | {' '.join(f'{float(x):.2f}' for x in residual)} | "
                f"{' '.join(f'{float(x):.2f}' for x in varying)} | {' '.join(f'{float(x):.0%}' for x in dead)} |"
            )
            print(lines[-1], flush=True)
    return lines


def trace(config_for, steps=100, every=25):
    """The first ``steps`` of the stsb part's PALs run, head at 0 and at the label mean, in a plain loop
    (AdamW, the run's warm-up and decay, gradients clipped at 1 as the Trainer does, seeded random batches):
    per layer the RMS of the PAL output and of the residual it joins before the LayerNorm, the part of the
    PAL output that varies over a sequence's tokens (RMS around the sequence's mean, over the RMS), and the
    share of the GELU inputs below -2 (where its slope is under 0.1). Loss: mean over the last ``every``
    steps."""
    lines = [
        "| head starts at | step | loss (label units) | PAL output RMS, layers 1-6 | residual RMS "
        "| PAL output varying over tokens | GELU input < -2 |",
        "|---|---|---|---|---|---|---|",
    ]
    for at_mean in (False, True):
        lines += trace_run(config_for(at_mean), at_mean, steps, every)
    return "\n".join(lines)
