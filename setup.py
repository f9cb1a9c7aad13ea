"""Build hook: generate the controller gRPC stubs (protocol/grpc_gen/) with grpcio-tools.

Everything else about the project is in pyproject.toml. The stubs are never committed:
``build_py`` generates them into the wheel being built, or, for an editable install
(``pip install -e .``, where setuptools sets ``editable_mode``), into the source tree,
where the editable finder picks them up. grpcio-tools is a build requirement for this.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _codegen():  # type: ignore[no-untyped-def]
    # By file path: the project is not importable while it is being built.
    spec = importlib.util.spec_from_file_location("_tidegate_codegen", ROOT / "protocol" / "codegen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithGrpcStubs(build_py):
    def run(self) -> None:
        super().run()
        out_root = ROOT if self.editable_mode else Path(self.build_lib)
        _codegen().generate(out_root, ROOT / "protocol")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:  # type: ignore[override]
        outputs = list(super().get_outputs(include_bytecode))
        if not self.editable_mode:
            gen_dir = Path(self.build_lib, "protocol", "grpc_gen")
            outputs += [str(gen_dir / name) for name in _codegen().GENERATED]
        return outputs


setup(
    cmdclass={"build_py": BuildPyWithGrpcStubs},
    # The .proto ships in sdists (to build from) and wheels (for the staleness check).
    package_data={"protocol": ["controller.proto"]},
)
