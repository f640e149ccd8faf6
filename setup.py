"""Folder -> import package mapping (everything else is in pyproject.toml).

    frontend/    ->  vllm_pyfrontend               (the worker's layers)
    supervisor/  ->  vllm_pyfrontend.supervisor    (process management, launchers, sim engine)

The folders keep short names; the import names cannot collide with the PyPI distributions
`frontend` and `supervisor` (the latter arrives with vLLM's dependency tree).
"""

from setuptools import find_packages, setup

ROOT = "vllm_pyfrontend"
FOLDERS = {"frontend": ROOT, "supervisor": f"{ROOT}.supervisor"}

packages = [
    FOLDERS[name.split(".", 1)[0]] + name[len(name.split(".", 1)[0]):]
    for name in find_packages(include=[f"{folder}*" for folder in FOLDERS])
]
setup(packages=packages, package_dir={pkg: folder for folder, pkg in FOLDERS.items()})
