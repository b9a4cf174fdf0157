"""One base serving many tasks: throughput and memory of three ways to answer a mixed request stream.

A stream of requests, each naming one of 5 GLUE tasks (texts from the local dev sets), is answered
in batches of ``--batch`` requests by

    one model     one MultiTaskModel with the 5 tasks' PALs, one forward per batch (adapters' MultiTask
                  routes each row to its task's PAL);
    per task      the same model, one forward per task present in the batch;
    5 models      5 separately loaded single-task models (5 copies of the base), one forward each.

Timing is interleaved round-robin in one process (noise on a shared machine hits every setup alike);
the reported ratios are medians of per-round ratios. Memory: the bytes of weights each setup holds
(exact), and the peak resident memory of a fresh process that builds the setup and answers the stream.

    python benchmarks/serving.py --glue-dir ../shared/glue                 # bundled MiniLM
    python benchmarks/serving.py --glue-dir ../shared/glue --model tiny --requests 64 --rounds 2   # smoke

Writes benchmarks/results/serving_<model>.{json,md}.
"""

import argparse
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import safetensors.torch
import torch
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MODELS, command_line, load_model, machine_info, markdown_table, write_results  # noqa: E402

from pals_adapters.harness.data import load_split  # noqa: E402
from pals_adapters.harness.methods import get_method  # noqa: E402
from pals_adapters.harness.model import BUNDLED_MODEL, MultiTaskModel, resolve_model  # noqa: E402
from pals_adapters.harness.serving import MultiTaskPredictor  # noqa: E402
from pals_adapters.harness.tasks import GLUE_TASKS  # noqa: E402

TASKS = ("cola", "sst2", "mrpc", "stsb", "rte")
SETUPS = ("one model", "per task", "5 models")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--glue-dir", required=True, help="GLUE folder (texts of the requests)")
    parser.add_argument("--model", default="minilm", choices=MODELS, help="minilm (bundled, pretrained) or random")
    parser.add_argument("--method", default="pals", help="an adapters method of the harness (pals, houlsby, lora)")
    parser.add_argument("--requests", type=int, default=512, help="requests in the stream")
    parser.add_argument("--batch", type=int, default=32, help="requests answered together")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--memory-of", default=None, help=argparse.SUPPRESS)  # internal: one setup in a child
    parser.add_argument("--weights", default=None, help=argparse.SUPPRESS)  # internal: the 5-task weights
    return parser.parse_args(argv)


def request_stream(glue_dir, count, seed=0):
    """``count`` requests, each for a random task, with a random dev example of that task."""
    rng = random.Random(seed)
    dev = {task: load_split(GLUE_TASKS[task], "validation", glue_dir=glue_dir, source="local") for task in TASKS}
    requests = []
    for _ in range(count):
        task = rng.choice(TASKS)
        row = dev[task][rng.randrange(len(dev[task]))]
        request = {"task": task, "text": row["text_a"]}
        if GLUE_TASKS[task].is_pair:
            request["text_b"] = row["text_b"]
        requests.append(request)
    return requests


def fresh_model(args, tasks, tokenizer):
    """A MultiTaskModel of ``tasks`` on its own copy of the base (loaded anew, not copied from another)."""
    encoder = load_model(args.model)
    if encoder.config.vocab_size < len(tokenizer):
        encoder.resize_token_embeddings(len(tokenizer))  # random models get the bundled vocabulary
    return MultiTaskModel(encoder, {t: GLUE_TASKS[t] for t in tasks}, get_method(args.method), "finetune").eval()


def load_weights(model, path):
    """The weights of the 5-task model, for the tasks this model has (so that all setups answer alike)."""
    missing, _ = safetensors.torch.load_model(model, path, strict=False)
    if missing:
        raise SystemExit(f"weights missing from {path}: {missing[:3]}")
    return model


def build_setups(args, weights_path, only=None):
    """The ways of serving (all, or ``only`` one), each a function requests -> predictions, and the
    bytes of weights each holds. Only what a setup needs is built (its peak memory is measured alone)."""
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(BUNDLED_MODEL))
    setups, weights = {}, {}
    if only in (None, "one model", "per task"):
        shared = load_weights(fresh_model(args, TASKS, tokenizer), weights_path)
        one = MultiTaskPredictor(shared, tokenizer, batch_size=args.batch)
        per_task = MultiTaskPredictor(shared, tokenizer, batch_size=args.batch)
        per_task.one_forward = False  # the same model, one forward per task of the batch
        setups.update({"one model": one.predict, "per task": per_task.predict})
        weights.update({"one model": weight_bytes([shared]), "per task": weight_bytes([shared])})
    if only in (None, "5 models"):
        separate = {
            task: MultiTaskPredictor(load_weights(fresh_model(args, [task], tokenizer), weights_path), tokenizer,
                                     batch_size=args.batch)
            for task in TASKS
        }
        setups["5 models"] = lambda requests: answer_separately(separate, requests, args.batch)
        weights["5 models"] = weight_bytes([p.model for p in separate.values()])
    return setups, weights


