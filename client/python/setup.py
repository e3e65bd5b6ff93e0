"""The `irisd` Python package (ctypes over libiris): `pip install ./client/python`, offline with the
system's setuptools (no pyproject.toml, so pip builds it without fetching a build backend).
libiris itself comes from irisd's build (`cmake --install`) or package; the module finds it in
its install prefix or on the loader's path (see irisd/__init__.py)."""
import pathlib
import re

from setuptools import setup


def project_version():
    cmake = pathlib.Path(__file__).resolve().parents[2] / "CMakeLists.txt"
    if cmake.exists():
        found = re.search(r"project\(iris VERSION ([0-9.]+)", cmake.read_text())
        if found:
            return found.group(1)
    return "0.0.0"


setup(
    name="irisd",
    version=project_version(),
    description="Python client of irisd: collectives on GPU copy engines",
    packages=["irisd"],
    python_requires=">=3.8",
)
