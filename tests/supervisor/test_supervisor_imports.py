"""The supervisor process stays small: it does not import what only workers need (aiohttp,
the tokenizer libraries, the chat template engine, uvloop). aiohttp alone, pulled in with the
connection code for a TLS check, made the supervisor's PSS 35 MiB instead of 24.5
(bench/idle_pss.py)."""

from __future__ import annotations

import subprocess
import sys


def test_the_supervisor_cli_does_not_import_worker_libraries():
    code = ("import sys, vllm_pyfrontend.supervisor.cli; "
            "print(sorted(m for m in ('aiohttp', 'tokenizers', 'fastokens', 'minijinja', 'uvloop') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_supervisor_loads_no_parser_media_or_yaml_module_it_does_not_use():
    """Parsing a typical command line and loading the deployment code imports none of the parser
    registries (the `hf` check imports them only when an `hf` parser is chosen), the media
    package (its JSON flags are parsed when given) or YAML (read with --config): ~5 MiB of PSS."""
    code = ("import sys, vllm_pyfrontend.supervisor.cli as cli; "
            "cli.parse_args(['--engine', 'sim', '--enable-auto-tool-choice', '--tool-call-parser', 'deepseek_v4', "
            "'--reasoning-parser', 'deepseek_r1', '.']); "
            "import vllm_pyfrontend.supervisor.deployment; "
            "print(sorted(m for m in ('vllm_pyfrontend.parsers', 'vllm_pyfrontend.media', 'yaml', 'numpy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_worker_loads_numpy_and_unittest_only_when_used():
    """numpy (beam search, pooling models) and unittest/aiohttp.test_utils (batch lines) are loaded
    on use: every worker and the worker template imported them at start, ~7 MiB of PSS."""
    code = ("import sys; from vllm_pyfrontend.server import worker, preload; preload._import_worker_modules(); "
            "print(sorted(m for m in ('numpy', 'unittest', 'aiohttp.test_utils', 'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_worker_template_loads_what_a_worker_imports_while_it_starts(tmp_path):
    """What a worker imports itself is its own memory (~3 MiB each with the speech routes, the
    SQLite store, idna and setproctitle imported after the fork): the template loads them first,
    so building the app's speech routes, opening the default store, resolving the listening host
    and setting the title import nothing new."""
    code = (
        "import sys, socket; from aiohttp import web; from vllm_pyfrontend.server import worker, preload; "
        "preload._import_worker_modules(); before = set(sys.modules); "
        "from vllm_pyfrontend.api.speech import add_speech_routes; add_speech_routes(web.Application(), None); "
        f"from vllm_pyfrontend.store import open_store; open_store(None, {str(tmp_path)!r}); "
        "socket.getaddrinfo('localhost', 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE); "
        "'localhost'.encode('idna'); import setproctitle; "
        "print(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