def answer_separately(predictors, requests, batch):
    """Each batch's requests of a task go to that task's own model."""
    answers = [None] * len(requests)
    for start in range(0, len(requests), batch):
        chunk = list(enumerate(requests[start : start + batch], start))
        for task, predictor in predictors.items():
            mine = [(i, r) for i, r in chunk if r["task"] == task]
            for (i, _), answer in zip(mine, predictor.predict([r for _, r in mine]) if mine else []):
                answers[i] = answer
    return answers


def weight_bytes(models):
    return sum(t.numel() * t.element_size() for m in models for t in [*m.parameters(), *m.buffers()])


def peak_memory_of(setup, args):
    """Peak RSS (MB) of a fresh process that builds ``setup`` and answers the stream once."""
    argv = [sys.executable, __file__, "--glue-dir", args.glue_dir, "--model", args.model, "--method", args.method,
            "--requests", str(args.requests), "--batch", str(args.batch), "--threads", str(args.threads),
            "--memory-of", setup, "--weights", args.weights]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"]


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    requests = request_stream(args.glue_dir, args.requests)
    if args.memory_of:  # child process: one setup, one pass, report the peak
        setups, _ = build_setups(args, args.weights, only=args.memory_of)
        setups[args.memory_of](requests)
        print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    weights_dir = tempfile.mkdtemp(prefix="serving-")
    args.weights = str(Path(weights_dir) / "five_tasks.safetensors")
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(BUNDLED_MODEL))
    safetensors.torch.save_model(fresh_model(args, TASKS, tokenizer), args.weights)
    setups, weights = build_setups(args, args.weights)

    reference = [a.label for a in setups["one model"](requests)]
    for name in SETUPS[1:]:  # the three ways give the same answers
        other = [a.label for a in setups[name](requests)]
        same = sum(a == b if isinstance(a, str) else abs(a - b) < 1e-4 for a, b in zip(reference, other))
        if same != len(reference):
            raise SystemExit(f"{name}: {len(reference) - same} answers differ from 'one model'")

    seconds = {name: [] for name in SETUPS}
    for round_index in range(args.rounds + 1):
        for name in SETUPS:
            start = time.perf_counter()
            setups[name](requests)
            if round_index:  # the first round warms up
                seconds[name].append(time.perf_counter() - start)
    per_round = {name: [args.requests / s for s in seconds[name]] for name in SETUPS}
    ratios = {
        name: statistics.median(a / b for a, b in zip(seconds[name], seconds["one model"])) for name in SETUPS
    }
    memory = {name: peak_memory_of(name, args) for name in SETUPS}
    shutil.rmtree(weights_dir, ignore_errors=True)

    rows = [
        [name, f"{statistics.median(per_round[name]):.1f}", f"{ratios[name]:.2f}x",
         f"{weights[name] / 2**20:.1f}", f"{memory[name]:.0f}"]
        for name in SETUPS
    ]
    table = markdown_table(
        ["setup", "requests/s (median)", "time vs one model", "weights held (MB)", "peak RSS (MB)"], rows
    )
    text = (
        f"# Serving 5 tasks on one base ({args.model}, {args.method}, {args.requests} requests, batches of "
        f"{args.batch}, {args.threads} thread(s))\n\n{table}\n\n"
        "Time ratios are medians over rounds of (setup time / one-model time) measured in one process, "
        "interleaved; peak RSS from a fresh process per setup. All three give the same answers (checked).\n\n"
        f"Command: `{command_line()}`\n"
    )
    data = {
        "command": command_line(), "machine": machine_info(), "settings": vars(args),
        "requests_per_second": per_round, "time_ratio_vs_one_model": ratios,
        "weight_bytes": weights, "peak_rss_mb": memory,
    }
    write_results(f"serving_{args.model}", data, text, out_dir=args.out_dir)
    print(text)


if __name__ == "__main__":
    main()
