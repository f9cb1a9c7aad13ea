"""Build hooks: the package layout, the controller gRPC stubs and one C extension.

Everything else about the project is in pyproject.toml.

Layout: the product's top-level folders (``gateway/``, ``core/``, ``protocol/``,
``tier2/``) install as subpackages of ``tidegate`` (``tidegate.gateway``, ...), never as
top-level packages of their own: a package-dir mapping, listed here because setuptools'
package discovery cannot rename what it finds.

Stubs: never committed. ``build_py`` generates them into the wheel being built, or, for an
editable install (``pip install -e .``, where setuptools sets ``editable_mode``), into the
source tree (``protocol/grpc_gen/``), where the editable finder picks them up.
grpcio-tools is a build requirement for this.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
FOLDERS = ("gateway", "core", "protocol", "tier2")


def _codegen():  # type: ignore[no-untyped-def]
    # By file path: the project is not importable while it is being built.
    spec = importlib.util.spec_from_file_location("_tidegate_codegen", ROOT / "protocol" / "codegen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _packages() -> tuple[list[str], dict[str, str]]:
    packages, package_dir = ["tidegate"], {"tidegate": "tidegate"}
    for folder in FOLDERS:
        package_dir[f"tidegate.{folder}"] = folder
        packages.append(f"tidegate.{folder}")
        packages += [f"tidegate.{folder}.{sub}" for sub in find_packages(folder)]
    return packages, package_dir


class BuildPyWithGrpcStubs(build_py):
    def _gen_dir(self) -> Path:
        if self.editable_mode:
            return ROOT / "protocol" / "grpc_gen"
        return Path(self.build_lib, "tidegate", "protocol", "grpc_gen")

    def run(self) -> None:
        super().run()
        _codegen().generate(self._gen_dir(), ROOT / "protocol")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:  # type: ignore[override]
        outputs = list(super().get_outputs(include_bytecode))
        if not self.editable_mode:
            outputs += [str(self._gen_dir() / name) for name in _codegen().GENERATED]
        return outputs


PACKAGES, PACKAGE_DIR = _packages()

setup(
    cmdclass={"build_py": BuildPyWithGrpcStubs},
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    # The .proto ships in sdists (to build from) and wheels (for the staleness check).
    # The admin API's /ui page; protocol/schemas/: Kafka message specs kafka-python lacks
    # (protocol/consumer_group.py).
    package_data={
        "tidegate.protocol": ["controller.proto"],
        "tidegate.protocol.schemas": ["*.json"],
        "tidegate.gateway.admin.rest": ["ui.html"],
    },
    # The produce path's record walk in C (gateway/log/validate.py): optional, a build
    # without a compiler falls back to aiokafka's record reader.
    ext_modules=[
        Extension(
            "tidegate.gateway.log._recordwalk", ["gateway/log/_recordwalk.c"], optional=True
        )
    ],
)
