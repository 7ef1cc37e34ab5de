"""tests/support/shared_files.py links only what is byte for byte the same (the session hook runs it on the cache)."""

from __future__ import annotations

import os

from tests.support.shared_files import share_identical_files


def test_only_same_bytes_of_the_same_path_become_one_file(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for root in (first, second):
        (root / "torch/lib").mkdir(parents=True)
    same = os.urandom(4096)
    (first / "torch/lib/libsame.so").write_bytes(same)
    (second / "torch/lib/libsame.so").write_bytes(same)
    (first / "torch/lib/libother.so").write_bytes(b"a" * 4096)
    (second / "torch/lib/libother.so").write_bytes(b"b" * 4096)  # same size, other bytes
    (first / "small.py").write_bytes(b"x")
    (second / "small.py").write_bytes(b"x")  # below the size floor
    (second / "torch/lib/only-here.so").write_bytes(same)
    (second / "link.so").symlink_to("torch/lib/libsame.so")
    (first / "link.so").write_bytes(same)

    assert share_identical_files(first, second, smallest=1024) == 4096
    assert (second / "torch/lib/libsame.so").stat().st_ino == (first / "torch/lib/libsame.so").stat().st_ino
    assert (second / "torch/lib/libsame.so").read_bytes() == same
    assert (second / "torch/lib/libother.so").read_bytes() == b"b" * 4096
    assert (second / "small.py").stat().st_ino != (first / "small.py").stat().st_ino
    assert (second / "link.so").is_symlink()
    assert sorted(p.name for p in (second / "torch/lib").iterdir()) == ["libother.so", "libsame.so", "only-here.so"]
    assert share_identical_files(first, second, smallest=1024) == 0  # already one file
