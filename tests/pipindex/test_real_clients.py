"""The index passes a PEP 503/691 conformance check by real clients: real pip (its own index parser) and
real uv, from PyPI, read it over HTTP on loopback, once as a PEP 691-negotiating server serves it (JSON
at the canonical URL for an Accept that asks for it) and once as a plain static server does (HTML only).
They must find exactly the right wheels with the right hashes, honour data-requires-python, and refuse
a tampered file. Our own reader (faforge.pipindex.read) and `validate` are checked on the same server,
on pages broken on purpose, and against a silent server (exit 4 within the read timeout)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faforge.pipindex.check import check_index
from faforge.pipindex.read import read_local, read_remote
from faforge.pipindex.validate import validate
from tests.pipindex.test_publish_index import assert_consistent, publish
from tests.release.test_publish import faforge
from tests.support import tiny_wheels as tw
from tests.support.hostile_server import serve_hostile
from tests.support.http_server import serve_directory
from tests.support.pip_index_server import JSON_TYPE, pages_served, requests, serve_index

UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
GLUE_211 = f"{tw.SDIST_VERSION}+torch2.11.cu130.abi1"
PLATFORM = ["--only-binary=:all:", "--platform", tw.LINUX_X86, "--implementation", "cp"]
MODES = ["pep691-json", "static-html"]


@contextlib.contextmanager
def serve(root: Path, log: Path, mode: str):
    """pep691-json: the negotiating server (it logs each request); static-html: `python -m http.server`, exactly
    as the README serves the folder (HTML only; no log)."""
    with serve_index(root, log) if mode == "pep691-json" else serve_directory(root) as url:
        yield url


def served_as(log: Path, mode: str) -> bool:
    return mode == "static-html" or pages_served(log) == {JSON_TYPE}


def pip_env() -> dict[str, str]:
    """This machine's pip settings (find-links, extra indexes, constraints) left out: only our index counts."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, "PIP_CONFIG_FILE": os.devnull}


def uv_env(cache: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("UV_")},
        "UV_NO_CONFIG": "1",
        "UV_CACHE_DIR": str(cache),
        "UV_PYTHON_DOWNLOADS": "never",
    }


def pip_download(index: str, dest: Path, python: str, *reqs: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--isolated",
            "--disable-pip-version-check",
            "--no-cache-dir",
            "--index-url",
            index,
            "--dest",
            str(dest),
            "--python-version",
            python,
            "--abi",
            f"cp{python.replace('.', '')}",
            *PLATFORM,
            *reqs,
        ],
        capture_output=True,
        text=True,
        env=pip_env(),
        timeout=300,
    )


def uv(*args: str, cache: Path) -> subprocess.CompletedProcess:
    assert UV, "uv is a test extra (pyproject.toml): pip install -e '.[test]'"
    return subprocess.run([UV, *args], capture_output=True, text=True, env=uv_env(cache), timeout=300)


def uv_platform(python: str) -> list[str]:
    return [
        "--python",
        sys.executable,
        "--python-version",
        python,
        "--python-platform",
        "x86_64-manylinux_2_28",
        "--no-config",
    ]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    out, other = tmp_path_factory.mktemp("wheels"), tmp_path_factory.mktemp("other")
    built = {
        "glue": tw.build_wheel(tw.glue("2.11"), out),
        "glue210": tw.build_wheel(tw.glue("2.10"), out),
        "kernel": tw.build_wheel(tw.kernel(), out),
        "fa3": tw.build_wheel(tw.fa3(), out),
        "glue_other": tw.build_wheel(tw.glue("2.11", payload="tampered = True\n"), other),
    }
    manifest = tmp_path_factory.mktemp("verification")
    for path in built.values():
        tw.record_gates(manifest, path)
    root = tmp_path_factory.mktemp("index") / "wheels"
    result = publish([built[k] for k in ("glue", "glue210", "kernel", "fa3")], manifest, root)
    assert result.returncode == 0, result.stdout + result.stderr
    return root, built


@pytest.mark.parametrize("mode", MODES)
def test_pip_downloads_exactly_the_wheels_of_its_index_with_their_hashes(tmp_path, published, mode):
    root, built = published
    log = tmp_path / "requests.jsonl"
    with serve(root, log, mode) as base:
        for index, glue in (("torch2.11-cu130", built["glue"]), ("torch2.10-cu130", built["glue210"])):
            dest = tmp_path / index
            result = pip_download(f"{base}{index}/", dest, "3.12", tw.glue().name)  # unpinned: the index decides
            assert result.returncode == 0, result.stdout + result.stderr
            got = {p.name: sha256(p) for p in dest.iterdir()}
            assert got == {glue.name: sha256(glue), built["kernel"].name: sha256(built["kernel"])}, got
    assert served_as(log, mode)
    assert mode == "static-html" or any(r["path"].endswith(".whl.metadata") for r in requests(log)), (
        "pip read the PEP 658 metadata files"
    )


