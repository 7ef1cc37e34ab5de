"""The pages and the placement, as pure functions of the wheels (faforge.pipindex.pages, .placement):
PEP 503 HTML and PEP 691 JSON with a sha256 in every link, Requires-Python escaped, PEP 658 metadata,
the same bytes for the same wheels, and each wheel in the indexes its own data names."""

from __future__ import annotations

import html.parser
import json
import random
from pathlib import Path

import pytest

from faforge.pipindex.folder import survey
from faforge.pipindex.pages import Link, project_html, project_json
from faforge.pipindex.parse import parse_html, parse_json
from faforge.pipindex.placement import place
from faforge.pipwheel.facts import read_wheel
from tests.support import tiny_wheels as tw

SHA = "a" * 64


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    return {
        "glue211": tw.build_wheel(tw.glue("2.11"), out),
        "glue210": tw.build_wheel(tw.glue("2.10"), out),
        "glue211cu129": tw.build_wheel(
            tw.glue("2.11", "129", kernel=f"{tw.SDIST_VERSION}+cu129.sm80.philox64.h0000001"), out
        ),
        "glue28": tw.build_wheel(tw.glue("2.8"), out),
        "kernel": tw.build_wheel(tw.kernel(), out),
        "fa3": tw.build_wheel(tw.fa3(), out),
        "kernel_unpinned": tw.build_wheel(tw.kernel("cu130.sm90.philox64.hffffff0"), out),
        "foreign": tw.build_wheel(tw.Spec("numpy", "2.0.0", "py3-none-any"), out),
        "glue_nolabel": tw.build_wheel(tw.Spec("flash_attn", "2.8.3.post2", "cp312-cp312-manylinux_2_28_x86_64"), out),
        "glue_wrong_torch": tw.build_wheel(
            tw.Spec(
                "flash_attn",
                "2.8.3.post2+torch2.9.cu130.abi1",
                "cp312-cp312-manylinux_2_28_x86_64",
                requires_dist=("torch>=2.11,<2.12",),
            ),
            out,
        ),
    }


def test_a_link_carries_the_sha256_the_escaped_requires_python_and_the_metadata_hash():
    link = Link(
        "flash_attn-1.0+torch2.11.cu130.abi1-cp312-cp312-manylinux_2_28_x86_64.whl",
        SHA,
        10,
        "1.0+torch2.11.cu130.abi1",
        '>=3.12,<3.13,!="3.12.0"',
        "b" * 64,
    )
    page = project_html("flash-attn", [link]).decode()
    assert (
        'href="../../files/flash_attn-1.0%2Btorch2.11.cu130.abi1-cp312-cp312-manylinux_2_28_x86_64.whl#sha256='
        + SHA
        + '"'
        in page
    )
    assert 'data-requires-python="&gt;=3.12,&lt;3.13,!=&quot;3.12.0&quot;"' in page
    assert f'data-core-metadata="sha256={"b" * 64}"' in page and f'data-dist-info-metadata="sha256={"b" * 64}"' in page
    anchors = []

    class Collect(html.parser.HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag == "a":
                anchors.append(dict(attrs))

    Collect().feed(page)
    assert anchors[0]["data-requires-python"] == '>=3.12,<3.13,!="3.12.0"', "an HTML parser reads back the specifier"
    data = json.loads(project_json("flash-attn", [link]))
    assert data["meta"] == {"api-version": "1.1"} and data["versions"] == ["1.0+torch2.11.cu130.abi1"]
    assert data["files"] == [
        {
            "filename": link.filename,
            "url": "../../files/" + link.filename.replace("+", "%2B"),
            "hashes": {"sha256": SHA},
            "size": 10,
            "requires-python": '>=3.12,<3.13,!="3.12.0"',
            "core-metadata": {"sha256": "b" * 64},
            "dist-info-metadata": {"sha256": "b" * 64},
        }
    ]


def test_our_reader_reads_back_what_the_writer_wrote():
    links = [
        Link(f"flash_attn-1.{i}-cp312-cp312-linux_x86_64.whl", f"{i:064x}", i, f"1.{i}", ">=3.12", None)
        for i in range(3)
    ]
    url = "http://h/torch2.11-cu130/flash-attn/"
    for parse, render in ((parse_html, project_html), (parse_json, project_json)):
        page = parse(render("flash-attn", links), url, project="flash-attn")
        assert [(f.filename, f.hashes, f.requires_python, f.url) for f in page.files] == [
            (k.filename, {"sha256": k.sha256}, ">=3.12", f"http://h/files/{k.filename}") for k in links
        ]


def test_each_wheel_goes_where_its_own_data_says(wheels):
    facts = {k: read_wheel(p) for k, p in wheels.items()}
    placed = place(facts.values())
    names = {index: sorted(w.filename for w in ws) for index, ws in placed.indexes.items()}
    assert sorted(names) == ["torch2.10-cu130", "torch2.11-cu129", "torch2.11-cu130", "torch2.8-cu130"]
    assert names["torch2.11-cu130"] == sorted(
        [facts["glue211"].filename, facts["kernel"].filename, facts["fa3"].filename]
    )
    assert facts["fa3"].filename in names["torch2.10-cu130"] and facts["fa3"].filename not in names["torch2.8-cu130"], (
        "torch>=2.9 only"
    )
    assert facts["fa3"].filename not in names["torch2.11-cu129"], "its CUDA only"
    assert facts["kernel"].filename in names["torch2.8-cu130"], "the kernel goes wherever a glue wheel pins it"
    assert [w.filename for w, _ in placed.waiting] == [facts["kernel_unpinned"].filename]
    problems = {w.filename: why for w, why in placed.problems}
    assert sorted(problems) == sorted(facts[k].filename for k in ("foreign", "glue_nolabel", "glue_wrong_torch"))
    assert "none of the projects" in problems[facts["foreign"].filename]
    assert "names no torch minor" in problems[facts["glue_nolabel"].filename]
    assert "could never install it" in problems[facts["glue_wrong_torch"].filename]


def test_the_pages_are_the_same_bytes_whatever_order_the_wheels_arrive_in(tmp_path, wheels):
    seen = set()
    for seed in range(3):
        root = tmp_path / f"r{seed}"
        (root / "files").mkdir(parents=True)
        keys = list(wheels)
        random.Random(seed).shuffle(keys)
        for key in keys:
            (root / "files" / wheels[key].name).write_bytes(wheels[key].read_bytes())
        seen.add(json.dumps({k: v.hex() for k, v in survey(root).expected.items()}, sort_keys=True))
    assert len(seen) == 1
