"""Runs a README code block marked `<!-- readme-example: NAME -->` as it stands (the GPU run uses
it for the torch example). Needs IRIS_SOCKET, and PYTHONPATH / IRIS_LIBRARY for the binding.
    python3 tests/python/gpu/readme_example.py python-torch"""
import pathlib
import sys

name = sys.argv[1]
readme = (pathlib.Path(__file__).resolve().parents[3] / "README.md").read_text()
marker = readme.index(f"<!-- readme-example: {name} -->")
start = readme.index("\n", readme.index("```", marker)) + 1
code = readme[start:readme.index("\n```", start)]
exec(compile(code, f"README.md ({name})", "exec"), {})
print(f"README example {name}: ok")
