"""Timing and peak memory of benchmark jobs, for speed.step: interleaved rounds, CUDA or sampled RSS peaks."""

import ctypes
import gc
import os
import statistics
import threading
import time
from pathlib import Path

import torch


def autocast_job(job, device):
    def run():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return job()

    run.prepare = getattr(job, "prepare", None)
    return run


def prepare(job):
    """A job's untimed set-up, where it has one (``job.prepare``: see jobs.set_mode)."""
    if getattr(job, "prepare", None) is not None:
        job.prepare()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


# --- timing: round-robin, the starting job rotates each round ------------------------------------


def time_rounds(jobs, warmup, repeats, device, start, first_calls=None):
    """Seconds of each job in each timed round; ``first_calls`` receives each job's first (warm-up) call,
    which for a compiled row includes compiling it."""
    keys = list(jobs)
    times = {key: [] for key in keys}
    rounds = warmup + repeats
    for r in range(rounds):
        order = keys[r % len(keys) :] + keys[: r % len(keys)]
        for key in order:
            prepare(jobs[key])
            sync(device)
            t0 = time.perf_counter()
            jobs[key]()
            sync(device)
            if r >= warmup:
                times[key].append(time.perf_counter() - t0)
            elif r == 0 and first_calls is not None:
                first_calls[key] = time.perf_counter() - t0
        label = "warm-up" if r < warmup else "timed"
        print(f"round {r + 1}/{rounds} ({label}) done, {time.perf_counter() - start:.0f}s elapsed", flush=True)
    return times


def paired_ratio(times, key, reference):
    """Median and range over rounds of time[key] / time[reference] within the same round (time_rounds's
    interleaved rounds: both saw the same load)."""
    ratios = [a / b for a, b in zip(times[key], times[reference])]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


# --- memory: one more round, each job alone, peak over what was allocated before it ---------------
# CPU: resident set size sampled by a thread while the job runs. glibc is told to serve every
# allocation over 128 KiB with mmap and to return freed memory at once, so RSS follows live tensors
# (its defaults keep freed memory around, and the first job would look like the only one that
# allocates). CUDA: torch.cuda.max_memory_allocated.


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cuda_peak_extra_bytes(job):
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    job()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def rss_peak_extra_bytes(job, libc):
    gc.collect()
    if libc is not None:
        libc.malloc_trim(0)
    before = rss_bytes()
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    job()
    done.set()
    sampler.join()
    return max(peak[0], rss_bytes()) - before


def glibc_returning_memory():
    """glibc with fixed mmap/trim thresholds, so freed big blocks go back at once; None elsewhere."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD: fixed, so freed big blocks are unmapped
        libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD
        return libc
    except (OSError, AttributeError):
        return None


def measure_memory(jobs, device, start):
    """(peak extra bytes per job, how it was measured); ({}, None) where there is no way to measure."""
    if device.type == "cuda":
        method, peak = "torch.cuda.max_memory_allocated - memory_allocated before the job", cuda_peak_extra_bytes
    elif Path("/proc/self/statm").exists():
        method = "peak resident set size (sampled every 0.5 ms) - RSS before the job"
        libc = glibc_returning_memory()
        if libc is not None:
            method += "; glibc mallopt mmap/trim threshold 128 KiB"

        def peak(job):
            return rss_peak_extra_bytes(job, libc)
    else:
        print("no way to measure memory on this platform: skipped")
        return {}, None
    memory = {}
    for key, job in jobs.items():
        prepare(job)
        memory[key] = peak(job)
    print(f"memory round done, {time.perf_counter() - start:.0f}s elapsed")
    return memory, method


# --- summarise ----------------------------------------------------------------------------------
