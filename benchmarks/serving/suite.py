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

    python -m benchmarks run serving --glue-dir ../shared/glue            # bundled MiniLM
    python -m benchmarks run serving --glue-dir ../shared/glue --model tiny --requests 64 --rounds 2   # smoke

Writes benchmarks/results/serving/serving_<model>.{json,md}.
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

from benchmarks.common import MODELS, command_line, load_model, machine_info, markdown_table, results_dir, write_results
from pals_adapters.harness.methods.model import BUNDLED_MODEL, MultiTaskModel, resolve_model
from pals_adapters.harness.methods.registry import get_method
from pals_adapters.harness.serving.predictor import MultiTaskPredictor
from pals_adapters.harness.tasks.glue import GLUE_TASKS
from pals_adapters.harness.tasks.splits import load_split

DESCRIPTION = (
    "serving: throughput and memory of one base answering many tasks (one model, per task, one model per task)"
)

REPO = Path(__file__).resolve().parents[2]  # children run `python -m benchmarks` from here
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
    parser.add_argument("--out-dir", default=str(results_dir("serving")))
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
        one = MultiTaskPredictor(shared, tokenizer, batch_size=args.batch, sort_by_length=False)
        per_task = MultiTaskPredictor(shared, tokenizer, batch_size=args.batch, sort_by_length=False)
        per_task.one_forward = False  # the same model, one forward per task of the batch
        setups.update({"one model": one.predict, "per task": per_task.predict})
        weights.update({"one model": weight_bytes([shared]), "per task": weight_bytes([shared])})
    if only in (None, "5 models"):
        separate = {
            task: MultiTaskPredictor(
                load_weights(fresh_model(args, [task], tokenizer), weights_path),
                tokenizer,
                batch_size=args.batch,
                sort_by_length=False,
            )
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


def current_rss_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def memory_of(setup, args):
    """Resident memory (MB) of a fresh process that builds ``setup`` (after loading) and answers the
    stream once (peak). The peak also holds the allocator's slack from batches of varying length."""
    argv = [
        sys.executable,
        "-m",
        "benchmarks",
        "run",
        "serving",
        "--glue-dir",
        args.glue_dir,
        "--model",
        args.model,
        "--method",
        args.method,
        "--requests",
        str(args.requests),
        "--batch",
        str(args.batch),
        "--threads",
        str(args.threads),
        "--memory-of",
        setup,
        "--weights",
        args.weights,
    ]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def timed_rounds(setups, streams, rounds):
    """Seconds per pass over each stream, for every setup, interleaved round-robin (first round: warm-up)."""
    seconds = {(order, name): [] for order in streams for name in setups}
    for round_index in range(rounds + 1):
        for order, requests in streams.items():
            for name, answer in setups.items():
                start = time.perf_counter()
                answer(requests)
                if round_index:
                    seconds[order, name].append(time.perf_counter() - start)
    return seconds


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    requests = request_stream(args.glue_dir, args.requests)
    if args.memory_of:  # child process: one setup, one pass
        setups, _ = build_setups(args, args.weights, only=args.memory_of)
        loaded = current_rss_mb()
        setups[args.memory_of](requests)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"loaded_rss_mb": loaded, "peak_rss_mb": peak}))
        return 0
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

    # arrival: batches of requests in the order they came (a serving window), mixed lengths and tasks;
    # sorted: the same requests ordered by length first (offline prediction), so batches pad little.
    lengths = [len(tokenizer(r["text"], r.get("text_b"))["input_ids"]) for r in requests]
    by_length = sorted(range(len(requests)), key=lambda i: -lengths[i])
    streams = {"arrival": requests, "sorted": [requests[i] for i in by_length]}
    seconds = timed_rounds(setups, streams, args.rounds)
    ratios = {
        key: statistics.median(a / b for a, b in zip(seconds[key], seconds[key[0], "one model"])) for key in seconds
    }
    throughput = {key: statistics.median(args.requests / s for s in seconds[key]) for key in seconds}
    memory = {name: memory_of(name, args) for name in SETUPS}
    shutil.rmtree(weights_dir, ignore_errors=True)

    rows = [
        [
            name,
            *(f"{throughput[order, name]:.1f} ({ratios[order, name]:.2f}x)" for order in streams),
            f"{weights[name] / 2**20:.1f}",
            f"{memory[name]['loaded_rss_mb']:.0f}",
            f"{memory[name]['peak_rss_mb']:.0f}",
        ]
        for name in SETUPS
    ]
    table = markdown_table(
        [
            "setup",
            "requests/s, arrival order (time vs one model)",
            "requests/s, sorted by length (time vs one model)",
            "weights held (MB)",
            "RSS loaded (MB)",
            "peak RSS (MB)",
        ],
        rows,
    )
    text = (
        f"# Serving 5 tasks on one base ({args.model}, {args.method}, {args.requests} requests, batches of "
        f"{args.batch}, {args.threads} thread(s))\n\n{table}\n\n"
        "Requests/s are medians over rounds; the time ratios are medians over rounds of (setup time / one-model "
        "time), measured in one process, interleaved. 'one model' pads a batch that mixes tasks to its longest "
        "request; 'per task' and '5 models' pad each task's rows to their own longest. RSS from a fresh process "
        "per setup, after loading and at its peak while answering. All three give the same answers (checked).\n\n"
        f"Command: `{command_line('serving', argv)}`\n"
    )
    data = {
        "command": command_line("serving", argv),
        "machine": machine_info(),
        "settings": vars(args),
        "requests_per_second": {f"{o}/{n}": v for (o, n), v in throughput.items()},
        "time_ratio_vs_one_model": {f"{o}/{n}": v for (o, n), v in ratios.items()},
        "seconds": {f"{o}/{n}": v for (o, n), v in seconds.items()},
        "weight_bytes": weights,
        "memory_mb": memory,
    }
    write_results(f"serving_{args.model}", data, text, out_dir=args.out_dir)
    print(text)
    return 0
