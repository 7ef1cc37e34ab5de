"""`faforge publish W.whl --index ROOT` and `faforge index --pip ROOT`: gated per sha256 like conda packages,
sandboxed (a link anywhere is exit 2 before any write), crash-safe (SIGKILL/SIGINT at random moments leave
every link with its complete file; a rerun heals), serialised between parallel publishers, one line on a
full or read-only disk. Real `faforge` processes on real (small) wheels; the invariant is checked here
with hashlib, html.parser and json, not with faforge's code."""

from __future__ import annotations

import hashlib
import html.parser
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from tests.channel.test_channel_index import default_sigint, interrupted_before_faforge, publish_in_mount
from tests.channel.test_channel_sandbox import snapshot
from tests.release.test_publish import SCHEMA, faforge
from tests.support import tiny_wheels as tw

KERNEL2 = f"{tw.SDIST_VERSION}+cu130.sm90.philox64.h0000002"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    wheels = {
        "glue": tw.build_wheel(tw.glue("2.11"), out),
        "glue210": tw.build_wheel(tw.glue("2.10"), out),
        "kernel": tw.build_wheel(tw.kernel(), out),
        "fa3": tw.build_wheel(tw.fa3(), out),
        "glue_k2": tw.build_wheel(tw.glue("2.9", kernel=KERNEL2), out),
    }
    other = tmp_path_factory.mktemp("other")
    wheels["glue_other"] = tw.build_wheel(tw.glue("2.11", payload="y = 2\n"), other)  # same name, other bytes
    wheels["kernel2"] = tw.build_wheel(tw.kernel("cu130.sm90.philox64.h0000002"), out)
    big = tmp_path_factory.mktemp("big")
    wheels["big"] = tw.build_wheel(
        tw.glue("2.12", payload="# " + random.Random(7).randbytes(300_000).hex() + "\n"), big
    )
    return wheels


@pytest.fixture(scope="module")
def manifest(tmp_path_factory, built) -> Path:
    folder = tmp_path_factory.mktemp("verification")
    for key, path in built.items():
        if key != "kernel2":
            tw.record_gates(folder, path)
    return folder


