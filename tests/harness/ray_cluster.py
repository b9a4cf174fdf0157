"""A real Ray cluster of several nodes on this machine, reachable on loopback only: every node and every
driver runs in one network namespace of its own that has only ``lo`` (Ray then takes 127.0.0.1 as the
nodes' address instead of the machine's interface). Each node is a ``ray start`` with its own temporary
folder, its own scratch folder (TMPDIR) and its own session (its Ray workers each take a process group of
their own, in the node's session), so that a test can kill one node."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helpers import REPO

RAY = str(Path(sys.executable).parent / "ray")
OBJECT_STORE = str(80 * 1000 * 1000)  # bytes: a tiny grid's runs are a few MB


def environment() -> dict:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "RAY_USAGE_STATS_ENABLED": "0",
        # a killed node is declared dead after 3 missed checks a second apart (Ray's default: 5, 3 s apart)
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }


class LoopbackNamespace:
    """A network namespace with only loopback, held open by a sleeping process; `command` runs a command in it."""

    def __init__(self):
        self.holder = subprocess.Popen(
            ["unshare", "-n", "sh", "-c", "ip link set lo up && echo up && exec sleep 3600"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        first = self.holder.stdout.readline()
        if first.strip() != "up":
            self.holder.wait(10)
            raise OSError(f"no network namespace could be made ({self.holder.stderr.read().strip() or 'no output'})")

    def command(self, words: list[str]) -> list[str]:
        return ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", *words]

    def close(self) -> None:
        os.killpg(self.holder.pid, signal.SIGKILL)
        self.holder.wait()


def loopback_namespace() -> tuple[LoopbackNamespace | None, str]:
    """A loopback-only namespace, or None and why none can be made here (not root, no unshare/nsenter ...)."""
    if sys.platform != "linux" or not shutil.which("unshare") or not shutil.which("nsenter"):
        return None, "needs Linux with unshare and nsenter (util-linux)"
    try:
        return LoopbackNamespace(), ""
    except OSError as err:
        return None, f"{err}; the Ray cluster tests need a network namespace of their own (run as root, as CI does)"


class Node:
    """One ``ray start`` (head or worker): its session, its temporary and scratch folders."""

    def __init__(self, name: str, session: int, temp: Path, scratch: Path):
        self.name, self.session, self.temp, self.scratch = name, session, temp, scratch

    def processes(self) -> list[tuple[int, str]]:
        """(pid, command line) of the node's processes, its Ray workers included."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getsid(int(entry.name)) == self.session:
                        found.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
                except (OSError, ProcessLookupError):
                    continue
        return found

    def kill(self) -> None:
        """The whole node (raylet, its workers, its agents), as when its machine goes down."""
        for pid, _ in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class Cluster:
    """A head node and worker nodes in ``namespace``; `address` is what drivers connect to."""

    def __init__(self, namespace: LoopbackNamespace, head_cpus: int = 0):
        self.namespace = namespace
        self.root = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths live in it
        self.nodes: list[Node] = []
        self.head = self._start("head", ["--head", "--port=0", "--include-dashboard=false"], head_cpus)
        self.address = self._read_address()

    def _start(self, name: str, options: list[str], cpus: int) -> Node:
        temp, scratch = self.root / name, self.root / f"{name}-scratch"
        scratch.mkdir(parents=True)
        words = [RAY, "start", *options, f"--num-cpus={cpus}", f"--object-store-memory={OBJECT_STORE}"]
        words += [f"--temp-dir={temp}", "--disable-usage-stats"]
        process = subprocess.Popen(
            self.namespace.command(words),
            env={**environment(), "TMPDIR": str(scratch)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # the node's processes stay in this session: `Node.kill`
        )
        output, _ = process.communicate(timeout=120)
        if process.returncode != 0:
            raise RuntimeError(f"ray start of {name} failed:\n{output[-3000:]}")
        node = Node(name, process.pid, temp, scratch)
        self.nodes.append(node)
        return node

    def _read_address(self) -> str:
        record = self.head.temp / "ray_current_cluster"
        deadline = time.time() + 30
        while not record.is_file() and time.time() < deadline:
            time.sleep(0.1)
        return record.read_text().strip()

    def add_worker(self, name: str, cpus: int = 1) -> Node:
        return self._start(name, [f"--address={self.address}"], cpus)

    def run(self, words: list[str], timeout: float = 240, **kwargs) -> subprocess.CompletedProcess:
        """A command (a driver) in the cluster's namespace."""
        return subprocess.run(
            self.namespace.command(words), env=environment(), capture_output=True, text=True, timeout=timeout, **kwargs
        )

    def start(self, words: list[str]) -> subprocess.Popen:
        """A command in the cluster's namespace, in its own process group, not waited for."""
        return subprocess.Popen(
            self.namespace.command(words),
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def shutdown(self) -> None:
        for node in reversed(self.nodes):
            node.kill()
        shutil.rmtree(self.root, ignore_errors=True)