@pytest.mark.parametrize("mode", MODES)
def test_uv_resolves_and_installs_exactly_the_wheels_of_its_index(tmp_path, published, mode):
    root, built = published
    log = tmp_path / "requests.jsonl"
    (tmp_path / "req.in").write_text(f"{tw.glue().name}\n{tw.fa3().name}\n")
    with serve(root, log, mode) as base:
        index = f"{base}torch2.11-cu130/"
        compiled = uv(
            "pip",
            "compile",
            "--index-url",
            index,
            *uv_platform("3.12"),
            "--generate-hashes",
            "--no-header",
            str(tmp_path / "req.in"),
            cache=tmp_path / "cache",
        )
        assert compiled.returncode == 1 and "torch" in compiled.stderr, (
            "FA3 needs torch, which only PyPI has: a resolver error"
        )
        (tmp_path / "req.in").write_text(f"{tw.glue().name}\n")
        compiled = uv(
            "pip",
            "compile",
            "--index-url",
            index,
            *uv_platform("3.12"),
            "--generate-hashes",
            "--no-header",
            str(tmp_path / "req.in"),
            cache=tmp_path / "cache",
        )
        assert compiled.returncode == 0, compiled.stderr
        assert (
            f"{tw.glue().name}=={GLUE_211}" in compiled.stdout
            and f"--hash=sha256:{sha256(built['glue'])}" in compiled.stdout
        )
        assert f"--hash=sha256:{sha256(built['kernel'])}" in compiled.stdout, compiled.stdout
        target = tmp_path / "site"
        installed = uv(
            "pip",
            "install",
            "--index-url",
            index,
            *uv_platform("3.12"),
            "--target",
            str(target),
            tw.glue().name,
            cache=tmp_path / "cache",
        )
        assert installed.returncode == 0, installed.stderr
    assert (target / "flash_attn" / "__init__.py").is_file()
    assert sorted(p.name for p in target.glob("*.dist-info")) == [
        f"flash_attn-{GLUE_211}.dist-info",
        f"libflash_attn_kernels-{tw.KERNEL_VERSION}.dist-info",
    ]
    assert served_as(log, mode)


def test_pip_and_uv_honour_requires_python(tmp_path, published):
    root, _ = published
    with serve_index(root, tmp_path / "log.jsonl") as base:
        index = f"{base}torch2.11-cu130/"
        result = pip_download(index, tmp_path / "dl", "3.11", tw.glue().name)
        assert result.returncode == 1 and "No matching distribution found" in result.stderr, (
            result.stdout + result.stderr
        )
        assert not (tmp_path / "dl").exists() or not list((tmp_path / "dl").iterdir())
        (tmp_path / "req.in").write_text(f"{tw.glue().name}\n")
        compiled = uv(
            "pip",
            "compile",
            "--index-url",
            index,
            *uv_platform("3.11"),
            str(tmp_path / "req.in"),
            cache=tmp_path / "cache",
        )
        assert compiled.returncode == 1 and "Python" in compiled.stderr, compiled.stderr


def test_a_tampered_wheel_is_refused_by_pip_and_uv(tmp_path, published):
    source, built = published
    root = tmp_path / "wheels"
    shutil.copytree(source, root)
    shutil.copy(
        built["glue_other"], root / "files" / built["glue"].name
    )  # same name, other bytes: the pages' sha256 is now wrong
    with serve_index(root, tmp_path / "log.jsonl") as base:
        index = f"{base}torch2.11-cu130/"
        result = pip_download(index, tmp_path / "dl", "3.12", "--no-deps", tw.glue().name)
        assert result.returncode == 1 and "DO NOT MATCH THE HASHES" in result.stderr, result.stdout + result.stderr
        installed = uv(
            "pip",
            "install",
            "--index-url",
            index,
            *uv_platform("3.12"),
            "--target",
            str(tmp_path / "site"),
            "--no-deps",
            tw.glue().name,
            cache=tmp_path / "cache",
        )
        assert installed.returncode != 0 and "hash" in installed.stderr.lower(), installed.stderr
    assert not (tmp_path / "site" / "flash_attn").exists()
    problems = check_index(str(root)).problems
    assert any("has another sha256 or size than its link says" in p for p in problems), problems