def publish(paths, manifest: Path, root: Path, *extra, cwd=None):
    return faforge("publish", *map(str, paths), "--manifest", str(manifest), "--index", str(root), *extra, cwd=cwd)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Anchors(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links.append(dict(attrs))


def _links(page: Path, root: Path) -> dict[str, str]:
    """file name -> sha256 of every link of one page (HTML or JSON), each checked against its file."""
    links = {}
    if page.suffix == ".html":
        parser = Anchors()
        parser.feed(page.read_text())
        found = [(a["href"], a.get("data-core-metadata"), None) for a in parser.links]
    else:
        data = json.loads(page.read_text())
        found = [
            (f"{f['url']}#sha256={f['hashes']['sha256']}", f"sha256={f['core-metadata']['sha256']}", f["size"])
            for f in data["files"]
        ]
    for href, meta_hash, size in found:
        href, _, fragment = href.partition("#")
        target = (page.parent / urllib.parse.unquote(href)).resolve()
        assert target.parent == (root / "files").resolve(), f"{page} links {href} outside files/"
        assert target.is_file() and fragment == f"sha256={sha256(target)}", f"{page}: {href} is not that file"
        assert size is None or size == target.stat().st_size, f"{page}: {href} has another size"
        meta = Path(str(target) + ".metadata")
        assert meta_hash == f"sha256={sha256(meta)}", f"{page}: {meta.name} is not what it says"
        links[target.name] = fragment.removeprefix("sha256=")
    return links


def assert_consistent(root: Path, *, settled: bool = True) -> dict[str, set[str]]:
    """The invariant, at any moment: every page parses whole, and every link of it names a complete file in
    files/ with its sha256 (and its metadata file with its sha256); a root page lists only projects whose
    pages are there. Once `settled` (no publish was cut short), each project's JSON and HTML also agree and
    every project folder is listed. Returns index -> the file names it links."""
    listed: dict[str, set[str]] = {}
    for index in sorted(p for p in root.glob("torch*-cu*") if p.is_dir()):
        for project in sorted(p for p in index.iterdir() if p.is_dir()):
            pages = {page.suffix: _links(page, root) for page in sorted(project.glob("index.*"))}
            if settled:
                assert set(pages) == {".html", ".json"} and pages[".html"] == pages[".json"], (
                    f"{project}: its pages disagree"
                )
            for links in pages.values():
                listed.setdefault(index.name, set()).update(links)
        for page in sorted(index.glob("index.*")):
            if page.suffix == ".json":
                projects = {p["name"] for p in json.loads(page.read_text())["projects"]}
            else:
                parser = Anchors()
                parser.feed(page.read_text())
                projects = {a["href"].rstrip("/") for a in parser.links}
            present = {p.name for p in index.iterdir() if (p / f"index{page.suffix}").is_file()}
            assert projects == present if settled else projects <= present, (
                f"{page} lists {projects}, the folder has {present}"
            )
    return listed


def names(built, *keys) -> set[str]:
    return {built[k].name for k in keys}


def test_unverified_or_failed_wheels_are_refused_and_nothing_is_written(tmp_path, built, manifest):
    root = tmp_path / "wheels"
    result = publish([built["glue"], built["kernel"]], tmp_path / "none", root)
    assert result.returncode == 1 and "abi: not run; import: not run; gpu: not run" in result.stdout, result.stdout
    assert "faforge verify" in result.stdout and not root.exists()
    failed = tmp_path / "failed"
    tw.record_gates(failed, built["kernel"])
    tw.record_gates(failed, built["kernel"], ("abi",), "failed")
    result = publish([built["kernel"]], failed, root, "--require", "import")
    assert result.returncode == 1 and "abi: failed" in result.stdout and not root.exists()
    skipped = tmp_path / "skipped"
    tw.record_gates(skipped, built["kernel"], ("abi", "import"))
    tw.record_gates(skipped, built["kernel"], ("gpu",), "skipped")
    assert publish([built["kernel"]], skipped, root).returncode == 1 and not root.exists(), "skipped is not passed"
    result = publish([built["kernel"]], skipped, root, "--require", "abi,import", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / "files" / built["kernel"].name).is_file()


def test_a_glue_wheel_goes_only_with_its_kernel_wheel_and_fa3_only_where_an_index_is(tmp_path, built, manifest):
    root = tmp_path / "wheels"
    alone = publish([built["glue"]], manifest, root)
    assert alone.returncode == 1 and "needs its kernel wheel" in alone.stdout and not root.exists(), alone.stdout
    fa3 = publish([built["fa3"]], manifest, root)
    assert fa3.returncode == 1 and "no index of CUDA 130" in fa3.stdout and not root.exists(), fa3.stdout
    refused_kernel = publish([built["glue_k2"], built["kernel2"]], manifest, root)
    assert refused_kernel.returncode == 1 and "is in this publish but refused" in refused_kernel.stdout, (
        refused_kernel.stdout
    )
    both = publish([built["glue"], built["kernel"], built["fa3"]], manifest, root, "--json")
    assert both.returncode == 0, both.stdout + both.stderr
    report = json.loads(both.stdout)
    jsonschema.validate(report, SCHEMA)
    assert {p["package"]: p["indexes"] for p in report["packages"]} == {
        built["glue"].name: ["torch2.11-cu130"],
        built["kernel"].name: ["torch2.11-cu130"],
        built["fa3"].name: ["torch2.11-cu130"],
    }
    later = publish([built["glue210"]], manifest, root, "--json")  # its kernel is already in the index
    assert later.returncode == 0, later.stdout
    assert assert_consistent(root) == {
        "torch2.11-cu130": names(built, "glue", "kernel", "fa3"),
        "torch2.10-cu130": names(built, "glue210", "kernel", "fa3"),
    }, "the kernel and FA3 follow"


def test_a_kernel_wheel_the_index_refuses_takes_its_glue_with_it(tmp_path, built, manifest, tmp_path_factory):
    """Its gates passed, but it has no Requires-Python: the index cannot list it, so the glue pinning it must
    not be listed either (a glue whose kernel pin no index meets would be a wheel that fails to install)."""
    out = tmp_path_factory.mktemp("no-requires-python")
    local = "cu130.sm80.philox64.h0000003"
    kernel = tw.build_wheel(replace(tw.kernel(local), requires_python=None), out)
    glue = tw.build_wheel(tw.glue("2.13", kernel=f"{tw.SDIST_VERSION}+{local}"), out)
    for wheel in (kernel, glue):
        tw.record_gates(manifest, wheel)
    root = tmp_path / "wheels"
    run = publish([glue, kernel], manifest, root, "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    actions = {p["package"]: (p["action"], p["detail"]) for p in json.loads(run.stdout)["packages"]}
    assert actions[kernel.name][0] == "refused" and "no Requires-Python" in actions[kernel.name][1]
    assert actions[glue.name][0] == "refused" and "is in this publish but refused" in actions[glue.name][1], actions
    assert not root.exists() or not list((root / "files").glob("*.whl"))


def test_a_rebuild_supersedes_the_stale_build_of_its_slot(tmp_path, built, manifest, tmp_path_factory):
    """A glue rebuilt from other inputs has the same version and tags and another build tag (0h<hash>): pip
    orders two such files by the hash's letters, so the stale one could win. Publishing the new build takes
    the old one out of files/ and every page; publishing it again heals what a cut run left."""
    out = tmp_path_factory.mktemp("rebuild")
    new = tw.build_wheel(tw.glue("2.11", build="0h7654321", payload="z = 3\n"), out)
    tw.record_gates(manifest, new)
    root = tmp_path / "wheels"
    assert publish([built["glue"], built["kernel"]], manifest, root).returncode == 0
    run = publish([new], manifest, root, "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    (outcome,) = json.loads(run.stdout)["packages"]
    assert outcome["action"] == "published" and f"supersedes {built['glue'].name}" in outcome["detail"], outcome
    assert not (root / "files" / built["glue"].name).exists()
    assert assert_consistent(root) == {"torch2.11-cu130": {new.name, built["kernel"].name}}
    shutil.copy2(built["glue"], root / "files" / built["glue"].name)  # a cut run: the old file back beside the new
    again = publish([new], manifest, root)
    assert again.returncode == 0 and not (root / "files" / built["glue"].name).exists(), again.stdout
    assert assert_consistent(root) == {"torch2.11-cu130": {new.name, built["kernel"].name}}


def test_a_different_file_of_the_same_name_is_replaced_only_with_force(tmp_path, built, manifest):
    root = tmp_path / "wheels"
    dry = publish([built["glue"], built["kernel"]], manifest, root, "--dry-run", "--json")
    assert dry.returncode == 0 and not root.exists()
    assert [(p["action"], p["indexes"]) for p in json.loads(dry.stdout)["packages"]] == [
        ("would-publish", ["torch2.11-cu130"])
    ] * 2
    assert publish([built["glue"], built["kernel"]], manifest, root).returncode == 0
    same = publish([built["glue"]], manifest, root, "--json")
    assert [p["action"] for p in json.loads(same.stdout)["packages"]] == ["unchanged"]
    clash = publish([built["glue_other"]], manifest, root)
    assert clash.returncode == 1 and "exists" in clash.stdout and "--force" in clash.stdout
    assert sha256(root / "files" / built["glue"].name) == sha256(built["glue"])
    forced = publish([built["glue_other"]], manifest, root, "--force")
    assert forced.returncode == 0, forced.stdout
    assert sha256(root / "files" / built["glue"].name) == sha256(built["glue_other"])
    assert_consistent(root)


def test_index_heals_missing_cut_stale_and_tampered_pages(tmp_path, built, manifest):
    root = tmp_path / "wheels"
    assert publish([built["glue"], built["glue210"], built["kernel"], built["fa3"]], manifest, root).returncode == 0
    before = snapshot(root)
    (root / "torch2.11-cu130" / "flash-attn" / "index.json").unlink()
    page = root / "torch2.11-cu130" / "libflash-attn-kernels" / "index.html"
    page.write_text(page.read_text()[:90])
    (root / "files" / (built["fa3"].name + ".metadata")).write_text("Name: tampered\n")
    (root / "files" / (built["glue210"].name + ".metadata")).unlink()
    check = faforge("index", "--pip", "--check", str(root))
    assert check.returncode == 1 and "run `faforge index --pip" in check.stdout, check.stdout
    healed = faforge("index", "--pip", str(root))
    assert healed.returncode == 0 and "rewrote its pages" in healed.stdout, healed.stdout + healed.stderr
    assert snapshot(root) == before, "the same bytes as the publish wrote"
    (root / "files" / built["glue210"].name).unlink()  # its index has nothing left
    (root / "files" / "README.txt").write_text("not a wheel\n")
    again = faforge("index", "--pip", str(root))
    assert again.returncode == 1 and "not listed: " in again.stdout and "README.txt: not a wheel" in again.stdout, (
        again.stdout
    )
    assert not (root / "torch2.10-cu130").exists(), "an index without a glue wheel is removed"
    assert not (root / "files" / (built["glue210"].name + ".metadata")).exists()
    assert assert_consistent(root) == {"torch2.11-cu130": names(built, "glue", "kernel", "fa3")}
    clean = faforge("index", "--pip", "--check", str(root / "torch2.11-cu130"))
    assert clean.returncode == 0 and "problem" not in clean.stdout, clean.stdout


@pytest.mark.parametrize("where", ["files", "index", "project", "page", "wheel", "lock", "metadata"])
def test_a_link_in_the_index_is_refused_before_anything_is_written(tmp_path, built, manifest, where):
    world = tmp_path / "world"
    root = world / "wheels"
    assert publish([built["glue"], built["kernel"]], manifest, root).returncode == 0
    target = world / "target"
    target.mkdir()
    (target / "victim.whl").write_bytes(b"must survive")
    (target / "index.html").write_text("must survive")
    swap = {
        "files": root / "files",
        "index": root / "torch2.11-cu130",
        "project": root / "torch2.11-cu130" / "flash-attn",
        "page": root / "torch2.11-cu130" / "flash-attn" / "index.html",
        "wheel": root / "files" / built["kernel"].name,
        "lock": root / ".faforge.lock",
        "metadata": root / "files" / (built["kernel"].name + ".metadata"),
    }[where]
    if swap.is_dir():
        shutil.copytree(swap, target / swap.name, dirs_exist_ok=True)
        shutil.rmtree(swap)
        swap.symlink_to(target / swap.name)
    else:
        swap.unlink()
        swap.symlink_to(target / "victim.whl")
    before = snapshot(world)
    for run in (
        publish([built["glue210"]], manifest, root),
        faforge("index", "--pip", str(root)),
        publish([built["glue"]], manifest, root, "--force"),
    ):
        assert run.returncode == 2 and "is a symbolic link" in run.stderr and "Traceback" not in run.stderr, (
            run.stdout + run.stderr
        )
        assert run.stderr.count("\n") <= 2
        assert snapshot(world) == before


def test_concurrent_publishers_are_serialised(tmp_path, built, manifest):
    root = tmp_path / "wheels"
    runs = [
        [built["glue"], built["kernel"]],
        [built["glue210"], built["kernel"]],
        [built["kernel"], built["fa3"], built["glue"]],
        [built["kernel"]],
    ]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faforge",
                "publish",
                *map(str, r),
                "--manifest",
                str(manifest),
                "--index",
                str(root),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in runs
    ]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert [code for code, *_ in results].count(0) >= 3, (
        results
    )  # the FA3 run is refused if it ran before any glue arrived
    assert publish([built["fa3"]], manifest, root).returncode == 0
    assert assert_consistent(root) == {
        "torch2.11-cu130": names(built, "glue", "kernel", "fa3"),
        "torch2.10-cu130": names(built, "glue210", "kernel", "fa3"),
    }
    assert not [p for p in root.rglob(".*") if p.name != ".faforge.lock"], "no partial file left"


# kills and reruns publishes until its time cap (6 s of CPU), as its twin in tests/channel/test_channel_index.py
@pytest.mark.slow
def test_interrupts_at_random_moments_never_break_the_invariant(tmp_path, built, manifest):
    """SIGKILL or SIGINT at a random moment of a publish (seeded, time-capped): after each, every link has
    its complete file with its sha256; a rerun then lists every wheel."""
    wheels = [built[k] for k in ("glue", "glue210", "kernel", "fa3", "glue_k2")]
    wheels.remove(built["glue_k2"])
    seed = int(os.environ.get("FAFORGE_FAULT_SEED", time.time_ns() % 100_000))
    rounds, budget = (
        int(os.environ.get("FAFORGE_FAULT_ROUNDS", "12")),
        float(os.environ.get("FAFORGE_FAULT_SECONDS", "60")),
    )
    print(f"fault injection seed {seed} (rerun with FAFORGE_FAULT_SEED={seed})")
    rng = random.Random(seed)
    prefilled = tmp_path / "prefilled"
    assert publish([built["glue"], built["kernel"]], manifest, prefilled).returncode == 0
    timed = time.monotonic()
    assert publish(wheels, manifest, tmp_path / "timing").returncode == 0
    span = time.monotonic() - timed
    started, done, codes = time.monotonic(), 0, {}
    expected = {
        "torch2.11-cu130": names(built, "glue", "kernel", "fa3"),
        "torch2.10-cu130": names(built, "glue210", "kernel", "fa3"),
    }
    while done < rounds and time.monotonic() - started < budget:
        root = tmp_path / f"r{done}"
        shutil.copytree(prefilled, root)
        signal_, delay = rng.choice([signal.SIGINT, signal.SIGKILL]), rng.uniform(0.2 * span, span)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faforge",
                "publish",
                *map(str, wheels),
                "--manifest",
                str(manifest),
                "--index",
                str(root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_sigint,
        )
        time.sleep(delay)
        proc.send_signal(signal_)
        stderr = proc.communicate(timeout=120)[1]
        if not interrupted_before_faforge(proc.returncode, stderr):
            assert proc.returncode in (0, 130, -2, -9), f"seed {seed} round {done}: exit {proc.returncode}: {stderr}"
        codes[proc.returncode] = codes.get(proc.returncode, 0) + 1
        assert_consistent(root, settled=False)
        rerun = publish(wheels, manifest, root)
        assert rerun.returncode == 0, f"seed {seed} round {done}: {rerun.stdout}{rerun.stderr}"
        assert assert_consistent(root) == expected
        shutil.rmtree(root)
        done += 1
    print(f"fault injection: {done} interrupts, exit codes {codes}")
    assert done >= min(rounds, 6), f"only {done} rounds fit in {budget}s (seed {seed})"


def test_a_full_disk_gives_one_line_and_leaves_a_consistent_index(tmp_path, built, manifest):
    root = tmp_path / "wheels"
    assert publish([built["glue"], built["kernel"]], manifest, root).returncode == 0
    seen = publish_in_mount(
        tmp_path, root, "300k", False, [built["big"]], manifest, "--index"
    )  # the wheel is larger than what is left
    assert seen["rc"] == 2 and "No space left on device" in seen["stderr"] and "Traceback" not in seen["stderr"], seen
    assert (
        seen["stderr"].startswith("faforge publish: error: cannot write to wheel index ")
        and seen["stderr"].count("\n") == 1
    )
    assert seen["after"] == seen["before"]


def test_a_read_only_index_gives_one_line_and_changes_nothing(tmp_path, built, manifest):
    root = tmp_path / "wheels"
    assert publish([built["kernel"]], manifest, root).returncode == 0
    seen = publish_in_mount(tmp_path, root, "4m", True, [built["glue"]], manifest, "--index")
    assert (
        seen["rc"] == 2
        and "read-only file system" in seen["stderr"]
        and seen["stderr"].startswith("faforge publish: error: --index ")
    )
    assert seen["after"] == seen["before"]


def test_conda_options_and_wheels_do_not_mix(tmp_path, built, manifest):
    conda = tmp_path / "x.conda"
    conda.write_bytes(b"")
    for argv, says in (
        ([built["glue"], conda], "separate calls"),
        ([built["glue"], "--to", tmp_path / "ch"], "--to names a conda channel"),
        ([built["glue"], "--channel", tmp_path / "ch"], "--channel names a conda channel"),
        ([conda, "--index", tmp_path / "w"], "--index is the wheel index"),
    ):
        result = faforge("publish", *map(str, argv), "--manifest", str(manifest))
        assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "w").exists() and not (tmp_path / "ch").exists()


def test_the_default_index_is_the_wheels_folder(tmp_path, built, manifest):
    result = faforge("publish", str(built["kernel"]), "--manifest", str(manifest), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "wheels" / "files" / built["kernel"].name).is_file() and "waiting" not in result.stdout
