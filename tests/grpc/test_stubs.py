"""The generated gRPC stubs: produced by the build, never committed, never stale."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tidegate.protocol import codegen

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_SOURCES = ("__init__.py", "codegen.py", "controller_grpc.py", "controller.proto")


def _copy_protocol(dest: Path) -> Path:
    (dest / "tidegate").mkdir()
    (dest / "tidegate" / "__init__.py").write_text("")
    pkg = dest / "tidegate" / "protocol"
    pkg.mkdir(parents=True)
    for name in PROTOCOL_SOURCES:
        shutil.copy(ROOT / "protocol" / name, pkg / name)
    return pkg


def _import_in(root: Path) -> subprocess.CompletedProcess[str]:
    # Without the editable install's finder, which would supply the checkout's grpc_gen.
    code = (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path"
        " if 'editable' not in getattr(f, '__module__', '')];"
        "import tidegate.protocol.controller_grpc as m, tidegate.protocol as p;"
        "print(p.__file__, m.pb2.Segment)"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )


def test_stubs_are_not_committed() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "protocol/grpc_gen"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert tracked.stdout == ""


def test_generated_stubs_import_by_absolute_name(tmp_path: Path) -> None:
    gen = codegen.generate(tmp_path / "grpc_gen")
    assert sorted(p.name for p in gen.iterdir() if p.is_file()) == sorted(codegen.GENERATED)
    assert "from tidegate.protocol.grpc_gen import controller_pb2" in (gen / "controller_pb2_grpc.py").read_text()
    assert codegen.proto_sha256() in (gen / "__init__.py").read_text()


def test_missing_or_stale_stubs_fail_loudly(tmp_path: Path) -> None:
    pkg = _copy_protocol(tmp_path)
    missing = _import_in(tmp_path)
    assert missing.returncode != 0 and "tidegate.protocol.grpc_gen is missing" in missing.stderr

    codegen.generate(pkg / "grpc_gen", pkg)
    fresh = _import_in(tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.startswith(str(pkg))  # the copy, not the editable checkout

    with (pkg / "controller.proto").open("a") as f:
        f.write("\n// an edit after generation\n")
    stale = _import_in(tmp_path)
    assert stale.returncode != 0 and "stale" in stale.stderr


def test_wheel_build_generates_the_stubs(tmp_path: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "pyproject.toml", "setup.py", "README.md", "tidegate", "protocol", "gateway", "core", "tier2", "spark"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    src = tmp_path / "src"
    for name in files:
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, src / name)
    assert not (src / "protocol" / "grpc_gen").exists()
    out = tmp_path / "wheel"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert build.returncode == 0, build.stderr[-5000:]
    (wheel,) = out.glob("tidegate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in (*codegen.GENERATED, "../controller.proto"):
        assert os.path.normpath(f"tidegate/protocol/grpc_gen/{name}") in names
    assert not any(name.split("/")[0] in ("gateway", "core", "protocol", "tier2", "spark") for name in names)
    assert "tidegate/spark/source.py" in names
    assert not (src / "protocol" / "grpc_gen").exists()  # a wheel build leaves the tree alone
