"""variants/build-measurements.yaml: canonical form, validation errors that name the key."""

from __future__ import annotations

import pytest

from faforge.costmodel import samples
from faforge.errors import DataError
from faforge.families.flash_attn_3.cost_samples import fa3_measurements
from faforge.family import FLASH_ATTN_3


def test_committed_file_is_in_canonical_form():
    path = samples.default_path()
    assert samples.dump(samples.load(path)) == path.read_text()


def test_append_round_trips(tmp_path):
    path = tmp_path / "m.yaml"
    s = samples.Sample(
        tu="flash_bwd_hdim32_fp16_sm80.cu",
        arch="80",
        nvcc="13.0",
        torch="2.14.1",
        cxx_std="c++20",
        cpu_s=100.5,
        wall_s=300.0,
        peak_rss_gb=3.2,
        source="test",
    )
    r = samples.ReuseRun(
        tus=[s.tu],
        arch="80",
        first="py3.11",
        second="py3.12",
        cold_wall_s=300.0,
        cold_cpu_s=100.5,
        second_wall_s=6.0,
        second_cpu_s=2.0,
        hits=1,
        misses=0,
        cache="ccache 4.14.2",
        source="test",
    )
    samples.append(path, [s], [r])
    loaded = samples.append(path, [s], [])
    assert loaded.samples == (s, s) and loaded.reuse == (r,)
    assert samples.load(path) == loaded
    assert r.hit_rate == 1.0 and r.wall_ratio == pytest.approx(0.02)


BASE = "schema: 1\nsamples: []\nreuse: []\n"
FA3_BUILD = (
    "{build: b, platform: linux-64, archs: 90a, disabled: 'HDIM64,SM8x', nvcc: '13.0', torch: "
    "2.14.1, cpu_s: null, wall_s: null, peak_rss_gb: null, source: s}"
)
FA3_SAMPLE = "{tu: flash_fwd_hdim128_bf16_sm90.cu, build: b, cpu_s: 1, wall_s: 1, peak_rss_gb: null, source: s}"


@pytest.mark.parametrize(
    "text, key",
    [
        ("schema: 2\nsamples: []\nreuse: []\n", "schema"),
        ("schema: 1\nsamples: [{tu: x}]\nreuse: []\n", "samples[0]"),
        (
            "schema: 1\nsamples:\n- {tu: flash_api.cpp, arch: '80', nvcc: '13.0', torch: 2.14.1, cxx_std: "
            "c++20, cpu_s: 1, wall_s: 1, peak_rss_gb: 1, source: s}\nreuse: []\n",
            "samples[0].tu",
        ),
        (
            "schema: 1\nsamples:\n- {tu: flash_fwd_hdim32_fp16_sm80.cu, arch: '80', nvcc: '13.0', torch: "
            "2.14.1, cxx_std: c++20, cpu_s: -1, wall_s: 1, peak_rss_gb: 1, source: s}\nreuse: []\n",
            "samples[0].cpu_s",
        ),
        (f"{BASE}fa3_builds: [{FA3_BUILD.replace('linux-64', 'osx-64')}]\n", "fa3_builds[0].platform"),
        (f"{BASE}fa3_builds: [{FA3_BUILD.replace('90a', '86')}]\n", "fa3_builds[0].archs"),
        (f"{BASE}fa3_builds: [{FA3_BUILD.replace('HDIM64', 'HDIM65')}]\n", "fa3_builds[0].disabled"),
        (f"{BASE}fa3_builds: [{FA3_BUILD}, {FA3_BUILD}]\n", "fa3_builds"),
        (
            f"{BASE}fa3_builds: [{FA3_BUILD}]\nfa3_samples: [{FA3_SAMPLE.replace('build: b', 'build: nope')}]\n",
            "fa3_samples[0].build",
        ),
        # a TU of the full build, not of this one (HDIM64 disabled)
        (
            f"{BASE}fa3_builds: [{FA3_BUILD}]\nfa3_samples: [{FA3_SAMPLE.replace('hdim128', 'hdim64')}]\n",
            "fa3_samples[0].tu",
        ),
        (
            f"{BASE}fa3_builds: [{FA3_BUILD}]\nfa3_samples: [{FA3_SAMPLE.replace('cpu_s: 1', 'cpu_s: -1')}]\n",
            "fa3_samples[0].cpu_s",
        ),
        (
            f"{BASE}fa3_builds: [{FA3_BUILD}]\nfa3_samples: [{FA3_SAMPLE.replace('wall_s: 1', 'wall_s: null')}]\n",
            "fa3_samples[0].wall_s",
        ),
        (f"{BASE}fa3_samples: {{tu: x}}\n", "fa3_samples"),
    ],
)
def test_bad_entries_name_the_key(tmp_path, text, key):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(DataError) as info:
        fa3_measurements(samples.load(path))  # the family checks its own sections
    assert info.value.key == key


def test_a_familys_sections_and_the_header_are_kept_as_read(tmp_path):
    """The file's reader checks no family's entries: a family's own lists (the keys its row declares) come back
    as they were, and so does the comment block a file starts with; a key no family declares is refused; a
    file written anew gets the generic header."""
    section = FLASH_ATTN_3.measurement_sections[0]
    path = tmp_path / "m.yaml"
    text = f"# measured by hand\n{BASE}{section}:\n- build: b\n  cpu_s: 1\n"
    path.write_text(text)
    loaded = samples.load(path)
    assert loaded.sections == {section: [{"build": "b", "cpu_s": 1}]}
    typo = tmp_path / "typo.yaml"
    typo.write_text(f"{BASE}sampels:\n- tu: x\n")
    with pytest.raises(DataError, match="expected keys"):
        samples.load(typo)
    assert samples.dump(loaded) == text
    fresh = tmp_path / "new.yaml"
    samples.append(fresh, [], [])
    assert fresh.read_text().startswith(samples.HEADER)