@pytest.mark.parametrize("mode", MODES)
def test_our_reader_and_validate_read_the_served_index(tmp_path, published, mode):
    root, built = published
    with serve(root, tmp_path / "log.jsonl", mode) as base:
        report = check_index(f"{base}torch2.11-cu130/")
    assert report.problems == []
    listing = report.listings["torch2.11-cu130"]
    assert sorted(listing.roots) == (["html", "json"] if mode == "pep691-json" else ["html"])
    files = {p: {f.filename: f.hashes["sha256"] for f in links} for p, links in listing.files().items()}
    assert files == {
        tw.fa3().name: {built["fa3"].name: sha256(built["fa3"])},
        tw.glue().name: {built["glue"].name: sha256(built["glue"])},
        tw.kernel().name: {built["kernel"].name: sha256(built["kernel"])},
    }
    assert all(f.url.startswith(f"{base}files/") for links in listing.files().values() for f in links)


def test_validate_names_each_broken_rule(tmp_path, published):
    source, built = published
    root = tmp_path / "wheels"
    shutil.copytree(source, root)
    index = root / "torch2.11-cu130"
    page = index / "flash-attn" / "index.html"
    page.write_text(
        page.read_text().replace("#sha256=", "#md5=").replace(' data-requires-python="&gt;=3.12,&lt;3.13"', "")
    )
    data = json.loads((index / "libflash-attn-kernels" / "index.json").read_text())
    data["meta"]["api-version"] = "2.0"
    data["files"][0]["hashes"]["sha256"] = "0" * 64
    (index / "libflash-attn-kernels" / "index.json").write_text(json.dumps(data))
    shutil.copytree(index / "flash-attn", index / "Flash_Attn")
    root_page = json.loads((index / "index.json").read_text())
    root_page["projects"].append({"name": "Flash_Attn"})
    (index / "index.json").write_text(json.dumps(root_page))
    moved = root / "torch2.10-cu130" / "flash-attn" / "index.json"
    data = json.loads(moved.read_text())
    (index / "flash-attn" / "index.json").write_text(json.dumps({**data, "name": tw.glue().name}))
    problems = "\n".join(validate(read_local(index), index=index.name, files=root / "files"))
    for says in (
        f"{built['glue'].name}: has no sha256",
        f"{built['glue'].name}: has no Requires-Python",
        "meta.api-version is '2.0', not 1.x",
        "has another sha256 or size than its link says",
        "'Flash_Attn' is not a PEP 503-normalised name",
        "JSON and HTML root pages list different projects",
        f"{built['glue210'].name}: its local label 'torch2.10.cu130.abi1' names torch2.10-cu130, not torch2.11-cu130",
        "its JSON and HTML pages disagree",
    ):
        assert says in problems, f"{says!r} not in:\n{problems}"
    cli = faforge("index", "--pip", "--check", str(root))
    assert cli.returncode == 1 and "problem: " in cli.stdout and "Traceback" not in cli.stderr
    healed = faforge("index", "--pip", str(root))
    assert healed.returncode == 1 and "problem" not in healed.stdout, healed.stdout
    assert f"{index}/Flash_Attn: not written by faforge" in healed.stdout, healed.stdout
    assert (index / "Flash_Attn" / "index.html").is_file(), "a folder faforge does not write is reported, never removed"
    shutil.rmtree(index / "Flash_Attn")
    assert_consistent(root)


@pytest.mark.parametrize("mode", ["silent", "drip10"])
def test_a_silent_index_server_is_exit_4_within_the_read_timeout(mode):
    with serve_hostile() as server:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "faforge", "index", "--pip", "--check", f"{server}/{mode}/torch2.11-cu130/"],
            capture_output=True,
            text=True,
            env={**os.environ, "FAFORGE_HTTP_TIMEOUT": "2"},
            timeout=60,
        )
        took = time.monotonic() - started
    assert (
        result.returncode == 4
        and f"{server}/{mode}/torch2.11-cu130/" in result.stderr
        and "FAFORGE_HTTP_TIMEOUT" in result.stderr
    ), result.stderr
    assert took < 12, f"{took:.1f} s"


def test_a_page_of_another_content_type_is_no_index_page_for_pip_nor_for_our_reader(tmp_path):
    """A server answering `application/json` (a static host that types index.json by its suffix, or the hostile
    /badjson/): real pip skips the page, so the index holds nothing for it. Our reader says so as a problem
    naming the Content-Type (`plan --index` then exits 4), never as an empty index whose cells all need a build."""
    with serve_hostile() as server:
        url = f"{server}/badjson/torch2.11-cu130/"
        pip = pip_download(url, tmp_path / "dest", "3.12", "flash-attn")
        said = pip.stdout + pip.stderr
        assert pip.returncode != 0 and "got Content-Type: application/json" in said, said
        listing = read_remote(url)
        assert any("Content-Type application/json" in p and "pip skips it" in p for p in listing.problems), (
            listing.problems
        )
        check = faforge("index", "--pip", "--check", url)
    assert check.returncode == 1 and "Content-Type application/json" in check.stdout + check.stderr, (
        check.stdout + check.stderr
    )
